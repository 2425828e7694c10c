"""`context_binary` and `context_run` in the real engine: the stand-in SDK converts
and builds the library, the stand-in board (over a real sshd) builds the context
binary with its own generator, qnn-ci pulls it back, reads what it says it is, runs
it with ``--retrieve_context`` and times it. Each failure class the board can give
has its own one-line message."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.qairt_standin import make_esdk, make_sdk
from fixtures.qairt_standin.net_run import make_board, set_faults
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    ExportSpec,
    HtpConfigSpec,
    InputSpec,
    QuantizationSpec,
    TargetSpec,
)
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, Board, build_cnn, write_samples

STAGES = ("static_shapes", "calibration", "convert", "fp16_gate", "model_lib", "so_load",
          "htp_vs_cpu", "context_binary", "context_run")


def _env(tmp_path: Path, board: Board, sdk: Path) -> Environment:
    return Environment(workdir=tmp_path / "qnn-ci-work", esdk_env=make_esdk(tmp_path / "esdk"),
                       boards={"standin": board.config},
                       environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(sdk),
                                "QNN_CI_LOCK_DIR": str(tmp_path / "locks")})


def _export(tmp_path: Path, model: Path, **changes: object) -> ExportSpec:
    lst = write_samples(tmp_path / "cal", 6, seed=5)
    export = ExportSpec(
        name="cnn", model=model, manifest=tmp_path / "qnn-ci.yaml", line=1,
        inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(input_list=lst, samples=4, held_out=2),
        target=TargetSpec(soc="QCS6490", lib_target="aarch64-oe-linux-gcc11.2"),
        board="standin")
    return replace(export, **changes)  # type: ignore[arg-type]


def _run(export: ExportSpec, env: Environment, stages: tuple[str, ...] = STAGES) -> dict:
    return {r.stage: r for r in
            Pipeline([export], env, stages=load_stages(stages)).run_export(export.name)}


def _failures(results: dict) -> dict:
    return {s: r.failure_text() for s, r in results.items() if r.status != Status.PASSED}


@pytest.fixture
def qcs_board(board: Board) -> Board:
    return board.with_config(soc="QCS6490")


def test_a_clean_export_builds_reads_back_runs_and_times_its_context_binary(
        qcs_board: Board, tmp_path: Path) -> None:
    sdk = make_sdk(tmp_path / "sdk", "2.31.0")
    env = _env(tmp_path, qcs_board, sdk)
    export = _export(tmp_path, build_cnn(tmp_path / "cnn.onnx"),
                     htp_config=HtpConfigSpec(vtcm_mb=2, O=3))
    results = _run(export, env)
    assert list(results) == list(STAGES)
    assert not _failures(results), _failures(results)
    built, ran = results["context_binary"], results["context_run"]
    binary = Path(built.artefacts["binary"])
    assert binary.is_file() and binary.name == "cnn.bin"
    assert built.properties["context.soc"] == "QCS6490"
    assert built.properties["context.htp_arch"] == 68
    assert built.properties["context.vtcm_bytes"] == 2 << 20
    assert built.properties["context.qnn_version"] == "2.31.0"
    assert built.properties["htp_config"] == "given"
    assert "cnn.bin built on board standin (QNN 2.31.0)" in built.summary
    # the HTP config written for the board names the converter's graph
    inner = Path(built.artefacts["htp_config"]) / "htp_config.json"
    assert '"cnn"' in inner.read_text() and '"vtcm_mb": 2' in inner.read_text()
    assert ran.properties["samples"] == 2
    assert ran.properties["context_vs_so.logits.cosine"] > 0.99999
    assert 0.999 < ran.properties["context_vs_cpu.logits.cosine"] < 1.0
    assert ran.properties["latency.median_ms"] > 0
    assert "load.init_ms" in ran.properties
    assert not [f for f in ran.findings if f.severity == Severity.ERROR]
    assert sorted(p.name for p in qcs_board.work_root.iterdir()) == ["keep-me"]

    again = _run(export, env)
    assert again["context_binary"].cached and again["context_binary"].status == Status.PASSED
    # The board's QNN changes: the binary is built again.
    make_board(qcs_board.folder, sdk_version="2.32.0", soc="QCS6490")
    third = _run(export, env)
    assert not third["context_binary"].cached
    assert third["context_binary"].properties["board_qnn_version"] == "2.32.0"


def _fp16_model(path: Path) -> Path:
    """Conv -> Softmax: with float_fallback and float_bitwidth 16 the Softmax stays FP16."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32),
                                "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c"], ["probs"], axis=1)]
    graph = helper.make_graph(
        nodes, "fp16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT_SHAPE)],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, (1, 4, 16, 16))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_fp16_on_v68_is_gated_and_when_forced_the_abort_is_classified(
        qcs_board: Board, tmp_path: Path) -> None:
    env = _env(tmp_path, qcs_board, make_sdk(tmp_path / "sdk", "2.31.0"))
    q = QuantizationSpec(float_fallback=True, float_bitwidth=16)
    export = _export(tmp_path, _fp16_model(tmp_path / "fp16.onnx"), quantization=q)
    stages = ("static_shapes", "calibration", "convert", "fp16_gate", "model_lib",
              "context_binary")
    gated = _run(export, env, stages)
    # Refused before the board: convert (float fallback on v68), the rest blocked.
    assert gated["convert"].status == Status.ERROR, gated["convert"].summary   # a user error
    assert "HTP v68 has no FP16" in gated["convert"].summary
    assert gated["context_binary"].status == Status.SKIPPED     # no abort asked of the board
    # Without target.soc nothing can refuse it: the board's generator aborts, classified
    # (the board's SoC judges).
    forced = _run(replace(export, target=TargetSpec(lib_target="aarch64-oe-linux-gcc11.2")),
                  env, stages)
    r = forced["context_binary"]
    assert r.status == Status.FAILED
    f = next(f for f in r.findings if f.severity == Severity.ERROR)
    assert f.check == "context.fp16_abort", r.findings
    assert f.message.startswith("FP16 op on v68:") and "probs" in f.message
    assert "QCS6490 (HTP v68) has no FP16" in f.message and "\n" not in f.message
    assert sorted(p.name for p in qcs_board.work_root.iterdir()) == ["keep-me"]


