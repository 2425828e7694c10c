"""Calibration capture vs bare onnxruntime inference, on the same samples, in one run.

A `from:` calibration chain runs the upstream export's model in onnxruntime on
its calibration inputs and writes the real outputs as the downstream export's
calibration data. This times the real `calibration` stage of a downstream export
(session, reading the upstream samples, inference, dtype/shape checks, the
synthetic-data checks, writing `.raw` files and the input lists) against what it
cannot avoid: a bare onnxruntime session running the same model on the same
samples, read from the same files.

    python benchmarks/calibration_overhead.py [--samples 40] [--repeats 3]

Goal: stage / bare <= 1.10. Upstream: the PP-OCRv4 detector from the rapidocr
wheel (1x3x480x640 in, 1x1x480x640 out: 1.2 MB written per sample).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from qnn_ci.calibration.input_list import read_input_list
from qnn_ci.calibration.sources import Expected, load_sample
from qnn_ci.manifest import load_manifest
from qnn_ci.pipeline import Pipeline
from qnn_ci.stage import Environment, StageContext
from qnn_ci.stages.calibration import CalibrationStage

GEN = '''
import numpy as np

def pages(count):
    """Smooth image-like fields rather than white noise."""
    rng = np.random.default_rng(0)
    for _ in range(count):
        base = rng.normal(size=(1, 3, 30, 40)).astype(np.float32)
        yield {"x": np.kron(base, np.ones((1, 1, 16, 16), np.float32))}
'''


def det_model() -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    return Path(next(iter(spec.submodule_search_locations))) / "models/ch_PP-OCRv4_det_infer.onnx"


def downstream_model(path: Path, in_name: str) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", [in_name], ["out"])], "down",
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, [1, 1, 480, 640])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 480, 640])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    det = det_model()
    out_name = ort.InferenceSession(str(det), providers=["CPUExecutionProvider"]) \
        .get_outputs()[0].name
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "gens.py").write_text(GEN)
        downstream_model(folder / "down.onnx", "maps")
        (folder / "qnn-ci.yaml").write_text(f"""
exports:
  - name: det
    model: {det}
    inputs: {{x: {{shape: [1, 3, 480, 640]}}}}
    calibration: {{generator: "gens:pages", samples: {args.samples}, held_out: 0}}
  - name: down
    model: down.onnx
    calibration: {{from: {{export: det, outputs: {{"{out_name}": maps}}}}}}
""")
        manifest = load_manifest(folder / "qnn-ci.yaml")
        env = Environment(workdir=folder / "work")
        pipe = Pipeline(manifest.exports, env)
        for export, stage in (("det", "calibration"), ("down", "static_shapes")):
            if not pipe.result(export, stage).ok:
                sys.exit(f"{export}::{stage} failed: {pipe.result(export, stage).summary}")
        up_cal = pipe.result("det", "calibration")
        up_inputs = [Expected("x", "float32", (1, 3, 480, 640))]
        up_samples = read_input_list(Path(up_cal.artefacts["input_list"]), ["x"])
        up_model = Path(pipe.result("det", "static_shapes").artefacts["model"])
        stage = CalibrationStage()
        ctx_base = {"upstream": {"static_shapes": pipe.result("down", "static_shapes")},
                    "peer_results": {"det": {"static_shapes": pipe.result("det", "static_shapes"),
                                             "calibration": up_cal}}}

        def bare() -> float:
            t = time.perf_counter()
            so = ort.SessionOptions()
            so.log_severity_level = 3
            session = ort.InferenceSession(str(up_model), so,
                                           providers=["CPUExecutionProvider"])
            for paths in up_samples:
                session.run([out_name], load_sample(paths, up_inputs))
            elapsed = time.perf_counter() - t
            del session
            return elapsed

        def capture(run: int) -> float:
            workdir = folder / f"stage{run}"
            workdir.mkdir()
            ctx = StageContext(export=manifest.export("down"), env=env, workdir=workdir,
                               all_exports=pipe.exports, **ctx_base)  # type: ignore[arg-type]
            t = time.perf_counter()
            result = stage.run(ctx)
            elapsed = time.perf_counter() - t
            if not result.ok:
                sys.exit(f"calibration stage failed: {result.failure_text()}")
            return elapsed

        bare()  # warm-up: allocations, page cache
        capture(-1)
        bare_t, cap_t = [], []
        for r in range(args.repeats):
            # Alternate the order so load from other processes hits both sides alike.
            if r % 2:
                cap_t.append(capture(r))
                bare_t.append(bare())
            else:
                bare_t.append(bare())
                cap_t.append(capture(r))
    b, c = statistics.median(bare_t), statistics.median(cap_t)
    n = args.samples
    print(f"upstream model: {det.name}, {n} samples x {args.repeats} repeats (median)")
    print(f"bare onnxruntime (session + inference) : {b:.3f} s  ({1000 * b / n:.1f} ms/sample)")
    print(f"calibration stage of a from: export    : {c:.3f} s  ({1000 * c / n:.1f} ms/sample)")
    print(f"ratio stage / bare                     : {c / b:.3f}  (goal <= 1.10)")


if __name__ == "__main__":
    main()
