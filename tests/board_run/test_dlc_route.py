"""The DLC route in the real engine: the stand-in SDK's ``qairt-converter``,
``qairt-quantizer`` and ``qairt-dlc-info``, the host's ``qnn-context-binary-generator``
with ``libQnnModelDlc.so``, then ``context_run`` on the stand-in board over a real sshd
runs the host-built binary as it runs a board-built one. The host stages the two routes
share give the same results from one cache entry."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    ExportSpec,
    InputSpec,
    OriginalSpec,
    QuantizationSpec,
    TargetSpec,
)
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, Board, build_cnn, write_samples
from tests.sim.conftest import REASON as SIM_REASON

HOST = ("static_shapes", "calibration", "matches_original", "encodings", "sim_npu",
        "sim_numerics")
DLC = ("dlc_convert", "dlc_quantize", "dlc_contract", "dlc_fp16_gate", "dlc_context_binary",
       "context_run")


def _encodings(path: Path) -> Path:
    """AIMET overrides for the CNN's first weights."""
    path.write_text(json.dumps({
        "version": "0.6.1", "activation_encodings": {},
        "param_encodings": {"w1": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "True",
                                    "min": -1.0, "max": 1.0, "offset": -128,
                                    "scale": 1 / 127}]}}))
    return path


@pytest.mark.skipif(SIM_REASON is not None, reason=SIM_REASON or "")
def test_the_dlc_route_shares_host_results_and_runs_its_host_built_binary_on_the_board(
        board: Board, tmp_path: Path) -> None:
    sdk = make_sdk(tmp_path / "sdk", "2.31.0", dlc_tools=True)
    env = Environment(workdir=tmp_path / "qnn-ci-work", esdk_env=make_esdk(tmp_path / "esdk"),
                      boards={"standin": board.with_config(soc="QCS6490").config},
                      environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(sdk),
                               "QNN_CI_LOCK_DIR": str(tmp_path / "locks")})
    model = build_cnn(tmp_path / "cnn.onnx")
    classic = ExportSpec(
        name="cnn", model=model, manifest=tmp_path / "qnn-ci.yaml", line=1,
        inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(input_list=write_samples(tmp_path / "cal", 6, seed=5),
                                    samples=4, held_out=2),
        quantization=QuantizationSpec(overrides=_encodings(tmp_path / "cnn.encodings")),
        target=TargetSpec(soc="QCS6490", lib_target="aarch64-oe-linux-gcc11.2"),
        board="standin", original=OriginalSpec(model))
    stages = load_stages()
    first = Pipeline([classic], env, stages=stages)
    shared = {s: first.result("cnn", s) for s in HOST}
    assert first.result("cnn", "dry_run").status == Status.PASSED
    assert {s: r.status for s, r in shared.items()} == dict.fromkeys(HOST, Status.PASSED)

    dlc = replace(classic, route="dlc")
    p = Pipeline([dlc], env, stages=stages)
    assert p.stage_names(dlc) == [*HOST, *DLC, "regression"]
    results = {r.stage: r for r in p.run_export("cnn")}
    for name in HOST:                     # one cache entry, the same results
        assert results[name].cached, name
        assert results[name].summary == shared[name].summary
        assert results[name].data.get("content_digest") == shared[name].data.get(
            "content_digest")
    bad = {s: results[s].failure_text() for s in DLC if results[s].status != Status.PASSED}
    assert not bad, bad

    contract = results["dlc_contract"]
    assert contract.properties["act_bitwidth"] == "16"
    assert contract.properties["quantization_overrides"] == str(classic.quantization.overrides)
    built, ran = results["dlc_context_binary"], results["context_run"]
    assert built.properties["built_on"] == "host"
    assert built.properties["context.soc"] == "QCS6490"
    assert built.properties["htp_config"] == "devices only (QCS6490)"
    assert '"soc_model": 93' in (Path(built.artefacts["htp_config"]) /
                                 "htp_config.json").read_text()
    assert ran.properties["binary"] == "cnn.bin" and ran.properties["built_on"] == "host"
    assert ran.properties["reference"] == "fp32 onnxruntime (pinned model, on the host)"
    assert ran.properties["samples"] == 2 and ran.properties["sample_source"] == "held-out"
    assert 0.99 < ran.properties["context_vs_fp32.logits.cosine"] <= 1.0
    assert ran.properties["latency.median_ms"] > 0 and "load.init_ms" in ran.properties
    assert "x [0, 2, 3, 1]" in ran.properties["layout"]      # NHWC on the device
    assert "vs fp32 onnxruntime" in ran.summary
    assert not [f for f in ran.findings if f.severity == Severity.ERROR]
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]

    again = {r.stage: r for r in Pipeline([dlc], env, stages=stages).run_export("cnn")}
    assert [s for s in (*HOST, *DLC[:-1]) if not again[s].cached] == []
    # native outputs: their types and scale/offset from the DLC dump
    native = Pipeline([replace(dlc, native_outputs=True)], env, stages=stages).result(
        "cnn", "context_run")
    assert native.status == Status.PASSED, native.failure_text()
    assert native.properties["output_files"] == "native"
    assert 0.99 < native.properties["context_vs_fp32.logits.cosine"] <= 1.0