@pytest.mark.parametrize("fault,check,words", [
    ({"context_vtcm_need_mb": 36}, "context.vtcm_overflow",
     ("36 MiB (0x2400000 bytes)", "2 MiB (0x200000 bytes) allowed", "htp_config.vtcm_mb: 2")),
    ({"context_finalize": True}, "context.finalize", ("(err 1002)",)),
    ({"context_op_refused": {"op": "/c1/Conv"}}, "context.op_refused", ("op /c1/Conv",)),
])
def test_each_generator_failure_has_its_own_line(qcs_board: Board, tmp_path: Path,
                                                 fault: dict, check: str,
                                                 words: tuple[str, ...]) -> None:
    env = _env(tmp_path, qcs_board, make_sdk(tmp_path / "sdk", "2.31.0"))
    export = _export(tmp_path, build_cnn(tmp_path / "cnn.onnx"),
                     htp_config=HtpConfigSpec(vtcm_mb=2))
    set_faults(qcs_board.folder, fault)
    r = _run(export, env, ("static_shapes", "calibration", "convert", "model_lib",
                           "context_binary"))["context_binary"]
    assert r.status == Status.FAILED
    f = next(f for f in r.findings if f.severity == Severity.ERROR)
    assert f.check == check, r.findings
    for w in words:
        assert w in f.message, f.message
    assert r.summary == f.message and "\n" not in f.message


def test_a_binary_newer_than_the_runtime_is_named_before_the_load_fails(
        qcs_board: Board, tmp_path: Path) -> None:
    from qnn_ci.boards.netrun import run_on_board
    from qnn_ci.transport.factory import open_transport

    env = _env(tmp_path, qcs_board, make_sdk(tmp_path / "sdk", "2.31.0"))
    export = _export(tmp_path, build_cnn(tmp_path / "cnn.onnx"))
    set_faults(qcs_board.folder, {"context_version": {"version": "2.40.0"}})
    results = _run(export, env, ("static_shapes", "calibration", "convert", "model_lib",
                                 "context_binary"))
    r = results["context_binary"]
    f = next(f for f in r.findings if f.check == "context.newer_than_runtime")
    assert f.severity == Severity.ERROR and "2.40.0" in f.message and "2.31.0" in f.message
    assert "5000" in f.message
    # ... and what the board says when it is loaded anyway.
    cal = results["calibration"]
    transport = open_transport(qcs_board.config)
    try:
        nr = run_on_board(transport, qcs_board.config, library=None,
                          context=Path(r.artefacts["binary"]),
                          input_list=Path(cal.artefacts["input_list"]), input_names=["x"],
                          backends=("htp",), workdir=tmp_path / "load", max_samples=1)
    finally:
        transport.close()
    checks = [f.check for f in nr.findings if f.severity == Severity.ERROR]
    assert checks == ["board.context_version"], nr.findings
    assert "err 5000" in nr.findings[0].message


