"""The SDK stages inside the real engine, after the real static_shapes and
calibration stages, against the stand-in SDK."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Status
from qnn_ci.engine.spec import CalibrationSpec, InputSpec, QuantizationSpec, TargetSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.registry import load_stages
from tests.sdk_tools.conftest import make_export, tiny_conv_model, write_input_list

STAGES = ("static_shapes", "calibration", "dry_run", "convert", "model_lib")


def test_engine_runs_sdk_stages_and_caches(standin_root, tmp_path: Path) -> None:
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=True)
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")}, samples=3)
    export = make_export(tmp_path, model=model, name="tiny",
                         inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")},
                         target=TargetSpec(soc="SM8550", lib_target="x86_64-linux-clang"))
    export = dataclasses.replace(export, calibration=CalibrationSpec(input_list=lst))
    env = Environment(workdir=tmp_path / "work",
                      environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(standin_root())})
    stages = load_stages(STAGES)
    assert list(stages) == list(STAGES)
    results = {r.stage: r for r in Pipeline([export], env, stages=stages).run_export("tiny")}
    assert {s: r.status for s, r in results.items()} == {s: Status.PASSED for s in STAGES}, \
        {s: r.failure_text() for s, r in results.items()}
    conv = results["convert"]
    assert Path(conv.artefacts["cpp"]).parent == tmp_path / "work" / "tiny" / "convert"
    assert results["model_lib"].data["elf_machine"] == 62
    # A second engine reuses every result.
    again = Pipeline([export], env, stages=load_stages(STAGES)).run_export("tiny")
    assert all(r.cached for r in again)
    # Another SDK version invalidates the SDK stages, not the others.
    env2 = Environment(workdir=tmp_path / "work",
                       environ={"PATH": "/usr/bin:/bin",
                                "QNN_SDK_ROOT": str(standin_root("2.13.0"))})
    third = {r.stage: r for r in Pipeline([export], env2, stages=load_stages(STAGES))
             .run_export("tiny")}
    assert third["static_shapes"].cached and third["calibration"].cached
    assert not third["dry_run"].cached and not third["convert"].cached
    assert third["convert"].status == Status.PASSED
    assert "--act_bw" in third["convert"].data["argv"]


def test_encodings_for_another_model_block_the_conversion(standin_root, tmp_path: Path) -> None:
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=True)
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")}, samples=2)
    enc = tmp_path / "other.encodings"
    enc.write_text(json.dumps({"version": "0.6.1", "activation_encodings": {"input.1": [{
        "bitwidth": 16, "dtype": "int", "is_symmetric": "False", "max": 1.0, "min": 0.0,
        "offset": 0, "scale": 1.0 / 65535}]}, "param_encodings": {}}))
    export = make_export(tmp_path, model=model, name="tiny",
                         inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")},
                         quantization=QuantizationSpec(overrides=enc))
    export = dataclasses.replace(export, calibration=CalibrationSpec(input_list=lst))
    env = Environment(workdir=tmp_path / "work",
                      environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(standin_root())})
    stages = load_stages(("static_shapes", "calibration", "encodings", "dry_run", "convert"))
    results = {r.stage: r for r in Pipeline([export], env, stages=stages).run_export("tiny")}
    assert results["encodings"].status == Status.FAILED
    assert "different model" in results["encodings"].summary
    assert results["dry_run"].status == Status.PASSED
    assert results["convert"].status == Status.SKIPPED
    assert results["convert"].summary == "blocked by tiny::encodings"
    assert not (tmp_path / "work" / "tiny" / "convert").exists()      # never ran
