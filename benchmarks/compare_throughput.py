"""Throughput of `qnn_ci.compare` over large memory-mapped outputs (a script, not a test).

Writes two float32 output sets of ``--gb`` GB each (one ``Result_0/out.raw``
per set) to a temporary folder, reads both files once so the page cache is
warm, then times, each in a fresh child process (so each has its own peak RSS;
the parent stays small because Linux carries a parent's peak RSS into a child's
``ru_maxrss`` across exec):

- ``ours``: ``load_output_set`` + ``compare_sets`` over the memmapped files;
- ``numpy``: a bare chunked pass over the same memmaps with the same float64
  accumulators (Σr², Σt², Σrt, Σe², Σ|e|, max|e|, max|r|) and nothing else:
  the fastest honest baseline for the same numbers;
- ``polygraphy``: Polygraphy's comparators (simple max/mean/median abs+rel,
  cosine, SNR, PSNR) on the first ``--polygraphy-gb`` GB, loaded into memory
  (they need whole arrays), when ``polygraphy`` imports.

GB/s counts the bytes of BOTH inputs (reference + test) per second. ``ours`` and
``numpy`` run paired (ours, numpy, numpy, ours, ... alternating who goes first),
``--repeat`` times each (default 5, one warm-up pair first); median and min are
reported, and the goal is on the ratio of medians. Yardstick: the bare numpy pass.
The files are deleted at the end.

    python benchmarks/compare_throughput.py [--gb 1] [--repeat 5]

Goals: our throughput >= 0.5 x the bare numpy pass's; our peak RSS <= 300 MiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _harness import NOISE_NOTE, goal_line

GB = 1e9
WRITE_CHUNK = 16 * 1024 * 1024      # elements generated per write


def _make_files(ref: Path, test: Path, n: int) -> dict[str, float]:
    ref.parent.mkdir(parents=True)
    test.parent.mkdir(parents=True)
    rng = np.random.default_rng(0)
    with ref.open("wb") as fr, test.open("wb") as ft:
        for start in range(0, n, WRITE_CHUNK):
            m = min(WRITE_CHUNK, n - start)
            r = rng.standard_normal(m, dtype=np.float32)
            fr.write(r.tobytes())
            r += np.float32(0.01) * rng.standard_normal(m, dtype=np.float32)
            ft.write(r.tobytes())
    return {}


def _warm(paths: list[Path]) -> float:
    buf = bytearray(4 * 1024 * 1024)
    total, t0 = 0, time.perf_counter()
    for p in paths:
        with p.open("rb", buffering=0) as fh:
            while k := fh.readinto(buf):
                total += k
    return total / GB / (time.perf_counter() - t0)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- workers (run in a child process) -------------------------------------------------

def _worker_ours(ref: Path, test: Path, chunk: int) -> dict[str, float]:
    from qnn_ci.compare import compare_sets, load_output_set

    before = _rss_mb()
    t0 = time.perf_counter()
    comp = compare_sets(load_output_set(ref.parent.parent), load_output_set(test.parent.parent),
                        chunk=chunk)
    dt = time.perf_counter() - t0
    m = comp.outputs[0].samples[0].metrics
    assert m is not None
    return {"seconds": dt, "rss_before_mb": before, "rss_peak_mb": _rss_mb(),
            "cosine": m.cosine or 0.0, "max_abs": m.max_abs or 0.0}


def _worker_numpy(ref: Path, test: Path, chunk: int) -> dict[str, float]:
    before = _rss_mb()
    t0 = time.perf_counter()
    a = np.memmap(ref, dtype=np.float32, mode="r")
    b = np.memmap(test, dtype=np.float32, mode="r")
    r = np.empty(chunk)
    t = np.empty(chunk)
    e = np.empty(chunk)
    rr = tt = rt = ee = sa = mx = peak = 0.0
    for s in range(0, len(a), chunk):
        n = min(chunk, len(a) - s)
        rv, tv, ev = r[:n], t[:n], e[:n]
        np.copyto(rv, a[s:s + n])
        np.copyto(tv, b[s:s + n])
        rr += rv @ rv
        tt += tv @ tv
        rt += rv @ tv
        np.subtract(tv, rv, out=ev)
        ee += ev @ ev
        np.abs(ev, out=ev)
        sa += ev.sum()
        mx = max(mx, ev.max())
        peak = max(peak, rv.max(), -rv.min())
    dt = time.perf_counter() - t0
    return {"seconds": dt, "rss_before_mb": before, "rss_peak_mb": _rss_mb(),
            "cosine": float(rt / np.sqrt(rr) / np.sqrt(tt)), "max_abs": float(mx)}


def _worker_polygraphy(ref: Path, test: Path, nbytes: int) -> dict[str, float]:
    from polygraphy.comparator import (
        CosineSimilarityCompareFunc,
        IterationResult,
        PsnrCompareFunc,
        SimpleCompareFunc,
        SnrCompareFunc,
    )
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR
    before = _rss_mb()
    t0 = time.perf_counter()
    a = np.fromfile(ref, dtype=np.float32, count=nbytes // 4)
    b = np.fromfile(test, dtype=np.float32, count=nbytes // 4)
    t1 = time.perf_counter()
    r0 = IterationResult({"out": a}, runner_name="ref")
    r1 = IterationResult({"out": b}, runner_name="test")
    for func in (SimpleCompareFunc(), CosineSimilarityCompareFunc(), SnrCompareFunc(),
                 PsnrCompareFunc()):
        func(r0, r1)
    t2 = time.perf_counter()
    return {"seconds": t2 - t0, "compare_only_seconds": t2 - t1, "rss_before_mb": before,
            "rss_peak_mb": _rss_mb(), "bytes": 2.0 * (nbytes // 4) * 4}


def _child(kind: str, ref: Path, test: Path, arg: int) -> dict[str, float] | None:
    cmd = [sys.executable, __file__, "--worker", kind, "--ref", str(ref), "--test", str(test),
           "--arg", str(arg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parent.parent)
    if proc.returncode:
        print(f"  {kind}: failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of EACH output file (GB)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="elements per chunk (default: qnn-ci's own)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per method (paired)")
    ap.add_argument("--polygraphy-gb", type=float, default=0.25,
                    help="bytes of each file Polygraphy gets (it loads whole arrays)")
    ap.add_argument("--dir", help="where to write the temporary files (default: $TMPDIR)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ref", help=argparse.SUPPRESS)
    ap.add_argument("--test", help=argparse.SUPPRESS)
    ap.add_argument("--arg", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        fn = {"ours": _worker_ours, "numpy": _worker_numpy, "make": _make_files,
              "polygraphy": _worker_polygraphy}[args.worker]
        print(json.dumps(fn(Path(args.ref), Path(args.test), args.arg)))
        return 0
    if args.chunk is None:      # read here, not at import: the workers do not need it
        from qnn_ci.compare.metrics import DEFAULT_CHUNK

        args.chunk = DEFAULT_CHUNK

    folder = Path(tempfile.mkdtemp(prefix="qnn-ci-bench-", dir=args.dir))
    try:
        print(f"writing 2 x {args.gb:g} GB of float32 to {folder} ...")
        ref = folder / "ref" / "Result_0" / "out.raw"
        test = folder / "test" / "Result_0" / "out.raw"
        _child("make", ref, test, int(args.gb * GB) // 4)   # a child: keeps our RSS small
        size = ref.stat().st_size + test.stat().st_size
        print(f"page cache: warm (both files read once before timing, at "
              f"{_warm([ref, test]):.2f} GB/s)")
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "numpy": []}
        for i in range(args.repeat + 1):                 # the first pair is a warm-up
            for kind in (("ours", "numpy") if i % 2 else ("numpy", "ours")):
                res = _child(kind, ref, test, args.chunk)
                if res is None:
                    return 1
                if i:
                    runs[kind].append(res)
        med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
        low = {k: min(r["seconds"] for r in v) for k, v in runs.items()}
        print(f"{args.repeat} pairs of whole child processes {NOISE_NOTE}")
        print("yardstick: a bare chunked numpy pass over the same memmaps (same sums)")
        for kind, rs in runs.items():
            r = rs[0]
            print(f"  {kind:<10} median {size / GB / med[kind]:6.2f} GB/s, best "
                  f"{size / GB / low[kind]:6.2f} GB/s ({med[kind]:.2f} s median for "
                  f"{size / GB:.2f} GB; peak RSS {max(x['rss_peak_mb'] for x in rs):.0f} MiB, "
                  f"{r['rss_before_mb']:.0f} MiB before; cosine {r['cosine']:.6f}, max_abs "
                  f"{r['max_abs']:.4g})")
        ratio = med["numpy"] / med["ours"]
        print(f"  ratio ours/numpy throughput: median {ratio:.2f}, best "
              f"{low['numpy'] / low['ours']:.2f}")
        print(goal_line("compare throughput ours / bare numpy", ratio, ">= 0.50x",
                        ratio >= 0.5, unit="x"))
        peak = max(x["rss_peak_mb"] for x in runs["ours"])
        print(goal_line(f"compare peak RSS, 2 x {args.gb:g} GB float32 (ours, largest of "
                        f"{len(runs['ours'])} runs)", round(peak), "<= 300 MiB", peak <= 300,
                        unit=" MiB"))
        try:
            import polygraphy  # noqa: F401
        except ImportError:
            print("  polygraphy not installed")
        else:
            nbytes = min(int(args.polygraphy_gb * GB), ref.stat().st_size)
            r = _child("polygraphy", ref, test, nbytes) or {}
            if r:
                print(f"  polygraphy {r['bytes'] / GB / r['seconds']:6.2f} GB/s  "
                      f"({r['seconds']:.2f} s for {r['bytes'] / GB:.2f} GB incl. loading; "
                      f"compare alone {r['bytes'] / GB / r['compare_only_seconds']:.2f} GB/s; "
                      f"peak RSS {r['rss_peak_mb']:.0f} MiB)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
