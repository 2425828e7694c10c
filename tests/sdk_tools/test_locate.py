"""Finding the SDK: precedence and the exact missing piece."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_ci.engine.spec import SdkSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.errors import UserError
from qnn_ci.sdk.locate import find_sdk, sdk_problem, version_from_root


def _root(path: Path, *, envsetup: bool = True, tools: tuple[str, ...] = ()) -> Path:
    (path / "bin" / "x86_64-linux-clang").mkdir(parents=True)
    if envsetup:
        (path / "bin" / "envsetup.sh").write_text("export QNN_SDK_ROOT=x\n")
    for tool in tools:
        (path / "bin" / "x86_64-linux-clang" / tool).write_text("#!/bin/sh\n")
    return path


def test_problems_name_the_missing_piece(export_factory, tmp_path: Path) -> None:
    export = export_factory()
    env = Environment(workdir=tmp_path, environ={})
    assert sdk_problem(export, env) == "QNN_SDK_ROOT is not set"
    env = Environment(workdir=tmp_path, environ={"QNN_SDK_ROOT": str(tmp_path / "x")})
    assert sdk_problem(export, env) == f"QNN SDK root {tmp_path / 'x'} does not exist"
    bare = _root(tmp_path / "bare", envsetup=False)
    env = Environment(workdir=tmp_path, environ={"QNN_SDK_ROOT": str(bare)})
    assert sdk_problem(export, env) == \
        f"{bare}/bin/envsetup.sh is missing (not a QAIRT SDK root?)"
    notool = _root(tmp_path / "notool")
    env = Environment(workdir=tmp_path, environ={"QNN_SDK_ROOT": str(notool)})
    assert sdk_problem(export, env) == \
        f"qnn-onnx-converter not found in {notool}/bin/x86_64-linux-clang"
    good = _root(tmp_path / "good", tools=("qnn-onnx-converter", "qnn-model-lib-generator"))
    env = Environment(workdir=tmp_path, environ={"QNN_SDK_ROOT": str(good)})
    assert sdk_problem(export, env) is None
    assert sdk_problem(export, env, need_esdk=True) == \
        "ESDK_ENV is not set (needed by qnn-model-lib-generator for aarch64 Linux targets)"
    with pytest.raises(UserError, match=r"sdk\.esdk_env: ESDK_ENV is not set"):
        find_sdk(export, env, need_esdk=True)


def test_precedence_manifest_then_environment_then_variable(export_factory,
                                                            tmp_path: Path) -> None:
    a = _root(tmp_path / "a", tools=("qnn-onnx-converter",))
    b = _root(tmp_path / "b", tools=("qnn-onnx-converter",))
    c = _root(tmp_path / "c", tools=("qnn-onnx-converter",))
    esdk = tmp_path / "env-setup"
    esdk.write_text("true\n")
    environ = {"QNN_SDK_ROOT": str(c), "ESDK_ENV": str(esdk)}
    plain = export_factory()
    pinned = export_factory(sdk=SdkSpec(root=a))
    assert find_sdk(pinned, Environment(tmp_path, sdk_root=b, environ=environ)).root == a
    assert find_sdk(plain, Environment(tmp_path, sdk_root=b, environ=environ)).root == b
    sdk = find_sdk(plain, Environment(tmp_path, environ=environ), need_esdk=True)
    assert sdk.root == c and sdk.esdk_env == esdk


def test_version_from_sdk_yaml_or_folder_name(tmp_path: Path) -> None:
    root = _root(tmp_path / "qairt" / "2.31.0.250130")
    assert version_from_root(root) == "2.31.0"
    other = _root(tmp_path / "sdk")
    (other / "sdk.yaml").write_text("name: qairt\nversion: 2.36.1.250708\n")
    assert version_from_root(other) == "2.36.1"
    assert version_from_root(_root(tmp_path / "plain")) is None
