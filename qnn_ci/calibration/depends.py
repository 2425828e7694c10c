"""``calibration.depends``: the data files a generator reads (paths or globs relative
to the manifest's folder, ``**`` allowed), hashed into the calibration cache key."""

from __future__ import annotations

import glob
from pathlib import Path

from qnn_ci.engine.cache import file_digest
from qnn_ci.errors import UserError


def _matches(pattern: str, base_dir: Path) -> list[Path]:
    found = glob.glob(pattern, root_dir=base_dir, recursive=True, include_hidden=True)
    literal = base_dir / pattern
    if not found and literal.exists():     # a real name holding glob characters: "[1].wav"
        found = [pattern]
    files: set[Path] = set()
    for match in found:
        p = base_dir / match
        if p.is_dir():                     # a folder stands for every file below it
            files.update(q for q in p.rglob("*") if q.is_file())
        elif p.is_file():
            files.add(p)
    return sorted(files)


def _label(path: Path, base_dir: Path) -> str:
    return path.relative_to(base_dir).as_posix() if path.is_relative_to(base_dir) \
        else str(path)


def depends_digests(patterns: tuple[str, ...], base_dir: Path, *,
                    key: str = "calibration.depends") -> dict[str, str]:
    """``{file: sha256}`` over every file the patterns match. A pattern that matches no
    file is an error: a typo must not silently cover nothing."""
    base = base_dir.resolve()
    out: dict[str, str] = {}
    for i, pattern in enumerate(patterns):
        try:
            files = _matches(pattern, base)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot expand {pattern!r}: {exc}", key=f"{key}[{i}]") from None
        if not files:
            raise UserError(f"{pattern!r} matches no file under {base} (paths and globs are "
                            "relative to the manifest's folder; `**` matches any depth)",
                            key=f"{key}[{i}]")
        for f in files:
            try:
                out[_label(f, base)] = file_digest(f)
            except OSError as exc:
                raise UserError(f"cannot read {f} (matched by {pattern!r}): "
                                f"{exc.strerror or exc}", key=f"{key}[{i}]") from None
    return dict(sorted(out.items()))
