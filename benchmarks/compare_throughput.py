"""Throughput of `qnn-ci compare` on large outputs against the bare minimum (a script, not a test).

Writes two float32 output sets of ``--gb`` GB each (one ``Result_0/out.raw`` per
set) to a temporary folder, reads both files once so the page cache is warm, then
times two whole processes, paired (A, B, B, A, A, B, ...: who goes first
alternates), ``--repeat`` times each after one warm-up pair:

- ``ours``: ``qnn-ci compare A B --json``, the command a user runs: start-up,
  loading both output sets, every metric (cosine, SNR, PSNR, max/mean |err|, the
  peaks, NaN/Inf counts, the |err| quantiles and histogram) and the report;
- ``np.dot``: the yardstick, a bare ``python -c`` loop over the same two files:
  memory-map both, walk them in float32 blocks of ``--block`` elements and sum
  ``np.dot(r, r)``, ``np.dot(t, t)``, ``np.dot(r, t)`` per block into float64,
  then print the cosine. That is the least any tool must do to report a cosine
  of two raw float32 files, and it keeps every file page resident.

GB/s counts the bytes of BOTH inputs per second of a whole process. The goal is on
the ratio of medians (ours' throughput / the yardstick's); the per-pair ratios are
printed too. Peak RSS is each process's own ``ru_maxrss`` (from ``wait4``; this
parent imports no numpy and stays small, since Linux carries a parent's peak into
a child's across exec). Both sides' cosines are printed: they must agree.
``--gb`` may be given more than once (one block of lines and goal lines per size).
With ``polygraphy`` installed, Polygraphy's comparators run once on the first
``--polygraphy-gb`` GB for scale. The files are deleted at the end.

    python benchmarks/compare_throughput.py [--gb 1] [--gb 0.25] [--repeat 5]

Goals: ours >= 0.5 x the yardstick's throughput; ours' peak RSS <= 300 MiB.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _harness import NOISE_NOTE, goal_line, venv_bin

GB = 1e9
BLOCK = 1 << 18                 # the yardstick's float32 block: the blocks of qnn-ci's float32 pass
ROOT = Path(__file__).resolve().parent.parent

YARDSTICK = """\
import sys
import numpy as np
block = int(sys.argv[3])
r = np.memmap(sys.argv[1], dtype=np.float32, mode="r")
t = np.memmap(sys.argv[2], dtype=np.float32, mode="r")
rr = tt = rt = 0.0
for s in range(0, len(r), block):
    a = r[s:s + block]
    b = t[s:s + block]
    rr += float(np.dot(a, a))
    tt += float(np.dot(b, b))
    rt += float(np.dot(a, b))
print(rt / (rr ** 0.5 * tt ** 0.5))
"""

MAKE = """\
import sys
import numpy as np
ref, test, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
step = 16 * 1024 * 1024
rng = np.random.default_rng(0)
with open(ref, "wb") as fr, open(test, "wb") as ft:
    for start in range(0, n, step):
        m = min(step, n - start)
        r = rng.standard_normal(m, dtype=np.float32)
        fr.write(r.tobytes())
        r += np.float32(0.01) * rng.standard_normal(m, dtype=np.float32)
        ft.write(r.tobytes())
"""

POLYGRAPHY = """\
import json, resource, sys, time
import numpy as np
from polygraphy.comparator import (CosineSimilarityCompareFunc, IterationResult,
                                   PsnrCompareFunc, SimpleCompareFunc, SnrCompareFunc)
from polygraphy.logger import G_LOGGER
G_LOGGER.module_severity = G_LOGGER.ERROR
count = int(sys.argv[3])
t0 = time.perf_counter()
a = np.fromfile(sys.argv[1], dtype=np.float32, count=count)
b = np.fromfile(sys.argv[2], dtype=np.float32, count=count)
t1 = time.perf_counter()
r0 = IterationResult({"out": a}, runner_name="ref")
r1 = IterationResult({"out": b}, runner_name="test")
for func in (SimpleCompareFunc(), CosineSimilarityCompareFunc(), SnrCompareFunc(),
             PsnrCompareFunc()):
    func(r0, r1)
