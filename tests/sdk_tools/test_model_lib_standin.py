"""qnn-model-lib-generator against the stand-in: explicit targets, eSDK, ELF checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_ci.engine.spec import InputSpec, TargetSpec
from qnn_ci.errors import UserError
from qnn_ci.sdk.convert import convert
from qnn_ci.sdk.converter_cmd import build_convert_argv, probe_converter
from qnn_ci.sdk.locate import Sdk, version_from_root
from qnn_ci.sdk.model_lib import (
    build_model_lib,
    choose_target,
    needs_esdk,
    probe_lib_targets,
)
from qnn_ci.tables import LIB_GENERATOR_DEFAULT_TARGETS
from tests.sdk_tools.conftest import tiny_conv_model, write_input_list

AARCH64 = "aarch64-oe-linux-gcc11.2"


@pytest.fixture
def converted(sdk_factory, export_factory, tmp_path: Path) -> tuple[Path, Path]:
    sdk = sdk_factory()
    model = tiny_conv_model(tmp_path / "m.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    export = export_factory(inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")})
    out_cpp = tmp_path / "conv" / "m.cpp"
    argv = build_convert_argv(export, model, lst, out_cpp,
                              probe_converter(sdk, tmp_path / "cache").flags)
    out = convert(argv, sdk=sdk, workdir=out_cpp.parent, output_path=out_cpp, model=model,
                  timeout=120)
    assert out.ok and out.cpp and out.bin, out.failures
    return out.cpp, out.bin


def test_targets_read_from_help_in_any_order(sdk_factory, tmp_path: Path) -> None:
    sdk = sdk_factory(targets=["x86_64-linux-clang", AARCH64, "aarch64-ubuntu-gcc9.4"])
    seen = [probe_lib_targets(sdk, tmp_path / str(i)).supported for i in range(3)]
    assert all(sorted(s) == sorted(["x86_64-linux-clang", AARCH64, "aarch64-ubuntu-gcc9.4"])
               for s in seen)
    assert probe_lib_targets(sdk, tmp_path / "d").defaults == \
        list(LIB_GENERATOR_DEFAULT_TARGETS)


def test_lib_target_required_never_the_defaults(sdk_factory, export_factory,
                                                tmp_path: Path) -> None:
    targets = probe_lib_targets(sdk_factory(), tmp_path)
    with pytest.raises(UserError) as exc:
        choose_target(export_factory(), targets)
    text = exc.value.oneline()
    assert "target.lib_target: is required" in text
    assert AARCH64 in text and "aarch64 Linux board" in text


def test_unknown_target_suggests_nearest(sdk_factory, export_factory, tmp_path: Path) -> None:
    targets = probe_lib_targets(sdk_factory(), tmp_path)
    export = export_factory(target=TargetSpec(lib_target="aarch64-oe-linux-gcc11.4"))
    with pytest.raises(UserError, match=r"nearest: aarch64-oe-linux-gcc11\.2"):
        choose_target(export, targets)
    ok = export_factory(target=TargetSpec(lib_target=AARCH64))
    assert choose_target(ok, targets) == AARCH64


@pytest.mark.parametrize("target, machine, esdk", [(AARCH64, 183, True),
                                                   ("x86_64-linux-clang", 62, False)])
def test_library_built_and_elf_checked(sdk_factory, converted, tmp_path: Path, target: str,
                                       machine: int, esdk: bool) -> None:
    cpp, bin_path = converted
    out = build_model_lib(sdk=sdk_factory(esdk=esdk), cpp=cpp, bin_path=bin_path,
                          target=target, lib_name="m", workdir=tmp_path / "lib", timeout=120)
    assert out.ok, out.failures
    assert out.library == tmp_path / "lib" / "lib" / target / "libm.so"
    assert out.elf is not None and out.elf.machine == machine
    argv = out.run.argv
    assert argv[argv.index("-t") + 1] == target and "-l" in argv
    assert all(Path(argv[argv.index(f) + 1]).is_absolute() for f in ("-c", "-b", "-o"))


def test_aarch64_without_esdk_fails(sdk_factory, converted, tmp_path: Path) -> None:
    cpp, bin_path = converted
    sdk = sdk_factory()
    with pytest.raises(ValueError, match="esdk"):
        build_model_lib(sdk=sdk, cpp=cpp, bin_path=bin_path, target=AARCH64, lib_name="m",
                        workdir=tmp_path / "lib", timeout=120)


def _wrapped_sdk(root: Path, after: str) -> Sdk:
    """A stand-in SDK whose lib generator runs the real one, then ``after``."""
    from fixtures.qairt_standin import make_sdk

    sdk_root = make_sdk(root)
    tool = sdk_root / "bin" / "x86_64-linux-clang" / "qnn-model-lib-generator"
    real = tool.with_name("qnn-model-lib-generator.real")
    tool.rename(real)
    tool.write_text(f'#!/bin/bash\n"{real}" "$@" || exit $?\n'
                    'while [ $# -gt 0 ]; do case $1 in -o) out=$2;; -t) t=$2;; -l) l=$2;; esac;'
                    ' shift; done\nlib="$out/$t/lib$l.so"\n' + after + "\nexit 0\n")
    tool.chmod(0o755)
    return Sdk(sdk_root, None, version_from_root(sdk_root))


def test_exit_0_without_library_fails(converted, esdk_script: Path, tmp_path: Path) -> None:
    sdk = _wrapped_sdk(tmp_path / "sdk", 'rm -f "$lib"')
    sdk.esdk_env = esdk_script
    cpp, bin_path = converted
    out = build_model_lib(sdk=sdk, cpp=cpp, bin_path=bin_path, target=AARCH64, lib_name="m",
                          workdir=tmp_path / "lib", timeout=120)
    assert out.run.exit_code == 0 and not out.ok and out.library is None
    assert "exited 0 but" in out.failures[0] and "libm.so does not exist" in out.failures[0]
    assert "the tool reported" in out.failures[0]


def test_wrong_elf_machine_fails(converted, esdk_script: Path, tmp_path: Path) -> None:
    # The library replaced by an x86-64 shared object (the SDK's own host backend).
    sdk = _wrapped_sdk(tmp_path / "sdk",
                       'cp "$QNN_SDK_ROOT/lib/x86_64-linux-clang/libQnnCpu.so" "$lib"')
    sdk.esdk_env = esdk_script
    cpp, bin_path = converted
    out = build_model_lib(sdk=sdk, cpp=cpp, bin_path=bin_path, target=AARCH64, lib_name="m",
                          workdir=tmp_path / "lib", timeout=120)
    assert out.run.exit_code == 0 and not out.ok
    assert out.elf is not None and out.elf.machine == 62
    assert "x86-64" in out.failures[0] and "AArch64" in out.failures[0]


def test_library_without_weights_file(sdk_factory, export_factory, tmp_path: Path) -> None:
    from tests.sdk_tools.conftest import weightless_model

    sdk = sdk_factory()
    model = weightless_model(tmp_path / "w.onnx")
    lst = write_input_list(tmp_path / "cal", {"a": ((1, 4), "float32"),
                                              "b": ((1, 4), "float32")})
    out_cpp = tmp_path / "conv" / "w.cpp"
    argv = build_convert_argv(export_factory(), model, lst, out_cpp,
                              probe_converter(sdk, tmp_path / "cache").flags)
    conv = convert(argv, sdk=sdk, workdir=out_cpp.parent, output_path=out_cpp, model=model,
                   timeout=120)
    assert conv.ok and conv.bin is None, conv.failures
    out = build_model_lib(sdk=sdk, cpp=out_cpp, bin_path=None, target="x86_64-linux-clang",
                          lib_name="w", workdir=tmp_path / "lib", timeout=120)
    assert out.ok, out.failures
    assert "-b" not in out.run.argv and out.elf is not None and out.elf.machine == 62


@pytest.mark.parametrize("target, esdk", [("aarch64-android", False), ("arm-android", False),
                                          (AARCH64, True), ("x86_64-linux-clang", False)])
def test_only_linux_cross_targets_need_the_esdk(target: str, esdk: bool) -> None:
    assert needs_esdk(target) == esdk


def test_android_target_needs_the_ndk_not_the_esdk(sdk_factory, converted,
                                                   tmp_path: Path) -> None:
    cpp, bin_path = converted
    sdk = sdk_factory()                                    # no eSDK
    sdk.environ = {"PATH": "/usr/bin:/bin"}
    out = build_model_lib(sdk=sdk, cpp=cpp, bin_path=bin_path, target="aarch64-android",
                          lib_name="m", workdir=tmp_path / "no-ndk", timeout=120)
    assert not out.ok
    assert out.failures[0].splitlines()[0] == (
        "qnn-model-lib-generator failed: aarch64-android builds with the Android NDK, not the "
        "Linux eSDK: set ANDROID_NDK_ROOT to an Android NDK (with ndk-build on PATH) in the "
        "runner's environment")
    ndk = tmp_path / "android-ndk"
    ndk.mkdir()
    sdk.environ = {"PATH": "/usr/bin:/bin", "ANDROID_NDK_ROOT": str(ndk)}
    out = build_model_lib(sdk=sdk, cpp=cpp, bin_path=bin_path, target="aarch64-android",
                          lib_name="m", workdir=tmp_path / "ndk", timeout=120)
    assert out.ok, out.failures
    assert out.elf is not None and out.elf.machine == 183
