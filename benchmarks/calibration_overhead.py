"""Calibration capture vs bare onnxruntime inference, on the same samples, in one run.

A `from:` calibration chain runs the upstream export's model in onnxruntime on
its calibration inputs and writes the real outputs as the downstream export's
calibration data. This measures what that capture adds over the inference it
cannot avoid: reading the inputs, running the model, checking and writing the
outputs (`.raw` files and nothing else).

    python benchmarks/calibration_overhead.py [--samples 20] [--repeats 3]

Goal: capture / bare <= 1.10. Uses the PP-OCRv4 detector from the rapidocr wheel
(1x3x480x640 in, 1x1x480x640 out: 1.2 MB written per sample).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from qnn_ci.calibration.sources import (
    Expected,
    UpstreamRunner,
    check_sample,
    load_sample,
    write_sample,
)


def model_path() -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    return Path(next(iter(spec.submodule_search_locations))) / "models/ch_PP-OCRv4_det_infer.onnx"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model = model_path()
    shape = (1, 3, 480, 640)
    up = [Expected("x", "float32", shape)]
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        rng = np.random.default_rng(0)
        inputs = []
        for i in range(args.samples):
            p = tmpd / f"x_{i}.raw"
            # A smooth image-like field rather than white noise.
            base = rng.normal(size=(1, 3, 30, 40)).astype(np.float32)
            img = np.kron(base, np.ones((1, 1, 16, 16), np.float32))
            img.tofile(p)
            inputs.append({"x": p})
        probe = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        out_name = probe.get_outputs()[0].name
        del probe
        runner = UpstreamRunner(model, up, {out_name: "maps"})
        # The same session for both: a second session's idle worker threads would
        # spin and steal the CPU from the one being timed.
        bare_session = runner.session
        down = [Expected("maps", "float32", (1, 1, 480, 640))]

        def bare(paths: dict[str, Path]) -> float:
            t = time.perf_counter()
            bare_session.run([out_name], load_sample(paths, up))
            return time.perf_counter() - t

        def capture(paths: dict[str, Path], folder: Path, i: int) -> float:
            t = time.perf_counter()
            outs = check_sample(runner.run(paths), down, where=f"sample {i}")
            write_sample(outs, down, folder, i)
            return time.perf_counter() - t

        out_dir = tmpd / "out"
        out_dir.mkdir()
        for i, paths in enumerate(inputs[:3]):  # warm-up: allocations, page cache
            bare(paths)
            capture(paths, out_dir, i)
        bare_t, cap_t = [], []
        for _ in range(args.repeats):
            b_sum = c_sum = 0.0
            # Alternate sample by sample, in both orders, so load from other
            # processes hits both sides alike.
            for i, paths in enumerate(inputs):
                if i % 2:
                    b_sum += bare(paths)
                    c_sum += capture(paths, out_dir, i)
                else:
                    c_sum += capture(paths, out_dir, i)
                    b_sum += bare(paths)
            bare_t.append(b_sum)
            cap_t.append(c_sum)
    b, c = statistics.median(bare_t), statistics.median(cap_t)
    n = args.samples
    print(f"model: {model.name}, {n} samples x {args.repeats} repeats (median)")
    print(f"bare onnxruntime inference : {b:.3f} s  ({1000 * b / n:.1f} ms/sample)")
    print(f"calibration capture        : {c:.3f} s  ({1000 * c / n:.1f} ms/sample)")
    print(f"ratio capture / bare       : {c / b:.3f}  (goal <= 1.10)")


if __name__ == "__main__":
    main()
