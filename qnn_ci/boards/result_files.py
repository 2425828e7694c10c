"""Check what qnn-net-run left in ``<out>/Result_<N>/``: a folder per sample, every
output in each, the expected size, no NaN/Inf. An exit status of 0 proves
nothing on its own: a missing or short file is a failure.

Output files are found the way ``qnn_ci.compare`` finds them (``match_names``):
by name or converter-sanitised name, also below a ``<graph name>/`` folder or in
sub-folders a ``/`` in a tensor name made (``Result_0/feat/map_0.raw``) — the
reference marks both layouts as not confirmed, so both are accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qnn_ci.compare.outputs import NATIVE_SUFFIX, RESULT_DIR, match_names
from qnn_ci.engine.results import Finding

_CHUNK = 4 * 1024 * 1024   # elements per NaN-scan chunk


@dataclass(frozen=True)
class ExpectedOutput:
    """An output qnn-net-run should write: its name, file name, size and native dtype."""

    name: str                   # graph output name
    file: str                   # file base name (the converter-sanitized name)
    count: int | None           # element count, None when unknown
    native_dtype: str | None = None   # numpy dtype of <file>_native.raw (converter _net.json)


def result_files(out_dir: Path) -> dict[int, dict[str, Path]]:
    """{sample: {relative output file (no .raw): path}} for every Result_N folder.
    Only regular files count (a folder, FIFO or device named ``*.raw`` is not an
    output); of ``Result_3`` and ``Result_03`` the first in name order is kept."""
    found: dict[int, dict[str, Path]] = {}
    if not out_dir.is_dir():
        return found
    for rdir in sorted(out_dir.iterdir()):
        m = RESULT_DIR.match(rdir.name)
        if m is None or not rdir.is_dir() or int(m.group(1)) in found:
            continue
        files = {}
        for f in sorted(rdir.rglob("*.raw")):
            if f.is_file():
                files[f.relative_to(rdir).as_posix()[:-4]] = f
        found[int(m.group(1))] = files
    return found


def match_outputs(names: Iterable[str], keys: Iterable[str], *,
                  native: bool = False) -> dict[str, str]:
    """Graph output name -> file key (a path below ``Result_N`` without ``.raw``) for
    the float files, or with ``native`` the ``<tensor>_native`` files; names without
    a unique file are left out."""
    by_base = _by_base(keys, native)
    return {name: by_base[base] for name, base in match_names(names, by_base).items()}


def _by_base(keys: Iterable[str], native: bool) -> dict[str, str]:
    """{key without the _native suffix: key} for the native keys, or the float ones."""
    by_base: dict[str, str] = {}
    for key in keys:
        is_native = key.endswith(NATIVE_SUFFIX) and len(key) > len(NATIVE_SUFFIX)
        if is_native == native:
            by_base[key[: -len(NATIVE_SUFFIX)] if native else key] = key
    return by_base


def _nonfinite(path: Path, dtype: np.dtype | str = "<f4") -> int:
    dt = np.dtype(dtype)
    size = path.stat().st_size // dt.itemsize
    if size == 0:
        return 0
    data = np.memmap(path, dtype=dt, mode="r", shape=(size,))
    bad = 0
    for start in range(0, size, _CHUNK):
        bad += int((~np.isfinite(data[start:start + _CHUNK])).sum())
    del data
    return bad


def check_result_files(out_dir: Path, *, samples: int, backend: str, board: str,
                       expected: list[ExpectedOutput] | None = None,
                       native: bool = False) -> list[Finding]:
    """Findings for missing Result_N folders, missing / short / empty output files
    and NaN/Inf values in float outputs (float32, or a native float type)."""
    label = f"{backend.upper()} backend on board {board}"
    findings: list[Finding] = []
    found = result_files(out_dir)
    suffix = NATIVE_SUFFIX if native else ""
    if expected is None:
        bases = sorted({b for files in found.values() for b in _by_base(files, native)})
        expected = [ExpectedOutput(b, b, None) for b in bases]
    # per sample: graph output name -> that sample's file (None: missing)
    paths = {n: match_outputs([e.name for e in expected], files, native=native)
             for n, files in found.items()}
    for n in range(samples):
        if n not in found:
            findings.append(Finding(
                "board.result_missing",
                f"{label}: qnn-net-run wrote no Result_{n} for sample {n} "
                f"(input-list line {n + 1}) although it exited 0", subject=f"Result_{n}"))
    sizes: dict[str, Counter[int]] = {e.name: Counter() for e in expected}
    for n, files in found.items():
        for name, key in paths[n].items():
            sizes[name][files[key].stat().st_size] += 1
    for exp in expected:
        typical = sizes[exp.name].most_common(1)[0][0] if sizes[exp.name] else None
        for n, files in sorted(found.items()):
            if n >= samples:
                continue
            key = paths[n].get(exp.name)
            where = f"output {exp.name} of sample {n} ({label})"
            if key is None:
                findings.append(Finding("board.output_missing",
                                        f"{where}: Result_{n}/{exp.file}{suffix}.raw is "
                                        "missing", subject=exp.name))
                continue
            path = files[key]
            size = path.stat().st_size
            dt = np.dtype(exp.native_dtype) if native and exp.native_dtype else None
            if dt is not None and exp.count is not None:
                want = exp.count * dt.itemsize
                short = size != want
                detail = f"{size} bytes, expected {want} ({exp.count} {dt.name} values)"
            elif native:
                want = None if exp.count is None else exp.count   # bytes per element unknown
                short = size == 0 or (want is not None and size % want != 0)
                detail = f"{size} bytes is not a whole number of {want} elements"
            else:
                want = None if exp.count is None else exp.count * 4
                short = size == 0 or size % 4 != 0 or (want is not None and size != want) \
                    or (want is None and typical is not None and size != typical)
                ref = want if want is not None else typical
                detail = f"{size} bytes, expected {ref} ({(ref or 0) // 4} float32 values)"
            if short:
                findings.append(Finding("board.output_short",
                                        f"{where}: Result_{n}/{key}.raw has {detail}",
                                        subject=exp.name))
                continue
            scan = np.dtype("<f4") if not native else dt
            if scan is not None and scan.kind == "f":
                bad = _nonfinite(path, scan)
                if bad:
                    findings.append(Finding(
                        "board.output_nan",
                        f"{where}: Result_{n}/{key}.raw holds {bad} NaN/Inf value(s) "
                        f"of {size // scan.itemsize}", subject=exp.name))
    return findings