# --------------------------------------------------------------------------- interrupts,
# a full disk and a held lock behave as in the other board stages.

def _generator_running(board: Board) -> bool:
    for pid in board.server.remote_pids():
        try:
            if b"qnn-context-binary-generator" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


CONTEXT_ONLY = ("static_shapes", "calibration", "convert", "model_lib", "context_binary")


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_while_the_generator_runs_kills_it_and_caches_nothing(
        qcs_board: Board, tmp_path: Path, exc_type: type[BaseException]) -> None:
    from tests.transport.test_interrupt_remote import _wait_until, interrupt_when

    env = _env(tmp_path, qcs_board, make_sdk(tmp_path / "sdk", "2.31.0"))
    export = _export(tmp_path, build_cnn(tmp_path / "cnn.onnx"))
    _run(export, env, CONTEXT_ONLY[:-1])            # the host stages, cached
    set_faults(qcs_board.folder, {"context_hang": True})
    with interrupt_when(lambda: _generator_running(qcs_board), exc_type):
        with pytest.raises(exc_type):
            _run(export, env, CONTEXT_ONLY)
    # the generator is gone, the run folder and the lock with it
    _wait_until(lambda: not qcs_board.server.remote_pids(), "the generator to be killed")
    assert sorted(p.name for p in qcs_board.work_root.iterdir()) == ["keep-me"]
    # nothing was cached: the next run builds the binary
    set_faults(qcs_board.folder, None)
    again = _run(export, env, CONTEXT_ONLY)["context_binary"]
    assert again.status == Status.PASSED and not again.cached, again.summary


def test_a_full_board_disk_is_named_and_not_cached(qcs_board: Board, full_disk: Path,
                                                   tmp_path: Path) -> None:
    (full_disk / "filler.bin").write_bytes(b"\0" * 96 * 1024)    # 4 KiB left of 100
    on_full = qcs_board.with_config(work_root=str(full_disk))
    env = _env(tmp_path, on_full, make_sdk(tmp_path / "sdk", "2.31.0"))
    export = _export(tmp_path, build_cnn(tmp_path / "cnn.onnx"))
    r = _run(export, env, CONTEXT_ONLY)["context_binary"]
    assert r.status == Status.FAILED
    assert [f.check for f in r.findings if f.severity == Severity.ERROR] == ["board.disk_full"]
    assert "no space left on device on board standin" in r.summary and "\n" not in r.summary
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler.bin"]   # run folder gone
    (full_disk / "filler.bin").unlink()
    again = _run(export, env, CONTEXT_ONLY)["context_binary"]
    assert again.status == Status.PASSED and not again.cached, again.summary


def test_a_board_held_by_another_run_is_named_and_not_cached(qcs_board: Board,
                                                             tmp_path: Path) -> None:
    from qnn_ci.boards.lock import board_lock

    quick = qcs_board.with_config(lock_timeout_s=1.0)
    env = _env(tmp_path, quick, make_sdk(tmp_path / "sdk", "2.31.0"))
    export = _export(tmp_path, build_cnn(tmp_path / "cnn.onnx"))
    _run(export, env, CONTEXT_ONLY[:-1])
    other = quick.open(quick.config)
    try:   # another runner (its own lock folder) holds the board
        with board_lock(other, quick.config, timeout=5, runner_lock_dir=tmp_path / "other"):
            r = _run(export, env, CONTEXT_ONLY)["context_binary"]
    finally:
        other.close()
    assert r.status == Status.FAILED
    assert [f.check for f in r.findings] == ["board.locked"], r.findings
    assert r.summary.startswith("board standin is locked by ") and "\n" not in r.summary
    again = _run(export, env, CONTEXT_ONLY)["context_binary"]
    assert again.status == Status.PASSED and not again.cached, again.summary
