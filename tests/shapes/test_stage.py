"""The `static_shapes` pipeline stage, directly and through a manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Status
from qnn_ci.engine.spec import ExportSpec, InputSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.static_shapes import StaticShapesStage

from .conftest import make_model, save, tensor


def _ctx(tmp_path: Path, model: Path, shapes: dict[str, tuple[int, ...]],
         opset: int | None = None) -> StageContext:
    export = ExportSpec(name="e", model=model, manifest=tmp_path / "qnn-ci.yaml", line=7,
                        inputs={n: InputSpec(n, s) for n, s in shapes.items()}, opset=opset)
    workdir = tmp_path / "work" / "e" / "static_shapes"
    workdir.mkdir(parents=True)
    return StageContext(export=export, env=Environment(workdir=tmp_path / "work"),
                        workdir=workdir, upstream={})


@pytest.fixture
def two_inputs(tmp_path: Path) -> Path:
    model = make_model([helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
                        helper.make_node("Add", ["x", "f"], ["y"], name="add")],
                       [tensor("x", ["B", 8]), tensor("ids", ["B", 8], TensorProto.INT64)],
                       [tensor("y", ["B", 8])])
    return save(model, tmp_path / "two.onnx")


def test_stage_passes_and_publishes_pinned_model(tmp_path: Path, two_inputs: Path) -> None:
    ctx = _ctx(tmp_path, two_inputs, {"x": (2, 8), "ids": (2, 8)}, opset=17)
    result = StaticShapesStage().run(ctx)
    assert result.status == Status.PASSED, result.failure_text()
    assert result.stage == "static_shapes"
    model_path = Path(result.artefacts["model"])
    assert model_path == ctx.workdir / "two.static.onnx" and model_path.is_file()
    assert onnx.load(str(model_path)).opset_import[0].version == 17
    report = json.loads(Path(result.artefacts["report"]).read_text("utf-8"))
    assert report["static"] is True and report["output_model"] == str(model_path)
    assert result.data["inputs"] == [{"name": "x", "dtype": "float32", "shape": [2, 8]},
                                     {"name": "ids", "dtype": "int64", "shape": [2, 8]}]
    assert result.data["outputs"] == [{"name": "y", "dtype": "float32", "shape": [2, 8]}]
    assert result.properties == {"dynamic_count": 0, "unshaped_count": 0, "filled_count": 0,
                                 "equivalent": True}
    assert result.summary == "static: 2 tensors, 0 filled from onnxruntime, equivalent"


def test_stage_fails_on_unpinned_input(tmp_path: Path, two_inputs: Path) -> None:
    result = StaticShapesStage().run(_ctx(tmp_path, two_inputs, {"x": (2, 8)}))
    assert result.status == Status.FAILED
    text = result.failure_text()
    assert "input 'ids' is dynamic" in text and "set inputs.ids.shape" in text
    assert Path(result.artefacts["model"]).is_file()
    assert result.properties["dynamic_count"] == 1


def test_stage_bad_dims_name_the_manifest_key(tmp_path: Path, two_inputs: Path) -> None:
    with pytest.raises(UserError) as info:
        StaticShapesStage().run(_ctx(tmp_path, two_inputs, {"x": (2, 8, 1), "ids": (2, 8)}))
    line = info.value.oneline()
    assert line.startswith(f"{tmp_path / 'qnn-ci.yaml'}:7: inputs.x.shape: 3 dims")


def test_stage_fingerprint_is_model_sha256(tmp_path: Path, two_inputs: Path) -> None:
    fp = StaticShapesStage().fingerprint(_ctx(tmp_path, two_inputs, {}))
    assert fp == {"model_sha256": hashlib.sha256(two_inputs.read_bytes()).hexdigest(),
                  "external_data": {}}


def test_stage_fingerprint_covers_external_weights(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, location="ext.bin",
              size_threshold=0)
    ctx = _ctx(tmp_path, path, {})
    first = StaticShapesStage().fingerprint(ctx)
    assert set(first["external_data"]) == {"ext.bin"}
    data = bytearray((tmp_path / "ext.bin").read_bytes())
    data[0] ^= 0xFF                      # new weights, same .onnx
    (tmp_path / "ext.bin").write_bytes(bytes(data))
    assert StaticShapesStage().fingerprint(ctx) != first


def test_stage_real_vad_fails_with_reason(tmp_path: Path, vad_model: Path) -> None:
    """Through the manifest, with the sample rate given as a fixed input value."""
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text(f"""exports:
  - name: vad
    model: {vad_model}
    inputs:
      input: {{shape: [1, 512]}}
      state: {{shape: [2, 1, 128]}}
      sr: {{value: 16000}}
""", "utf-8")
    exports = load_manifest(manifest).exports
    pipe = Pipeline(exports, Environment(workdir=tmp_path / "work"),
                    stages={"static_shapes": StaticShapesStage()})
    (result,) = pipe.run_export("vad")
    assert result.status == Status.FAILED
    assert result.properties["equivalent"] is False
    text = result.failure_text()
    assert "does not load in onnxruntime" in text and "rank 3" in text


def test_stage_through_manifest_and_pipeline(tmp_path: Path, cls_model: Path) -> None:
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text(f"""exports:
  - name: cls
    model: {cls_model}
    inputs:
      x:
        shape: [1, 3, 48, 192]
""", "utf-8")
    exports = load_manifest(manifest).exports
    pipe = Pipeline(exports, Environment(workdir=tmp_path / "work"),
                    stages={"static_shapes": StaticShapesStage()})
    (result,) = pipe.run_export("cls")
    assert result.status == Status.PASSED, result.failure_text()
    assert result.summary.startswith("static: ") and "filled from onnxruntime" in result.summary
    assert result.data["inputs"] == [{"name": "x", "dtype": "float32",
                                      "shape": [1, 3, 48, 192]}]
    assert result.data["outputs"][0]["shape"] == [1, 2]
    assert result.properties["filled_count"] > 0
    assert Path(result.artefacts["model"]).name == "ch_ppocr_mobile_v2.0_cls_infer.static.onnx"
