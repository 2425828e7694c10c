"""Peak RSS of a whole process tree, and the detector measurement of
``benchmarks/diagnose.py``: ``qnn-ci sim`` with and without ``--diagnose`` on
PP-OCRv4 det at 1x3x640x640 (issue 25: peak RSS with --diagnose <= 1.5x without).

``peak_rss(argv)`` runs a command and samples every ~50 ms the RSS (``VmRSS``)
of it and all its descendants (children of children included, found through
``/proc/<pid>/task/<tid>/children``), summed; the peak of that sum is reported
(shared pages count once per process, as a memory limit sees them not: an upper
bound).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import goal_line

SHAPE = (1, 3, 640, 640)
CALIBRATION, HELD_OUT = 4, 2


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_rss(pid: int) -> int:
    total, stack, seen = 0, [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss(p)
        stack += _children(p)
    return total


def peak_rss(argv: list[str], *, env: dict[str, str] | None = None,
             interval: float = 0.05) -> tuple[int, float, subprocess.CompletedProcess[str]]:
    """(peak tree RSS in bytes, wall seconds, the finished process) of ``argv``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    wall = time.perf_counter() - start
    return peak[0], wall, subprocess.CompletedProcess(argv, proc.returncode, out, err)


def detector_file() -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    return (Path(next(iter(spec.submodule_search_locations)))
            / "models/ch_PP-OCRv4_det_infer.onnx")


def pages(count: int, seed: int) -> tuple[list[Any], str]:
    """Detector inputs: light pages with dark rendered text lines, normalised as
    rapidocr's detector does (ImageNet mean / std); random data without Pillow."""
    import numpy as np

    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(count)], \
            "random data (no Pillow)"
    rnd = random.Random(seed)
    words = ("invoice total amount date paid qnn htp layout table figure section "
             "chapter 2026 page summary result 42.00 EUR").split()
    try:
        font: Any = ImageFont.load_default(size=22)
    except TypeError:                     # Pillow < 10.1
        font = ImageFont.load_default()
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    out = []
    for _ in range(count):
        page = Image.new("RGB", (SHAPE[3], SHAPE[2]), (240, 238, 232))
        draw = ImageDraw.Draw(page)
        y = rnd.randint(10, 30)
        while y < SHAPE[2] - 40:
            text = " ".join(rnd.choice(words) for _ in range(rnd.randint(2, 7)))
            shade = rnd.randint(0, 60)
            draw.text((rnd.randint(10, 120), y), text, fill=(shade, shade, shade), font=font)
            y += rnd.randint(30, 60)
        arr = (np.asarray(page, dtype=np.float32) / 255.0 - mean) / std
        out.append(arr.transpose(2, 0, 1)[np.newaxis].astype(np.float32))
    return out, "rendered text pages"


def _input_list(folder: Path, arrays: list[Any], name: str) -> Path:
    from qnn_ci.calibration.input_list import write_input_list, write_raw

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, arr in enumerate(arrays):
        raw = folder / f"{name}_{i}.raw"
        write_raw(arr, raw, "float32")
        rows.append({"x": raw})
    path = folder / f"{name}.txt"
    write_input_list(path, rows, ["x"])
    return path


def _phases(report: dict[str, Any]) -> str:
    parts = [f"{k} {v:.1f} s" for k, v in (report.get("durations") or {}).items()
             if isinstance(v, (int, float))]
    numerics = report.get("numerics") or {}
    if "sim_s_per_inference" in numerics:
        parts.append(f"simulated inference {numerics['sim_s_per_inference']:.1f} s each")
    cost = (report.get("diagnosis") or {}).get("cost") or {}
    parts += [f"{k} {v:.1f} s" for k, v in cost.items()
              if isinstance(v, (int, float)) and k.endswith("_s")]
    return ", ".join(parts) or "-"


def detector_rss(goal: float) -> None:
    model = detector_file()
    qnn_ci = Path(sys.executable).with_name("qnn-ci")
    with tempfile.TemporaryDirectory(prefix="qnn-ci-rss-") as tmp:
        work = Path(tmp)
        cal, source = pages(CALIBRATION, seed=1)
        held, _ = pages(HELD_OUT, seed=2)
        cal_list = _input_list(work / "cal", cal, "cal")
        held_list = _input_list(work / "held", held, "held")
        base = [str(qnn_ci), "sim", str(model), "--soc", "QCS6490", "--dim",
                f"x={','.join(map(str, SHAPE))}", "--calibration", str(cal_list),
                "--test-inputs", str(held_list), "--samples", str(HELD_OUT), "--json"]
        print(f"PP-OCRv4 det {'x'.join(map(str, SHAPE))}, {CALIBRATION} calibration + "
              f"{HELD_OUT} held-out {source}; peak RSS of the whole process tree "
              "(sampled every 50 ms, children summed)", flush=True)
        runs: dict[str, tuple[int, float, dict[str, Any]]] = {}
        for label, extra in (("sim", []), ("sim --diagnose", ["--diagnose", "--budget", "300"])):
            peak, wall, done = peak_rss([*base, "--out", str(work / label.replace(" ", "_")),
                                         *extra])
            if done.returncode not in (0, 1):
                sys.exit(f"qnn-ci {label} exited {done.returncode}:\n{done.stderr[-3000:]}")
            report = json.loads(done.stdout)
            runs[label] = (peak, wall, report)
            print(f"  qnn-ci {label}: peak RSS {peak / 2**30:.2f} GiB, wall {wall:.0f} s "
                  f"(exit {done.returncode}); phases: {_phases(report)}", flush=True)
            sweep_lines = [x for x in done.stderr.splitlines() if "per-layer sweep" in x]
            for line in sweep_lines[:2]:
                print(f"    {line}")
        ratio = runs["sim --diagnose"][0] / max(1, runs["sim"][0])
        print(goal_line("PP-OCRv4 det 640x640 peak RSS, qnn-ci sim --diagnose / qnn-ci sim",
                        ratio, f"<= {goal}x", ratio <= goal, unit="x"))
