"""The whole chain in the real engine: static_shapes, calibration, dry_run,
convert, model_lib (aarch64, eSDK first) with the stand-in SDK, then so_load and
htp_vs_cpu on the stand-in board over sshd — the artefacts the board stages read
are the ones the upstream stages really write."""

from __future__ import annotations

from pathlib import Path

from fixtures.qairt_standin import make_esdk, make_sdk
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import CalibrationSpec, ExportSpec, InputSpec, TargetSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, Board, build_cnn, write_samples

STAGES = ("static_shapes", "calibration", "dry_run", "convert", "model_lib", "so_load",
          "htp_vs_cpu")


def test_engine_runs_the_board_stages_after_the_sdk_stages(board: Board,
                                                           tmp_path: Path) -> None:
    model = build_cnn(tmp_path / "cnn.onnx")
    lst = write_samples(tmp_path / "cal", 6, seed=5)
    export = ExportSpec(
        name="cnn", model=model, manifest=tmp_path / "qnn-ci.yaml", line=1,
        inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(input_list=lst, samples=4),
        target=TargetSpec(soc="QCS6490", lib_target="aarch64-oe-linux-gcc11.2"),
        board="standin")
    env = Environment(workdir=tmp_path / "qnn-ci-work",
                      esdk_env=make_esdk(tmp_path / "esdk"),
                      boards={"standin": board.config},
                      environ={"PATH": "/usr/bin:/bin",
                               "QNN_SDK_ROOT": str(make_sdk(tmp_path / "sdk", "2.31.0")),
                               "QNN_CI_LOCK_DIR": str(tmp_path / "locks")})
    results = {r.stage: r for r in
               Pipeline([export], env, stages=load_stages(STAGES)).run_export("cnn")}
    assert {s: r.status for s, r in results.items()} == {s: Status.PASSED for s in STAGES}, \
        {s: r.failure_text() for s, r in results.items() if r.status != Status.PASSED}
    so, cmp_ = results["so_load"], results["htp_vs_cpu"]
    assert so.properties["board_qnn_version"] == "2.31.0"
    assert so.data["library"].endswith("aarch64-oe-linux-gcc11.2/libcnn.so")
    assert cmp_.properties["sample_source"] == "held-out" and cmp_.properties["samples"] == 2
    assert "x [0, 2, 3, 1]" in cmp_.properties["layout"]
    assert cmp_.properties["cpu_vs_fp32.feat_map_0.cosine"] > 0.99999
    assert 0.999 < cmp_.properties["htp_vs_cpu.feat_map_0.cosine"] < 1.0
    assert not [f for f in cmp_.findings if f.severity == Severity.ERROR]
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]