t2 = time.perf_counter()
print(json.dumps({"seconds": t2 - t0, "compare_only": t2 - t1, "bytes": 8.0 * count,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


@dataclass
class Run:
    """One whole process: wall seconds, its own peak RSS and what it printed."""

    seconds: float
    rss_mib: float
    stdout: str


def run_child(argv: list[str]) -> Run:
    """Run ``argv`` to the end; its wall time and its own ``ru_maxrss`` (``wait4``)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
        assert proc.stdout is not None
        out = proc.stdout.read()        # to EOF; wait4 below reaps the child, not Popen
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.stdout.close()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            err.seek(0)
            sys.exit(f"{' '.join(argv[:3])} ... exited {code}:\n"
                     f"{err.read().decode(errors='replace')[-3000:]}")
    return Run(seconds, usage.ru_maxrss / 1024.0, out.decode())


def warm(paths: list[Path]) -> float:
    """Read the files once (page cache warm); GB/s of that read."""
    buf = bytearray(4 * 1024 * 1024)
    total, t0 = 0, time.perf_counter()
    for p in paths:
        with p.open("rb", buffering=0) as fh:
            while k := fh.readinto(buf):
                total += k
    return total / GB / (time.perf_counter() - t0)


def paired_runs(ours: list[str], yard: list[str], repeat: int) -> dict[str, list[Run]]:
    """One warm-up pair, then ``repeat`` pairs, alternating who goes first."""
    runs: dict[str, list[Run]] = {"ours": [], "np.dot": []}
    for i in range(repeat + 1):
        order = (("ours", ours), ("np.dot", yard))
        for name, argv in order if i % 2 else order[::-1]:
            r = run_child(argv)
            if i:
                runs[name].append(r)
    return runs


def _ours_cosine(run: Run) -> float:
    report = json.loads(run.stdout)
    return float(report["outputs"][0]["samples"][0]["metrics"]["cosine"])


def measure(folder: Path, gb: float, repeat: int, block: int) -> tuple[float, float]:
    """Write 2 x ``gb`` GB, time both sides; (throughput ratio, ours' peak RSS MiB)."""
    ref = folder / "ref" / "Result_0" / "out.raw"
    test = folder / "test" / "Result_0" / "out.raw"
    for p in (ref, test):
        p.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing 2 x {gb:g} GB of float32 to {folder} ...", flush=True)
    run_child([sys.executable, "-c", MAKE, str(ref), str(test), str(int(gb * GB) // 4)])
    size = ref.stat().st_size + test.stat().st_size
    print(f"page cache: warm (both files read once before timing, at "
          f"{warm([ref, test]):.2f} GB/s)", flush=True)
    ours = [venv_bin("qnn-ci"), "compare", str(ref.parent.parent), str(test.parent.parent),
            "--json"]
    yard = [sys.executable, "-c", YARDSTICK, str(ref), str(test), str(block)]
    runs = paired_runs(ours, yard, repeat)
    med = {k: statistics.median(r.seconds for r in v) for k, v in runs.items()}
    low = {k: min(r.seconds for r in v) for k, v in runs.items()}
    print(f"{repeat} pairs of whole processes, 2 x {gb:g} GB {NOISE_NOTE}")
    print(f"yardstick: np.dot cosine over float32 blocks of {block} elements (memmap)")
    cos = {"ours": _ours_cosine(runs["ours"][0]),
           "np.dot": float(runs["np.dot"][0].stdout.split()[-1])}
    for name, rs in runs.items():
        print(f"  {name:<7} median {size / GB / med[name]:6.2f} GB/s ({med[name]:.3f} s), best "
              f"{size / GB / low[name]:6.2f} GB/s ({low[name]:.3f} s); peak RSS "
              f"{max(r.rss_mib for r in rs):.0f} MiB; cosine {cos[name]:.9f}")
    per_pair = [y.seconds / o.seconds for o, y in zip(runs["ours"], runs["np.dot"], strict=True)]
    ratio = med["np.dot"] / med["ours"]
    print(f"  ours / np.dot throughput: ratio of medians {ratio:.2f}, of bests "
          f"{low['np.dot'] / low['ours']:.2f}, per-pair median {statistics.median(per_pair):.2f} "
          f"(pairs {', '.join(f'{x:.2f}' for x in per_pair)})")
    if abs(cos["ours"] - cos["np.dot"]) > 1e-6:
        sys.exit(f"the cosines disagree: {cos}")
    peak = max(r.rss_mib for r in runs["ours"])
    print(goal_line(f"compare throughput ours / np.dot cosine, 2 x {gb:g} GB float32", ratio,
                    ">= 0.50x", ratio >= 0.5, unit="x"))
    print(goal_line(f"compare peak RSS, 2 x {gb:g} GB float32 (ours, largest of "
                    f"{len(runs['ours'])} runs)", round(peak), "<= 300 MiB", peak <= 300,
                    unit=" MiB"), flush=True)
    return ratio, peak


def polygraphy(folder: Path, gb: float) -> None:
    ref = folder / "ref" / "Result_0" / "out.raw"
    test = folder / "test" / "Result_0" / "out.raw"
    count = min(int(gb * GB), ref.stat().st_size) // 4
    out = run_child([sys.executable, "-c", POLYGRAPHY, str(ref), str(test), str(count)]).stdout
    r = json.loads(out.strip().splitlines()[-1])     # Polygraphy may log on stdout first
    print(f"  polygraphy {r['bytes'] / GB / r['seconds']:6.2f} GB/s ({r['seconds']:.2f} s for "
          f"{r['bytes'] / GB:.2f} GB incl. loading; compare alone "
          f"{r['bytes'] / GB / r['compare_only']:.2f} GB/s; peak RSS {r['rss_mb']:.0f} MiB)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--gb", type=float, action="append",
                    help="size of EACH output file in GB (repeatable; default 1)")
    ap.add_argument("--repeat", type=int, default=5, help="timed pairs per size")
    ap.add_argument("--block", type=int, default=BLOCK, help="the yardstick's block (elements)")
    ap.add_argument("--polygraphy-gb", type=float, default=0.25,
                    help="bytes of each file Polygraphy gets (it loads whole arrays); 0: skip")
    ap.add_argument("--dir", help="where to write the temporary files (default: $TMPDIR)")
    args = ap.parse_args(argv)
    for gb in args.gb or [1.0]:
        folder = Path(tempfile.mkdtemp(prefix="qnn-ci-bench-", dir=args.dir))
        try:
            measure(folder, gb, args.repeat, args.block)
            if args.polygraphy_gb > 0 and gb == (args.gb or [1.0])[-1]:
                if importlib.util.find_spec("polygraphy") is None:
                    print("  polygraphy not installed")
                else:
                    polygraphy(folder, args.polygraphy_gb)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
