"""The input-list format shared by qnn-onnx-converter (`--input_list`) and
qnn-net-run: one line per sample, space-separated `name:=/abs/path.raw` entries
(or plain paths in graph-input order), an optional first line starting with `#`.
Raw files are headerless little-endian dumps in the input's exact dtype.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnn_ci.calibration.list_tokens import check_list_path, check_names
from qnn_ci.errors import UserError

if TYPE_CHECKING:   # numpy only when arrays are read or written (cached runs skip it)
    import numpy as np


@dataclass(frozen=True)
class InputLine:
    """One sample line of an input list: its (input name, raw file) entries."""

    lineno: int
    entries: tuple[tuple[str | None, str], ...]   # (name or None for a plain path, path)
    text: str = ""                                # the line, stripped (for diagnostics)


@dataclass(frozen=True)
class InputList:
    """A parsed `input_list.txt`: the optional header and its sample lines."""

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
        lines.append(InputLine(n, tuple(entries), stripped))
    return InputList(path, header, tuple(lines))


# Longest run of whitespace-separated tokens tried as one path with whitespace.
_MAX_JOIN = 16


def _spaced_path(line: InputLine) -> str | None:
    """An existing file whose path holds whitespace, split into several entries of
    ``line`` (a folder named `my project`): the cause to name instead of the symptom."""
    parts = re.split(r"(\s+)", line.text)
    tokens = parts[0::2]
    for i, first in enumerate(tokens):
        head = first.partition(":=")[2] if ":=" in first else first
        joined = head
        for j in range(i + 1, min(len(tokens), i + _MAX_JOIN)):
            if ":=" in tokens[j]:
                break
            joined += parts[2 * j - 1] + tokens[j]
            try:
                if Path(joined).is_file():
                    return joined
            except (OSError, ValueError):
                return None
    return None


def _spaced_name(line: InputLine, input_names: list[str]) -> str | None:
    """A graph input whose name holds whitespace, split by the list's separators."""
    spaced = [n for n in input_names if any(c.isspace() for c in n)]
    for name in spaced:
        if f"{name}:=" in line.text or name in line.text:
            return name
    return None


def explain_split(line: InputLine, input_names: list[str], *, source: Path) -> None:
    """Raise the real cause when a line was split by whitespace inside a path or name."""
    name = _spaced_name(line, input_names)
    if name is not None:
        check_names([name], file=source, line=line.lineno)
    path = _spaced_path(line)
    if path is not None:
        check_list_path(path, file=source, line=line.lineno)


def resolve_line(line: InputLine, input_names: list[str], *, source: Path) -> dict[str, Path]:
    """Map one line to {graph input: path}; plain paths go in graph-input order."""
    if all(name is None for name, _ in line.entries):
        if len(line.entries) != len(input_names):
            explain_split(line, input_names, source=source)
            raise UserError(f"{len(line.entries)} plain paths for {len(input_names)} graph "
                            f"inputs ({', '.join(input_names)})", file=source, line=line.lineno)
        return {n: Path(p) for n, (_, p) in zip(input_names, line.entries, strict=True)}
    if any(name is None for name, _ in line.entries):
        explain_split(line, input_names, source=source)
        raise UserError("mixes `name:=path` entries and plain paths", file=source,
                        line=line.lineno)
    return {str(name): Path(p) for name, p in line.entries}


def read_input_list(path: Path, input_names: list[str]) -> list[dict[str, Path]]:
    """Samples as {graph input: raw file}; names are not checked here (see validate).
    A graph input whose name no input list can hold is refused at once."""
    check_names(input_names, file=path)
    parsed = parse_input_list(path)
    return [resolve_line(line, input_names, source=path) for line in parsed.lines]


def write_input_list(path: Path, samples: list[dict[str, Path]], input_names: list[str]) -> None:
    """One line per sample, every graph input named, absolute paths. A name or path
    the format cannot carry is refused (UserError), never written."""
    check_names(input_names)
    rows = []
    for sample in samples:
        entries = []
        for n in input_names:
            p = Path(sample[n]).resolve()
            check_list_path(p)
            entries.append(f"{n}:={p}")
        rows.append(" ".join(entries) + "\n")
    with path.open("w", encoding="utf-8") as fh:
        fh.writelines(rows)


def write_raw(array: np.ndarray, path: Path, dtype: str) -> None:
    """Headerless little-endian dump in exactly ``dtype``."""
    import numpy as np

    arr = np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<"))
    arr.tofile(path)


def read_raw(path: Path, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    import numpy as np

    data = np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))
    return data.reshape(shape).astype(np.dtype(dtype), copy=False)
