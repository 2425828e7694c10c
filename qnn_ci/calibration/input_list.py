"""The input-list format shared by qnn-onnx-converter (`--input_list`) and
qnn-net-run: one line per sample, space-separated `name:=/abs/path.raw` entries
(or plain paths in graph-input order), an optional first line starting with `#`.
Raw files are headerless little-endian dumps in the input's exact dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qnn_ci.errors import UserError


@dataclass(frozen=True)
class InputLine:
    lineno: int
    entries: tuple[tuple[str | None, str], ...]   # (name or None for a plain path, path)


@dataclass(frozen=True)
class InputList:
    path: Path
    header: str | None            # the optional leading `#` line
    lines: tuple[InputLine, ...]


def parse_input_list(path: Path) -> InputList:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("input list not found", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read input list: {exc}", file=path) from None
    header: str | None = None
    lines: list[InputLine] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if lines or header is not None:
                raise UserError("a `#` line is only allowed as the first line",
                                file=path, line=n)
            header = stripped
            continue
        entries: list[tuple[str | None, str]] = []
        for tok in stripped.split():
            if ":=" in tok:
                name, _, p = tok.partition(":=")
                entries.append((name, p))
            else:
                entries.append((None, tok))
        lines.append(InputLine(n, tuple(entries)))
    return InputList(path, header, tuple(lines))


def resolve_line(line: InputLine, input_names: list[str], *, source: Path) -> dict[str, Path]:
    """Map one line to {graph input: path}; plain paths go in graph-input order."""
    if all(name is None for name, _ in line.entries):
        if len(line.entries) != len(input_names):
            raise UserError(f"{len(line.entries)} plain paths for {len(input_names)} graph "
                            f"inputs ({', '.join(input_names)})", file=source, line=line.lineno)
        return {n: Path(p) for n, (_, p) in zip(input_names, line.entries, strict=True)}
    if any(name is None for name, _ in line.entries):
        raise UserError("mixes `name:=path` entries and plain paths", file=source,
                        line=line.lineno)
    return {str(name): Path(p) for name, p in line.entries}


def read_input_list(path: Path, input_names: list[str]) -> list[dict[str, Path]]:
    """Samples as {graph input: raw file}; names are not checked here (see validate)."""
    parsed = parse_input_list(path)
    return [resolve_line(line, input_names, source=path) for line in parsed.lines]


def write_input_list(path: Path, samples: list[dict[str, Path]], input_names: list[str]) -> None:
    """One line per sample, every graph input named, absolute paths."""
    with path.open("w", encoding="utf-8") as fh:
        for sample in samples:
            fh.write(" ".join(f"{n}:={Path(sample[n]).resolve()}" for n in input_names) + "\n")


def write_raw(array: np.ndarray, path: Path, dtype: str) -> None:
    """Headerless little-endian dump in exactly ``dtype``."""
    arr = np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<"))
    arr.tofile(path)


def read_raw(path: Path, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    data = np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))
    return data.reshape(shape).astype(np.dtype(dtype), copy=False)
