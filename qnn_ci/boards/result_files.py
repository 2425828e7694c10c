"""Check what qnn-net-run left in ``<out>/Result_<N>/``: a folder per sample, every
output in each, the expected size, no NaN/Inf. An exit status of 0 proves
nothing on its own: a missing or short file is a failure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qnn_ci.results import Finding

_CHUNK = 4 * 1024 * 1024   # elements per NaN-scan chunk


@dataclass(frozen=True)
class ExpectedOutput:
    name: str                   # graph output name
    file: str                   # file base name (the converter-sanitized name)
    count: int | None           # element count, None when unknown


def result_files(out_dir: Path) -> dict[int, dict[str, Path]]:
    """{sample: {relative output file (no .raw): path}} for every Result_N folder."""
    found: dict[int, dict[str, Path]] = {}
    if not out_dir.is_dir():
        return found
    for rdir in out_dir.iterdir():
        if not (rdir.is_dir() and rdir.name.startswith("Result_")
                and rdir.name[7:].isdigit()):
            continue
        files = {}
        for f in sorted(rdir.rglob("*.raw")):
            files[f.relative_to(rdir).as_posix()[:-4]] = f
        found[int(rdir.name[7:])] = files
    return found


def _nonfinite(path: Path) -> int:
    size = path.stat().st_size // 4
    if size == 0:
        return 0
    data = np.memmap(path, dtype="<f4", mode="r", shape=(size,))
    bad = 0
    for start in range(0, size, _CHUNK):
        bad += int((~np.isfinite(data[start:start + _CHUNK])).sum())
    del data
    return bad


def check_result_files(out_dir: Path, *, samples: int, backend: str, board: str,
                       expected: list[ExpectedOutput] | None = None,
                       native: bool = False) -> list[Finding]:
    """Findings for missing Result_N folders, missing / short / empty output files
    and NaN/Inf values in float32 outputs."""
    label = f"{backend.upper()} backend on board {board}"
    findings: list[Finding] = []
    found = result_files(out_dir)
    suffix = "_native" if native else ""
    if expected is not None:
        names = {e.file + suffix: e for e in expected}
    else:
        union = sorted({k for files in found.values() for k in files})
        names = {k: ExpectedOutput(k, k.removesuffix(suffix), None) for k in union}
    for n in range(samples):
        if n not in found:
            findings.append(Finding(
                "board.result_missing",
                f"{label}: qnn-net-run wrote no Result_{n} for sample {n} "
                f"(input-list line {n + 1}) although it exited 0", subject=f"Result_{n}"))
    sizes: dict[str, Counter[int]] = {k: Counter() for k in names}
    for files in found.values():
        for key in names:
            if key in files:
                sizes[key][files[key].stat().st_size] += 1
    for key, exp in names.items():
        typical = sizes[key].most_common(1)[0][0] if sizes[key] else None
        for n, files in sorted(found.items()):
            if n >= samples:
                continue
            path = files.get(key)
            where = f"output {exp.name} of sample {n} ({label})"
            if path is None:
                findings.append(Finding("board.output_missing",
                                        f"{where}: Result_{n}/{key}.raw is missing",
                                        subject=exp.name))
                continue
            size = path.stat().st_size
            if native:
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
            if not native:
                bad = _nonfinite(path)
                if bad:
                    findings.append(Finding(
                        "board.output_nan",
                        f"{where}: Result_{n}/{key}.raw holds {bad} NaN/Inf value(s) "
                        f"of {size // 4}", subject=exp.name))
    return findings
