"""Skip only when no SDK is configured at all; a configured SDK root or eSDK script
that is wrong is an ERROR (exit 2) naming where it was configured."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from qnn_ci.cli import main
from qnn_ci.engine.pipeline import Pipeline, exit_status
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.convert import ConvertStage
from qnn_ci.stages.dry_run import DryRunStage
from qnn_ci.stages.model_lib import ModelLibStage
from qnn_ci.stages.registry import load_stages
from tests.sdk_tools.conftest import tiny_conv_model

LINUX = "aarch64-oe-linux-gcc11.2"
HINT = "set sdk.root to a QAIRT SDK root (the folder holding bin/envsetup.sh)"


def _manifest(tmp_path: Path, export_sdk: str = "", defaults_sdk: str = "") -> Path:
    tiny_conv_model(tmp_path / "m.onnx")
    path = tmp_path / "qnn-ci.yaml"
    path.write_text(textwrap.dedent(f"""\
        defaults:
          inputs: {{x: {{shape: [1, 3, 8, 8]}}}}
          target: {{soc: SM8550, lib_target: {LINUX}}}
        {defaults_sdk}
        exports:
          - name: tiny
            model: m.onnx
        {export_sdk}
        """), "utf-8")
    return path


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _dry_run(manifest: Path, env: Environment) -> tuple[StageResult, int]:
    [export] = load_manifest(manifest).exports
    pipeline = Pipeline([export], env, stages=load_stages(("static_shapes", "dry_run",
                                                           "convert")))
    results = pipeline.run_export("tiny")
    by_stage = {r.stage: r for r in results}
    assert by_stage["convert"].status == Status.SKIPPED                   # blocked
    return by_stage["dry_run"], exit_status({"tiny": results})


def test_nothing_configured_is_a_skip(export_factory, tmp_path: Path) -> None:
    env = Environment(workdir=tmp_path, environ={"PATH": "/usr/bin:/bin"})
    linux = export_factory(target=TargetSpec(lib_target=LINUX))
    for stage in (DryRunStage(), ConvertStage(), ModelLibStage()):
        assert stage.unavailable(linux, env) == "QNN_SDK_ROOT is not set"


def test_manifest_sdk_root_typo_is_an_error_at_its_line(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, export_sdk="    sdk: {root: ./qairt-typo}")
    res, code = _dry_run(manifest, Environment(workdir=tmp_path / "w", environ={}))
    assert res.status == Status.ERROR and code == 2
    assert res.summary == (f"{manifest}:{_line(manifest, 'qairt-typo')}: sdk.root: QNN SDK "
                           f"root {tmp_path / 'qairt-typo'} does not exist; {HINT}")


def test_defaults_sdk_root_typo_names_the_defaults_line(standin_root, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, defaults_sdk="  sdk: {root: /nowhere/qairt}")
    # The manifest wins over a good QNN_SDK_ROOT: the typo must not be papered over.
    env = Environment(workdir=tmp_path / "w", environ={"QNN_SDK_ROOT": str(standin_root())})
    res, code = _dry_run(manifest, env)
    assert res.status == Status.ERROR and code == 2
    assert res.summary.startswith(f"{manifest}:{_line(manifest, '/nowhere/qairt')}: sdk.root: "
                                  "QNN SDK root /nowhere/qairt does not exist")


def test_environment_variable_typo_is_an_error_naming_it(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    missing = tmp_path / "qairt-typo"
    res, code = _dry_run(manifest, Environment(workdir=tmp_path / "w",
                                               environ={"QNN_SDK_ROOT": str(missing)}))
    assert res.status == Status.ERROR and code == 2
    assert f"QNN_SDK_ROOT: QNN SDK root {missing} does not exist" in res.summary
    assert "unset it to skip the SDK stages" in res.summary


def test_option_typo_is_an_error_naming_the_option(standin_root, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    missing = tmp_path / "opt-typo"
    env = Environment(workdir=tmp_path / "w", sdk_root=missing,
                      environ={"QNN_SDK_ROOT": str(standin_root())})
    res, _ = _dry_run(manifest, env)
    assert res.status == Status.ERROR
    assert f"--qnn-sdk-root / --sdk-root: QNN SDK root {missing} does not exist" in res.summary


def test_folder_that_is_not_an_sdk(standin_root, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    res, _ = _dry_run(manifest, Environment(workdir=tmp_path / "w",
                                            environ={"QNN_SDK_ROOT": str(bare)}))
    assert res.status == Status.ERROR
    assert f"QNN_SDK_ROOT: {bare}/bin/envsetup.sh is missing (not a QAIRT SDK root?)" \
        in res.summary
    partial = tmp_path / "partial"
    shutil.copytree(standin_root(), partial, symlinks=True)
    (partial / "bin/x86_64-linux-clang/qnn-model-lib-generator").unlink()
    env = Environment(workdir=tmp_path / "w2", environ={"QNN_SDK_ROOT": str(partial)})
    export = load_manifest(manifest).exports[0]
    stage = ModelLibStage()
    assert stage.unavailable(export, env) == \
        "ESDK_ENV is not set (needed by qnn-model-lib-generator for aarch64 Linux targets)"
    env = Environment(workdir=tmp_path / "w2", environ={"QNN_SDK_ROOT": str(partial),
                                                        "ESDK_ENV": "/etc/hostname"})
    assert stage.unavailable(export, env) is None
    ctx = StageContext(export=export, env=env, workdir=tmp_path / "w2", upstream={})
    with pytest.raises(UserError, match=r"QNN_SDK_ROOT: qnn-model-lib-generator not found in "):
        stage.fingerprint(ctx)


@pytest.mark.parametrize("where", ["manifest", "environment"])
def test_configured_esdk_that_does_not_exist(standin_root, tmp_path: Path, where: str) -> None:
    missing = tmp_path / "environment-setup-typo"
    manifest = _manifest(tmp_path, export_sdk=f"    sdk: {{esdk_env: {missing}}}"
                         if where == "manifest" else "")
    environ = {"QNN_SDK_ROOT": str(standin_root())}
    if where == "environment":
        environ["ESDK_ENV"] = str(missing)
    env = Environment(workdir=tmp_path / "w", environ=environ)
    export = load_manifest(manifest).exports[0]
    stage = ModelLibStage()
    assert stage.unavailable(export, env) is None              # configured: not a skip
    ctx = StageContext(export=export, env=env, workdir=tmp_path / "w", upstream={})
    with pytest.raises(UserError) as err:
        stage.fingerprint(ctx)
    text = err.value.oneline()
    key = (f"{manifest}:{_line(manifest, 'esdk_env')}: sdk.esdk_env" if where == "manifest"
           else "ESDK_ENV")
    assert text.startswith(f"{key}: eSDK environment script {missing} does not exist; set ")


def test_qnn_ci_run_exits_2_on_a_wrong_sdk_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(tmp_path)
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.delenv("ESDK_ENV", raising=False)
    argv = ["run", str(manifest), "--workdir", str(tmp_path / "w"), "--stage", "dry_run"]
    assert main(argv) == 0                                       # nothing configured: skipped
    capsys.readouterr()
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path / "qairt-typo"))
    assert main(argv) == 2
    assert "QNN_SDK_ROOT: QNN SDK root" in capsys.readouterr().out
