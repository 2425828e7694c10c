"""so_load and htp_vs_cpu end to end: stand-in SDK library, real sshd, stand-in board."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fixtures.qairt_standin.net_run import make_board, set_faults
from fixtures.sshd import free_port
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.pipeline import NO_CACHE
from qnn_ci.engine.results import Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec, TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.stages.htp_vs_cpu import HtpVsCpuStage
from qnn_ci.stages.so_load import SoLoadStage
from tests.board_run.conftest import INPUT_SHAPE, OUTPUTS, Board, StandinBuild


def _export(built: StandinBuild, tmp_path: Path, *, board: str | None = "standin",
            cosine: float = 0.999, soc: str | None = None,
            native_outputs: bool = False) -> ExportSpec:
    return ExportSpec(name="cnn", model=built.model, manifest=tmp_path / "qnn-ci.yaml", line=1,
                      board=board, thresholds=Thresholds(default={"cosine": cosine}),
                      target=TargetSpec(soc=soc), native_outputs=native_outputs)


def _env(board: Board, tmp_path: Path) -> Environment:
    return Environment(workdir=tmp_path / "qnn-ci-work", boards={board.config.name: board.config},
                       environ={"QNN_CI_LOCK_DIR": str(tmp_path / "locks")})


def _upstream(built: StandinBuild, *, held_out: bool = True,
              net_json: bool = True) -> dict[str, StageResult]:
    inputs = {"x": {"dtype": "float32", "shape": list(INPUT_SHAPE)}}
    cal = {"input_list": str(built.calibration)}
    if held_out:
        cal["held_out_list"] = str(built.held_out)
    convert = {"cpp": str(built.cpp)} | ({"net_json": str(built.net_json)} if net_json else {})
    return {
        "static_shapes": StageResult("static_shapes", Status.PASSED,
                                     artefacts={"model": str(built.model)},
                                     data={"inputs": [{"name": "x", "dtype": "float32",
                                                       "shape": list(INPUT_SHAPE)}],
                                           "outputs": [{"name": n, "dtype": "float32",
                                                        "shape": list(s)}
                                                       for n, s in OUTPUTS.items()]}),
        "calibration": StageResult("calibration", Status.PASSED, artefacts=cal,
                                   data={"inputs": inputs}),
        "convert": StageResult("convert", Status.PASSED, artefacts=convert,
                               data={"sdk_version": built.sdk_version}),
        "model_lib": StageResult("model_lib", Status.PASSED,
                                 artefacts={"library": str(built.library)},
                                 data={"sdk_version": built.sdk_version}),
    }


def _ctx(export: ExportSpec, env: Environment, stage: str,
         upstream: dict[str, StageResult]) -> StageContext:
    workdir = env.workdir / export.name / stage
    workdir.mkdir(parents=True, exist_ok=True)
    return StageContext(export, env, workdir, upstream)


def _so_load_then_compare(built: StandinBuild, board: Board, tmp_path: Path,
                          **kw: object) -> tuple[StageResult, StageResult]:
    export, env = _export(built, tmp_path), _env(board, tmp_path)
    up = _upstream(built, **kw)  # type: ignore[arg-type]
    so = SoLoadStage().run(_ctx(export, env, "so_load", up))
    cmp_ = HtpVsCpuStage().run(_ctx(export, env, "htp_vs_cpu", up | {"so_load": so}))
    return so, cmp_


def _errors(result: StageResult) -> list[str]:
    return [f.check for f in result.findings if f.severity == Severity.ERROR]


def test_board_stages_pass_within_thresholds(built: StandinBuild, board: Board,
                                             tmp_path: Path) -> None:
    so, res = _so_load_then_compare(built, board, tmp_path)
    assert so.status == Status.PASSED, so.failure_text()
    assert so.properties["board"] == "standin"
    assert so.properties["board_qnn_version"] == "2.31.0"
    assert so.properties["sdk_version"] == "2.31.0"
    assert so.properties["samples"] == 1
    assert "loaded and ran 1 inference on CPU and HTP" in so.summary
    assert res.status == Status.PASSED, res.failure_text()
    props = res.properties
    assert props["sample_source"] == "held-out" and props["samples"] == 2
    assert "x [0, 2, 3, 1]" in props["layout"] and "feat/map:0 [0, 2, 3, 1]" in props["layout"]
    # W8A16: close to the CPU backend but not identical; the CPU backend is exact
    assert 0.999 < props["htp_vs_cpu.logits.cosine"] < 1.0
    assert 0.999 < props["htp_vs_cpu.feat_map_0.cosine"] < 1.0
    assert props["htp_vs_cpu.logits.cosine.min"] == 0.999     # the bound, reported too
    assert props["cpu_vs_fp32.logits.cosine"] == pytest.approx(1.0, abs=1e-6)
    assert props["cpu_vs_fp32.feat_map_0.cosine"] == pytest.approx(1.0, abs=1e-6)
    # the CPU backend ran in float: the accuracy rule only advises, the thresholds decide
    assert props["cpu_backend"] == "float"
    assert props["accuracy_rule"].endswith(" of 4 (advisory: float CPU backend)")
    assert all(f.severity == Severity.WARNING and "(advisory: " in f.message
               for f in res.findings if f.check == "compare.accuracy")
    assert res.summary.startswith("HTP vs CPU on board standin, 2 held-out sample(s): worst")
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]


def test_a_fast_wrong_answer_fails_naming_output_and_sample(built: StandinBuild, board: Board,
                                                            tmp_path: Path) -> None:
    set_faults(board.folder, {"htp_wrong": {"backend": "htp", "amount": 0.5}})
    so, res = _so_load_then_compare(built, board, tmp_path)
    assert so.status == Status.PASSED          # it loads and runs: only numbers tell
    assert res.status == Status.FAILED
    errors = _errors(res)
    assert set(errors) == {"compare.threshold"}
    threshold = [f.message for f in res.findings if f.check == "compare.threshold"]
    assert any(m.startswith("HTP vs CPU backend: logits sample 0: cosine ")
               and "is below the minimum 0.999" in m for m in threshold), threshold
    assert all("loosest passing bound: cosine=" in m for m in threshold)
    assert res.properties["htp_vs_cpu.feat_map_0.cosine"] < 0.99
    assert res.summary.startswith("HTP vs CPU on board standin, 2 held-out sample(s): "
                                  "worst cosine ")
    assert "accuracy rule held on 0 of 4 (advisory: float CPU backend)" in res.summary
    assert "- [compare.threshold] HTP vs CPU backend: logits sample 1: cosine " in \
        res.failure_text()


def test_accuracy_rule_gates_when_the_cpu_backend_runs_the_quantized_graph(
        built: StandinBuild, board: Board, tmp_path: Path) -> None:
    set_faults(board.folder, {"cpu_quantized": True})
    _, res = _so_load_then_compare(built, board, tmp_path)
    assert res.status == Status.PASSED, res.failure_text()
    assert res.properties["cpu_backend"] == "quantized"
    assert res.properties["accuracy_rule"] == "held on 4 of 4"
    set_faults(board.folder, {"cpu_quantized": True, "htp_wrong": {"amount": 0.02}})
    _, res = _so_load_then_compare(built, board, tmp_path / "again")
    assert res.status == Status.FAILED
    rule = [f for f in res.findings if f.check == "compare.accuracy"]
    assert rule and all(f.severity == Severity.ERROR for f in rule)
    assert rule[0].message.startswith("accuracy rule vs fp32: ")
    assert "the HTP is less accurate than the CPU backend" in rule[0].message


def test_without_the_layout_the_cpu_reference_catches_scrambled_inputs(
        built: StandinBuild, board: Board, tmp_path: Path) -> None:
    """NCHW bytes fed to an NHWC graph input have the right size and run fine; HTP and
    CPU agree on the garbage. Only the CPU-vs-fp32 check can see it."""
    _so, res = _so_load_then_compare(built, board, tmp_path, net_json=False)
    assert res.status == Status.FAILED
    assert [f.check for f in res.findings if f.severity == Severity.WARNING] == \
        ["board.layout_unknown"]
    cpu_vs_fp32 = [f.message for f in res.findings
                   if f.message.startswith("CPU backend vs fp32 onnxruntime: ")
                   and f.severity == Severity.ERROR]
    assert cpu_vs_fp32, res.failure_text()
    assert res.properties["htp_vs_cpu.logits.cosine"] > 0.999    # consistent garbage


def test_without_held_out_samples_calibration_samples_are_used(
        built: StandinBuild, board: Board, tmp_path: Path) -> None:
    _, res = _so_load_then_compare(built, board, tmp_path, held_out=False)
    assert res.status == Status.PASSED, res.failure_text()
    assert res.properties["sample_source"] == "calibration" and res.properties["samples"] == 4
    warnings = {f.check for f in res.findings if f.severity == Severity.WARNING}
    assert warnings <= {"board.no_held_out", "compare.accuracy"}
    assert "board.no_held_out" in warnings


def test_version_mismatch_is_flagged(built: StandinBuild, board: Board,
                                     tmp_path: Path) -> None:
    make_board(board.folder, sdk_version="2.27.0")
    export, env = _export(built, tmp_path), _env(board, tmp_path)
    so = SoLoadStage().run(_ctx(export, env, "so_load", _upstream(built)))
    assert so.status == Status.PASSED
    assert so.properties["board_qnn_version"] == "2.27.0"
    (warn,) = [f for f in so.findings if f.check == "board.version_mismatch"]
    assert warn.severity == Severity.WARNING
    assert "QNN libraries 2.27.0" in warn.message and "built with SDK 2.31.0" in warn.message
    # a real library's build tag instead of our marker is read too
    make_board(board.folder, version_text="v2.31.0.250130151446_114721")
    so = SoLoadStage().run(_ctx(export, env, "so_load", _upstream(built)))
    assert so.properties["board_qnn_version"] == "2.31.0"
    assert not [f for f in so.findings if f.check.startswith("board.version")]


def test_unreachable_board_fails_quickly(built: StandinBuild, board: Board,
                                         tmp_path: Path) -> None:
    dead = board.with_config(port=free_port())
    export, env = _export(built, tmp_path), _env(dead, tmp_path)
    up = _upstream(built)
    started = time.monotonic()
    so = SoLoadStage().run(_ctx(export, env, "so_load", up))
    assert so.status == Status.FAILED
    assert so.summary.startswith("board standin unreachable: ")
    assert _errors(so) == ["board.unreachable"]
    fake_so = StageResult("so_load", Status.PASSED,
                          data={"library": str(built.library), "sdk_version": "2.31.0"})
    res = HtpVsCpuStage().run(_ctx(export, env, "htp_vs_cpu", up | {"so_load": fake_so}))
    assert res.status == Status.FAILED and _errors(res) == ["board.unreachable"]
    assert time.monotonic() - started < dead.config.connect_timeout_s * 4


def test_unavailable_names_the_missing_board(built: StandinBuild, board: Board,
                                             tmp_path: Path) -> None:
    env = _env(board, tmp_path)
    assert SoLoadStage().unavailable(_export(built, tmp_path, board=None), env) == \
        "export cnn names no board"
    assert HtpVsCpuStage().unavailable(_export(built, tmp_path, board="lab7"), env) == \
        "board lab7 is not configured (configured: standin)"
    assert SoLoadStage().unavailable(_export(built, tmp_path), env) is None
    override = Environment(workdir=env.workdir, boards=env.boards, board_override="other")
    assert SoLoadStage().unavailable(_export(built, tmp_path), override) == \
        "board other is not configured (configured: standin)"


def test_work_root_off_tmpfs_is_flagged(built: StandinBuild, board: Board,
                                         tmp_path: Path) -> None:
    """eMMC burst writes can reset a board: a work root that is not tmpfs is a warning."""
    import subprocess
    import uuid

    def fs_of(path: Path) -> str:
        return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True,
                              text=True, check=True).stdout.strip()

    shm = Path("/dev/shm")
    if not shm.is_dir() or fs_of(shm) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    export, up = _export(built, tmp_path), _upstream(built)
    on_tmpfs = board.with_config(work_root=str(shm / f"qnn-ci-test-{uuid.uuid4().hex[:8]}"))
    so = SoLoadStage().run(_ctx(export, _env(on_tmpfs, tmp_path), "so_load", up))
    try:
        assert so.status == Status.PASSED, so.failure_text()
        assert so.properties["work_root_fs"] == "tmpfs"
        assert not [f for f in so.findings if f.check == "board.work_root_not_tmpfs"]
    finally:
        subprocess.run(["rm", "-rf", on_tmpfs.config.work_root], check=False)
    # A work root on a disk filesystem: the test's own folder, else /var/tmp.
    disk = next((d for d in (board.work_root, Path("/var/tmp")) if fs_of(d) != "tmpfs"), None)
    if disk is None:
        pytest.skip("no tmpfs-free folder on this machine to put a work root on")
    on_disk = board.with_config(work_root=str(disk / f"qnn-ci-test-{uuid.uuid4().hex[:8]}"))
    try:
        so = SoLoadStage().run(_ctx(export, _env(on_disk, tmp_path / "again"), "so_load", up))
    finally:
        subprocess.run(["rm", "-rf", on_disk.config.work_root], check=False)
    flagged = [f for f in so.findings if f.check == "board.work_root_not_tmpfs"]
    assert so.status == Status.PASSED and so.properties["work_root_fs"] == fs_of(disk)
    assert flagged and flagged[0].severity == Severity.WARNING
    assert f"is on {fs_of(disk)}, not tmpfs" in flagged[0].message


def test_board_soc_must_match_the_export_target(built: StandinBuild, board: Board,
                                                tmp_path: Path) -> None:
    """An SM8550 export on a QCS6490 board proves nothing: both stages fail before
    touching the board, naming both SoCs; an alias of the same SoC is a match."""
    qcs6490 = board.with_config(soc="QCS6490")
    env, up = _env(qcs6490, tmp_path), _upstream(built)
    export = _export(built, tmp_path, soc="SM8550")
    so = SoLoadStage().run(_ctx(export, env, "so_load", up))
    res = HtpVsCpuStage().run(_ctx(export, env, "htp_vs_cpu", up | {"so_load": so}))
    for result in (so, res):
        assert result.status == Status.FAILED and _errors(result) == ["board.soc_mismatch"]
        assert result.summary.startswith("board standin is a QCS6490 but export cnn targets "
                                         "SM8550 (target.soc): ")
        assert "\n" not in result.summary
    assert NO_CACHE not in so.data                  # the same settings fail the same way
    assert not list((env.workdir / "cnn" / "so_load").iterdir())    # never reached the board
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]
    alias = SoLoadStage().run(_ctx(_export(built, tmp_path, soc="qcm6490"), env, "so_load", up))
    assert alias.status == Status.PASSED, alias.failure_text()
    # either side unset: nothing to check
    unset = SoLoadStage().run(_ctx(_export(built, tmp_path, soc="SM8550"),
                                   _env(board, tmp_path / "b"), "so_load", up))
    assert unset.status == Status.PASSED, unset.failure_text()


def test_htp_vs_cpu_reads_the_unconfirmed_output_layouts(built: StandinBuild, board: Board,
                                                         tmp_path: Path) -> None:
    """Graph folder above Result_N and `/` sub-folders together: outputs are found,
    turned back to ONNX order (feat/map:0 is NHWC on the board) and compared."""
    set_faults(board.folder, {"graph_folder": True, "slash_subfolders": True})
    so, res = _so_load_then_compare(built, board, tmp_path)
    assert so.status == Status.PASSED, so.failure_text()
    assert res.status == Status.PASSED, res.failure_text()
    cos = {k: v for k, v in res.properties.items()
           if k.startswith("htp_vs_cpu.") and k.endswith(".cosine")}
    assert len(cos) == 2 and all(0.999 < v < 1.0 for v in cos.values()), cos
    # the layout transpose found the file: the CPU backend matches fp32 exactly
    assert [v for k, v in res.properties.items()
            if k.startswith("cpu_vs_fp32.") and "map_0" in k] == [pytest.approx(1.0, abs=1e-6)]


def test_native_outputs_are_read_in_their_type_and_dequantized(
        built: StandinBuild, board: Board, native_library: Path, tmp_path: Path) -> None:
    """native_outputs: qnn-net-run writes UFIXED_POINT_16 codes (the types in the
    converter's _net.json); they are read as uint16, dequantized with the output's
    scale/offset, put back in ONNX order and compared."""
    export, env = _export(built, tmp_path, native_outputs=True), _env(board, tmp_path)
    up = _upstream(built)
    up["model_lib"] = replace(up["model_lib"], artefacts={"library": str(native_library)})
    so = SoLoadStage().run(_ctx(export, env, "so_load", up))
    assert so.status == Status.PASSED, so.failure_text()
    assert so.properties["output_files"] == "native"
    assert "--use_native_output_files" in Path(so.artefacts["htp_log"]).read_text()
    res = HtpVsCpuStage().run(_ctx(export, env, "htp_vs_cpu", up | {"so_load": so}))
    assert res.status == Status.PASSED, res.failure_text()
    tensors = json.loads(built.net_json.read_text())["graph"]["tensors"]
    enc = {n: tensors[n]["quant_params"]["scale_offset"] for n in ("logits", "feat_map_0")}
    assert res.properties["native_types"] == (
        f"feat/map:0 UFIXED_POINT_16 (scale {enc['feat_map_0']['scale']:g}, offset "
        f"{enc['feat_map_0']['offset']}), logits UFIXED_POINT_16 (scale "
        f"{enc['logits']['scale']:g}, offset {enc['logits']['offset']})")
    assert 0.999 < res.properties["htp_vs_cpu.logits.cosine"] < 1.0
    assert res.properties["cpu_vs_fp32.feat_map_0.cosine"] > 0.99999
    # float CPU graph, quantized only where it writes its UFIXED_16 outputs: still float
    assert res.properties["cpu_backend"] == "float"
    # the float files compared are exactly (q + offset) * scale of the board's codes
    for backend in ("cpu", "htp"):
        rdir = Path(res.artefacts[f"{backend}_outputs"]) / "Result_1"
        codes = np.fromfile(rdir / "logits_native.raw", "<u2")
        assert codes.size == 10 and codes.max() > 1000
        real = ((codes.astype(np.float64) + enc["logits"]["offset"])
                * enc["logits"]["scale"]).astype(np.float32)
        assert np.array_equal(np.fromfile(rdir / "logits.raw", np.float32), real)
    # and they agree with fp32 onnxruntime to within the output's quantization step
    truth = np.fromfile(tmp_path / "qnn-ci-work/cnn/htp_vs_cpu/out_fp32/Result_1/logits.raw",
                        np.float32)
    cpu = np.fromfile(Path(res.artefacts["cpu_outputs"]) / "Result_1/logits.raw", np.float32)
    assert np.abs(cpu - truth).max() <= enc["logits"]["scale"]


def test_native_outputs_need_the_converter_net_json(built: StandinBuild, board: Board,
                                                    native_library: Path,
                                                    tmp_path: Path) -> None:
    export, env = _export(built, tmp_path, native_outputs=True), _env(board, tmp_path)
    up = _upstream(built, net_json=False)
    so = SoLoadStage().run(_ctx(export, env, "so_load", up))
    assert so.status == Status.FAILED and _errors(so) == ["board.native_type"]
    assert so.summary.startswith("native_outputs: the converter's _net.json is missing")


def test_failures_that_may_not_repeat_are_never_cached(built: StandinBuild, board: Board,
                                                       tmp_path: Path) -> None:
    """A hung qnn-net-run killed by the timeout, or an unreachable board: the results
    carry data[NO_CACHE], so even a stage that caches failures would not reuse them."""
    set_faults(board.folder, {"hang": "htp"})
    quick = board.with_config(timeout_s=2.0)
    export, up = _export(built, tmp_path), _upstream(built)
    so = SoLoadStage().run(_ctx(export, _env(quick, tmp_path), "so_load", up))
    assert so.status == Status.FAILED and _errors(so) == ["board.timeout"]
    assert so.data[NO_CACHE] is True
    assert board.server.remote_pids() == []             # the hung tool was killed
    dead = board.with_config(port=free_port(), retries=0)
    gone = SoLoadStage().run(_ctx(export, _env(dead, tmp_path / "b"), "so_load", up))
    assert _errors(gone) == ["board.unreachable"] and gone.data[NO_CACHE] is True


def test_output_quantization_steps_come_from_the_converter(built: StandinBuild) -> None:
    """The comparison's near-zero rule needs each output's step: read from _net.json."""
    import json

    from qnn_ci.boards.native_outputs import quant_steps

    outputs = [t["name"] if isinstance(t, dict) and "name" in t else n
               for n, t in json.loads(built.net_json.read_text())["graph"]["tensors"].items()
               if (t if isinstance(t, dict) else {}).get("type") == 1]
    steps = quant_steps(built.net_json, outputs)
    assert steps and set(steps) == set(outputs)
    assert all(0 < s < 1 for s in steps.values())
    assert quant_steps(None, outputs) == {}
