"""The regression check on a board: the whole chain (stand-in SDK, stand-in board over
sshd) writes a `board:standin` baseline with the HTP-vs-CPU metrics, the latency
and the library size; the same export on a slower board fails `regression` naming
the latency, and a baseline measured another way (profile vs timed) is not compared
on latency."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from fixtures.qairt_standin import make_esdk, make_sdk
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    ExportSpec,
    InputSpec,
    LatencySpec,
    RegressionSpec,
    TargetSpec,
)
from qnn_ci.engine.stage import Environment
from qnn_ci.nightly import baselines as bl
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, Board, build_cnn, write_samples

STAGES = ("static_shapes", "calibration", "dry_run", "convert", "model_lib", "so_load",
          "htp_vs_cpu", "regression")
SLOWER = re.compile(r"^latency median_ms \d+\.\d\d → \d+\.\d\d \(baseline from abc1234, "
                    r"2026-11-28; tolerance 10%\)$")


def _run(export: ExportSpec, board: Board, tmp: Path, *, cache: bool = True
         ) -> dict[str, StageResult]:
    env = Environment(workdir=tmp / "work", esdk_env=make_esdk(tmp / "esdk"),
                      boards={"standin": board.config}, use_cache=cache,
                      environ={"PATH": "/usr/bin:/bin",
                               "QNN_SDK_ROOT": str(make_sdk(tmp / "sdk", "2.31.0")),
                               "QNN_CI_LOCK_DIR": str(tmp / "locks")})
    return {r.stage: r for r in
            Pipeline([export], env, stages=load_stages(STAGES)).run_export(export.name)}


def test_a_slower_board_fails_regression_on_latency(board: Board, tmp_path: Path) -> None:
    export = ExportSpec(
        name="cnn", model=build_cnn(tmp_path / "cnn.onnx"), manifest=tmp_path / "qnn-ci.yaml",
        line=1, inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(input_list=write_samples(tmp_path / "cal", 6, seed=5),
                                    samples=4),
        target=TargetSpec(soc="QCS6490", lib_target="aarch64-oe-linux-gcc11.2"),
        board="standin", latency=LatencySpec(runs=3),
        regression=RegressionSpec(baselines=tmp_path / "qnn-baselines.yaml"))
    first = _run(export, board, tmp_path)
    assert first["htp_vs_cpu"].status == Status.PASSED, first["htp_vs_cpu"].failure_text()
    assert first["regression"].status == Status.SKIPPED
    assert "no baselines file" in first["regression"].summary
    made = bl.entries_for("cnn", "QCS6490", first, "standin", ("abc1234", "2026-11-28"))
    assert set(made) == {("cnn", "QCS6490", "sdk"), ("cnn", "QCS6490", "board:standin")}
    on_board = made[("cnn", "QCS6490", "board:standin")]
    assert {"htp_vs_cpu.feat_map_0.cosine", "cpu_vs_fp32.feat_map_0.cosine",
            "latency.median_ms", "latency.p90_ms"} <= set(on_board.metrics)
    assert on_board.versions["board_qnn"] == "2.31.0"
    assert on_board.versions[bl.LATENCY_METHOD] in ("profile: per-inference", "timed")
    assert made[("cnn", "QCS6490", "sdk")].metrics["library_bytes"] > 0
    bl.update(export.regression.baselines, made)
    same = _run(export, board, tmp_path)["regression"]
    assert same.status == Status.PASSED, same.failure_text()

    # every inference now sleeps to the end of a 250 ms slot: far beyond 10 %
    slow = board.with_config(env={"QNNCI_NETRUN_INFERENCE_S": "0.25"})
    res = _run(export, slow, tmp_path, cache=False)
    reg = res["regression"]
    assert reg.status == Status.FAILED, reg.summary
    lines = [f.message for f in reg.findings if f.check == "regression.worse"]
    assert any(SLOWER.match(line) for line in lines), lines
    assert all(f.subject == "board:standin" for f in reg.findings
               if f.check == "regression.worse")

    # a baseline whose latency was measured the other way: latency not compared
    other = "timed" if on_board.versions[bl.LATENCY_METHOD].startswith("profile") else \
        "profile: summary_average_max"
    bl.write(export.regression.baselines, made | {("cnn", "QCS6490", "board:standin"): replace(
        on_board, versions=on_board.versions | {bl.LATENCY_METHOD: other})})
    reg = _run(export, slow, tmp_path)["regression"]
    assert not [f for f in reg.findings if f.message.startswith("latency median_ms")]
    note = [f.message for f in reg.findings if f.check == "regression.latency_method"]
    assert note and note[0].startswith("latency not compared: measured by ")
