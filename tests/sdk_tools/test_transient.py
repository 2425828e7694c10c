"""A tool that timed out or was killed by a signal may not fail the same way twice:
such failures are never reused from the cache, a re-run tries again. Ordinary
failures are cached as before."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from qnn_ci.engine.pipeline import NO_CACHE, Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import InputSpec, SdkSpec, TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.sdk.toolrun import run_tool
from qnn_ci.stages.convert import ConvertStage
from qnn_ci.stages.model_lib import ModelLibStage
from qnn_ci.stages.registry import load_stages
from tests.sdk_tools.conftest import make_export, tiny_conv_model, write_input_list

TOOLS = "bin/x86_64-linux-clang"
WRAPPER = """#!/bin/bash
# test wrapper: --help always works; otherwise die by SIGKILL or fail while a marker exists
for a in "$@"; do
  [ "$a" = "--help" ] && exec "$0.real" "$@"
done
[ -e {kill} ] && kill -KILL $$
[ -e {fail} ] && {{ echo "Encountered Error: deterministic failure"; exit 1; }}
exec "$0.real" "$@"
"""


def _wrapped_sdk(tmp_path: Path, tool: str) -> tuple[Path, Path, Path]:
    """A stand-in SDK whose ``tool`` obeys a kill and a fail marker file."""
    from fixtures.qairt_standin import make_sdk

    root = make_sdk(tmp_path / "sdk", "2.31.0")
    path = root / TOOLS / tool
    path.rename(path.with_name(tool + ".real"))
    kill, fail = tmp_path / "kill.marker", tmp_path / "fail.marker"
    path.write_text(WRAPPER.format(kill=kill, fail=fail))
    path.chmod(0o755)
    return root, kill, fail


@pytest.mark.parametrize("script, killed_by", [
    ("kill -SEGV $$", signal.SIGSEGV), ("kill -KILL $$", signal.SIGKILL),
    ("exit 1", None), ("exit 255", None), ("exit 0", None)])
def test_killed_by_and_transient(sdk_factory, tmp_path: Path, script: str,
                                 killed_by: int | None) -> None:
    run = run_tool(["bash", "-c", script], sdk=sdk_factory(), workdir=tmp_path, log_name="k",
                   timeout=60)
    assert run.killed_by == killed_by and run.transient == (killed_by is not None)
    if killed_by is not None:
        assert f"killed by {signal.Signals(killed_by).name}" in run.describe()


def test_timeout_is_transient(sdk_factory, tmp_path: Path) -> None:
    run = run_tool(["sleep", "30"], sdk=sdk_factory(), workdir=tmp_path, log_name="t",
                   timeout=0.5)
    assert run.timed_out and run.transient


def _dry_run(root: Path, tmp_path: Path, workdir: Path) -> StageResult:
    model = tiny_conv_model(tmp_path / "m.onnx")
    export = make_export(tmp_path, model=model, name="tiny",
                         inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")})
    env = Environment(workdir=workdir, environ={"PATH": "/usr/bin:/bin",
                                                "QNN_SDK_ROOT": str(root)})
    stages = load_stages(("static_shapes", "dry_run"))
    return {r.stage: r for r in Pipeline([export], env, stages=stages)
            .run_export("tiny")}["dry_run"]


def test_killed_tool_is_retried_by_the_next_run(tmp_path: Path) -> None:
    root, kill, _ = _wrapped_sdk(tmp_path, "qnn-onnx-converter")
    kill.touch()
    first = _dry_run(root, tmp_path, tmp_path / "work")
    assert first.status == Status.FAILED and first.data[NO_CACHE] is True
    assert "killed by SIGKILL" in first.failure_text()
    kill.unlink()
    again = _dry_run(root, tmp_path, tmp_path / "work")
    assert not again.cached and again.status == Status.PASSED, again.failure_text()


def test_an_ordinary_failure_is_still_cached(tmp_path: Path) -> None:
    root, _, fail = _wrapped_sdk(tmp_path, "qnn-onnx-converter")
    fail.touch()
    first = _dry_run(root, tmp_path, tmp_path / "work")
    assert first.status == Status.FAILED and NO_CACHE not in first.data
    again = _dry_run(root, tmp_path, tmp_path / "work")
    assert again.cached and again.status == Status.FAILED


def _ctx(export, env: Environment, stage: str, upstream: dict) -> StageContext:
    workdir = env.workdir / stage
    workdir.mkdir(parents=True, exist_ok=True)
    return StageContext(export=export, env=env, workdir=workdir, upstream=upstream)


def test_convert_and_model_lib_mark_a_killed_tool(tmp_path: Path) -> None:
    root, kill, _ = _wrapped_sdk(tmp_path, "qnn-onnx-converter")
    lib = root / TOOLS / "qnn-model-lib-generator"
    lib.rename(lib.with_name(lib.name + ".real"))
    lib.write_text(WRAPPER.format(kill=kill, fail=tmp_path / "never"))
    lib.chmod(0o755)
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=False)
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    export = make_export(tmp_path, model=model, sdk=SdkSpec(root=root),
                         target=TargetSpec(lib_target="x86_64-linux-clang"))
    env = Environment(workdir=tmp_path / "work", environ={"PATH": "/usr/bin:/bin"})
    up = {"static_shapes": StageResult("static_shapes", Status.PASSED,
                                       artefacts={"model": str(model)},
                                       data={"inputs": [{"name": "x", "dtype": "float32",
                                                         "shape": [1, 3, 8, 8]}]}),
          "calibration": StageResult("calibration", Status.PASSED,
                                     artefacts={"input_list": str(lst)})}
    converted = ConvertStage().run(_ctx(export, env, "convert", up))
    assert converted.status == Status.PASSED, converted.failure_text()
    assert NO_CACHE not in converted.data
    kill.touch()
    killed = ConvertStage().run(_ctx(export, env, "convert2", up))
    assert killed.status == Status.FAILED and killed.data[NO_CACHE] is True
    lib_res = ModelLibStage().run(_ctx(export, env, "model_lib", {"convert": converted}))
    assert lib_res.status == Status.FAILED and lib_res.data[NO_CACHE] is True
    assert "killed by SIGKILL" in lib_res.failure_text()
