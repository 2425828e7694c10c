"""Plugin overhead: 100 exports, then the same run again with every stage cached.

Prints the wall time of a first run (stage work done), of a second run (all
stage work cached: collection, cache-key checks, reports), the second run's time
per export, and the second run as a fraction of the first.

    python benchmarks/plugin_overhead.py [--exports 100] [--real]

``--real`` uses the PP-OCR classifier from the rapidocr wheel for every export
(realistic stage work: shape inference, onnxruntime fill and equivalence runs)
instead of a tiny MatMul graph (the hard case for the fraction).

Goals: <= 20 ms per export, second run <= 5 % of the first. The stages that run
are the host ones (static shapes, calibration); SDK and board stages skip here
and the simulator stages are deselected, so the first run is cheap and the
fraction is a hard test of the cached path.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GEN = '''
import numpy as np

def samples(count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {"x": rng.normal(size=SHAPE).astype(np.float32)}
'''


def make_model(path: Path, i: int) -> None:
    w = numpy_helper.from_array(np.full((64, 64), 0.01 * (i + 1), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        f"m{i}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def run(folder: Path, *extra: str, target: str = "qnn-ci.yaml", ok: tuple[int, ...] = (0,)
        ) -> float:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-m", "qnn and not qnn_sim", target, *extra]
    t = time.perf_counter()
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    elapsed = time.perf_counter() - t
    if proc.returncode not in ok:
        sys.exit(f"pytest failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exports", type=int, default=100)
    ap.add_argument("--real", action="store_true", help="PP-OCR classifier for every export")
    args = ap.parse_args()
    n = args.exports
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "gens.py").write_text(
            GEN.replace("SHAPE", "(1, 3, 48, 192)" if args.real else "(1, 64)"))
        shape = "[1, 3, 48, 192]" if args.real else "[1, 64]"
        lines = ["defaults:", f"  inputs: {{x: {{shape: {shape}}}}}",
                 "  calibration: {generator: 'gens:samples', samples: 4, held_out: 0}",
                 "exports:"]
        for i in range(n):
            if args.real:
                model = "pkg:rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
            else:
                make_model(folder / f"m{i}.onnx", i)
                model = f"m{i}.onnx"
            lines += [f"  - name: e{i}", f"    model: {model}"]
        (folder / "qnn-ci.yaml").write_text("\n".join(lines) + "\n")
        (folder / "empty").mkdir()
        startup = run(folder, "--collect-only", target="empty", ok=(5,))
        first = run(folder)
        second = run(folder)
        collect = run(folder, "--collect-only")
    what = "PP-OCR classifier" if args.real else "tiny MatMul graph"
    print(f"{n} exports of a {what} (static_shapes + calibration run; SDK/board stages skip)")
    print(f"pytest start-up alone          : {startup:.2f} s")
    print(f"first run (stage work done)    : {first:.2f} s")
    print(f"second run (all stages cached) : {second:.2f} s")
    print(f"collection only                : {collect:.2f} s")
    print(f"second run per export          : {1000 * second / n:.1f} ms (goal <= 20 ms)")
    print(f"  without pytest start-up      : {1000 * (second - startup) / n:.1f} ms")
    print(f"second / first                 : {100 * second / first:.1f} % (goal <= 5 %)")


if __name__ == "__main__":
    main()
