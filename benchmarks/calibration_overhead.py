"""Calibration capture vs bare onnxruntime inference, on the same samples, in one run.

A `from:` calibration chain runs the upstream export's model in onnxruntime on
its calibration inputs and writes the real outputs as the downstream export's
calibration data. This times the real `calibration` stage of a downstream export
(session, reading the upstream samples, inference, dtype/shape checks, the
synthetic-data checks, writing `.raw` files and the input lists) against what it
cannot avoid: a bare onnxruntime session running the same model on the same
samples, read from the same files.

    python benchmarks/calibration_overhead.py [--samples 20] [--repeats 5]

Both sides run in this process (the stage is in-process work in both shells),
paired (bare, stage, bare, stage, ...) after one warm-up pair, median and min of
``--repeats``. Each stage run gets a fresh work folder, so it computes (the
content-keyed store, ``qnn_ci.engine.shared_results``, would otherwise hand it the previous
run's samples) and its cost includes storing them for other exports.

Goal: stage / bare <= 1.10. Upstream: the PP-OCRv4 detector from the rapidocr
wheel (1x3x480x640 in, 1x1x480x640 out: 1.2 MB written per sample).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
from _harness import NOISE_NOTE, goal_line, paired
from _workload import PAGES_GEN, det_model
from onnx import TensorProto, helper

from qnn_ci.calibration.input_list import read_input_list
from qnn_ci.calibration.sources import Expected, load_sample
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.calibration import CalibrationStage
from qnn_ci.stages.registry import load_stages


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
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    det = det_model()
    out_name = ort.InferenceSession(str(det), providers=["CPUExecutionProvider"]) \
        .get_outputs()[0].name
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "gens.py").write_text(PAGES_GEN)
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
        pipe = Pipeline(manifest.exports, env, stages=load_stages())
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

        def bare() -> None:
            so = ort.SessionOptions()
            so.log_severity_level = 3
            session = ort.InferenceSession(str(up_model), so,
                                           providers=["CPUExecutionProvider"])
            for paths in up_samples:
                session.run([out_name], load_sample(paths, up_inputs))
            del session

        runs = iter(range(1_000_000))

        def capture() -> None:
            run = next(runs)
            run_env = Environment(workdir=folder / f"stage{run}")
            workdir = run_env.workdir / "down" / "calibration"
            workdir.mkdir(parents=True)
            ctx = StageContext(export=manifest.export("down"), env=run_env, workdir=workdir,
                               all_exports=pipe.exports, **ctx_base)  # type: ignore[arg-type]
            result = stage.run(ctx)
            if not result.ok or "shared_from" in result.properties:
                sys.exit(f"calibration stage did not compute: {result.failure_text()}")

        res = paired(bare, capture, repeat=args.repeats, warmup=1)
    n = args.samples
    print(f"upstream model: {det.name}, {n} samples, {args.repeats} pairs in this process "
          f"{NOISE_NOTE}")
    print("yardstick: a bare onnxruntime session running the same model on the same files")
    print(res.describe("bare onnxruntime (session + inference)",
                       "calibration stage of a from: export"))
    print(f"  per sample: bare {1000 * res.a.median / n:.1f} ms, stage "
          f"{1000 * res.b.median / n:.1f} ms (medians)")
    print(goal_line("calibration stage / bare onnxruntime", res.ratio, "<= 1.10x",
                    res.ratio <= 1.10, unit="x"))


if __name__ == "__main__":
    main()
