"""The stand-in qnn-model-lib-generator: help text, targets, the default-target
trap, errors, ELF machines, the payload, and the eSDK sourcing order."""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fixtures.qairt_standin import make_sdk, read_elf_machine, read_standin_payload
from tests.standin_sdk.conftest import convert, run_bash, run_tool, write_samples

PAGE_TARGETS_2371 = {"aarch64-ubuntu-gcc9.4", "aarch64-oe-linux-gcc11.2", "aarch64-oe-linux-gcc9.3",
                     "aarch64-oe-linux-gcc8.2", "aarch64-android", "x86_64-linux-clang",
                     "arm-android"}
LAST_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} -    INFO - qnn-model-lib-generator:"
                       r" Target: (\S+)\tLibrary: (\S+)$")


def libgen(sdk: Path, *args: str | Path, cwd: Path | None = None):  # type: ignore[no-untyped-def]
    return run_tool(sdk, "qnn-model-lib-generator", *args, cwd=cwd)


def supported_targets(help_text: str) -> tuple[list[str], list[str]]:
    """(targets in listed order, the raw lines of the sentence) from --help."""
    lines = help_text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "Supported targets:" in ln)
    block = []
    for ln in lines[start:]:
        block.append(ln)
        if ln.rstrip().endswith("."):
            break
    sentence = " ".join(ln.strip() for ln in block)
    names = sentence.split("Supported targets:", 1)[1].strip().rstrip(".")
    return [n.strip() for n in names.split(",")], block


@pytest.fixture(scope="module")
def model_src(sdk: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("libsrc")
    samples = write_samples(out / "calib", {"x": ((1, 3, 8, 8), "float32")}, 2)
    cpp = out / "tiny_w8a16.cpp"
    run = convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp, "--input_list",
                  samples, "--act_bitwidth", "16", "--bias_bitwidth", "32")
    assert run.code == 0, run.text
    return {"cpp": cpp, "bin": out / "tiny_w8a16.bin", "dir": out}


def test_help_lists_targets_shuffled_and_wrapped(sdk: Path) -> None:
    orders = set()
    for _ in range(4):
        run = libgen(sdk, "--help")
        assert run.code == 0
        names, block = supported_targets(run.stdout)
        assert set(names) == PAGE_TARGETS_2371 and len(names) == len(PAGE_TARGETS_2371)
        assert len(block) >= 3
        assert all(ln.startswith(" " * 24) and len(ln) <= 80 for ln in block)
        assert "Default: [x86_64-linux-clang, aarch64-android]" in run.stdout
        orders.add(tuple(names))
    assert len(orders) > 1


def test_targets_come_from_make_sdk(tmp_path: Path, model_src: dict[str, Path]) -> None:
    sdk = make_sdk(tmp_path / "sdk", "2.31.0", targets=["x86_64-linux-clang",
                                                       "aarch64-oe-linux-gcc11.2"])
    names, _ = supported_targets(libgen(sdk, "--help").stdout)
    assert set(names) == {"x86_64-linux-clang", "aarch64-oe-linux-gcc11.2"}
    run = libgen(sdk, "-c", model_src["cpp"], "-t", "arm-android", "-o", tmp_path / "lib")
    assert run.code == 1 and "ValueError: Unsupported target(s): arm-android" in run.stderr


def test_errors_raise_python_exceptions(sdk: Path, model_src: dict[str, Path],
                                       tmp_path: Path) -> None:
    run = libgen(sdk, "-c", model_src["cpp"], "-t", "bogus", "-o", tmp_path / "lib")
    assert run.code == 1
    assert "Traceback (most recent call last):" in run.stderr
    assert run.stderr.rstrip().endswith("ValueError: Unsupported target(s): bogus")
    run = libgen(sdk, "-c", tmp_path / "missing.cpp", "-t", "x86_64-linux-clang")
    assert run.code == 1
    assert "FileNotFoundError: Unable to find the model source file, invalid path:" in run.stderr
    no_ext = tmp_path / "qnn_model_dynamic"            # what `-o` without .cpp produces
    no_ext.write_text(model_src["cpp"].read_text())
    run = libgen(sdk, "-c", no_ext, "-t", "x86_64-linux-clang")
    assert run.code == 1 and "is not a cpp model file" in run.stderr
    run = libgen(sdk, "-t", "x86_64-linux-clang")
    assert run.code == 2                                # -c is required (argparse)
    assert not (tmp_path / "lib").exists()


def test_default_targets_trap(sdk: Path, esdk: Path, model_src: dict[str, Path],
                              tmp_path: Path) -> None:
    out = tmp_path / "libs"
    run = run_bash(f"source {esdk} && source {sdk}/bin/envsetup.sh && "
                   f"qnn-model-lib-generator -c {model_src['cpp']} -b {model_src['bin']} "
                   f"-o {out}", cwd=tmp_path)
    assert run.code == 0, run.text
    built = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.so"))
    assert built == ["aarch64-android/libtiny_w8a16.so", "x86_64-linux-clang/libtiny_w8a16.so"]
    assert read_elf_machine(out / "aarch64-android/libtiny_w8a16.so")[3] == 183


@pytest.mark.parametrize(("target", "elf_class", "machine"), [
    ("aarch64-oe-linux-gcc11.2", 2, 183), ("x86_64-linux-clang", 2, 62), ("arm-android", 1, 40),
])
def test_elf_header_per_target(sdk: Path, esdk: Path, model_src: dict[str, Path], tmp_path: Path,
                               target: str, elf_class: int, machine: int) -> None:
    out = tmp_path / "libs"
    run = run_bash(f"source {esdk} && source {sdk}/bin/envsetup.sh && qnn-model-lib-generator "
                   f"-c {model_src['cpp']} -b {model_src['bin']} -t {target} -o {out} "
                   "-l encoder_w8a16", cwd=tmp_path)
    assert run.code == 0, run.text
    lib = out / target / "libencoder_w8a16.so"
    assert read_elf_machine(lib) == (elf_class, 1, 3, machine)
    last = [ln for ln in run.text.splitlines() if "Target:" in ln][-1]
    match = LAST_LINE.match(last)
    assert match and match.groups() == (target, str(lib))


def test_library_name_rules(sdk: Path, model_src: dict[str, Path], tmp_path: Path) -> None:
    t = ("-t", "x86_64-linux-clang")
    assert libgen(sdk, "-c", model_src["cpp"], "-b", model_src["bin"], *t, "-o",
                  tmp_path / "a").code == 0
    assert (tmp_path / "a/x86_64-linux-clang/libtiny_w8a16.so").is_file()
    assert libgen(sdk, "-c", model_src["cpp"], *t, "-o", tmp_path / "b").code == 0
    assert (tmp_path / "b/x86_64-linux-clang/libqnn_model.so").is_file()
    assert libgen(sdk, "-c", model_src["cpp"], *t, cwd=tmp_path).code == 0   # default <cwd>/lib
    assert (tmp_path / "lib/x86_64-linux-clang/libqnn_model.so").is_file()


def test_esdk_sourced_after_envsetup_loses_the_tools(sdk: Path, esdk: Path,
                                                    model_src: dict[str, Path],
                                                    tmp_path: Path) -> None:
    run = run_bash(f"source {sdk}/bin/envsetup.sh && source {esdk} && qnn-model-lib-generator "
                   f"-c {model_src['cpp']} -t aarch64-oe-linux-gcc11.2 -o {tmp_path}/l",
                   cwd=tmp_path)
    assert run.code == 127 and "command not found" in run.stderr
    assert not (tmp_path / "l").exists()


def test_aarch64_needs_the_esdk(sdk: Path, model_src: dict[str, Path], tmp_path: Path) -> None:
    run = run_bash(f"source {sdk}/bin/envsetup.sh && qnn-model-lib-generator "
                   f"-c {model_src['cpp']} -t aarch64-oe-linux-gcc11.2 -o {tmp_path}/l",
                   cwd=tmp_path)
    assert run.code == 1 and "compiler not found" in run.stderr
    assert not (tmp_path / "l/aarch64-oe-linux-gcc11.2/libqnn_model.so").exists()


def test_esdk_changes_directory_so_relative_paths_move(sdk: Path, esdk: Path,
                                                      model_src: dict[str, Path],
                                                      tmp_path: Path) -> None:
    run = run_bash(f"source {esdk} && source {sdk}/bin/envsetup.sh && qnn-model-lib-generator "
                   f"-c {model_src['cpp']} -t x86_64-linux-clang -o rel_out", cwd=tmp_path)
    assert run.code == 0, run.text
    assert not (tmp_path / "rel_out").exists()
    assert (esdk.parent / "rel_out/x86_64-linux-clang/libqnn_model.so").is_file()


def test_esdk_refuses_a_set_ld_library_path(esdk: Path, tmp_path: Path) -> None:
    run = run_bash(f"export LD_LIBRARY_PATH=/opt/x; source {esdk}; echo rc=$?; echo $CXX",
                   cwd=tmp_path)
    assert "unset LD_LIBRARY_PATH" in run.stdout and "rc=1" in run.stdout
    assert "g++" not in run.stdout


def test_envsetup_must_be_sourced_in_bash(sdk: Path, tmp_path: Path) -> None:
    script = sdk / "bin" / "envsetup.sh"
    run = run_bash(f"bash {script}", cwd=tmp_path)
    assert run.code == 1 and "must be sourced" in run.stderr
    run = run_bash(f"sh -c {shlex.quote(f'. {script} && echo SOURCED')}", cwd=tmp_path)
    assert "SOURCED" not in run.stdout
    run = run_bash(f"source {script} >/dev/null && echo $QNN_SDK_ROOT && command -v "
                   "qnn-onnx-converter", cwd=tmp_path)
    assert run.code == 0
    assert run.stdout.split() == [str(sdk), str(sdk / "bin/x86_64-linux-clang/qnn-onnx-converter")]


def test_backend_libraries_for_a_board_folder(sdk: Path) -> None:
    for name in ("libQnnCpu.so", "libQnnHtp.so"):
        lib = sdk / "lib/aarch64-oe-linux-gcc11.2" / name
        assert read_elf_machine(lib) == (2, 1, 3, 183)
        assert b"v2.31.0.250130151446_114721" in lib.read_bytes()
    assert "version: 2.31.0.250130\n" in (sdk / "sdk.yaml").read_text()


def test_payload_runs_the_converted_classifier(sdk: Path, esdk: Path, cls_model: Path,
                                               tmp_path: Path) -> None:
    samples = write_samples(tmp_path / "calib", {"x": ((1, 3, 48, 192), "float32")}, 2)
    cpp = tmp_path / "cls.cpp"
    run = convert(sdk, "-i", cls_model, "-d", "x", "1,3,48,192", "-o", cpp,
                  "--input_list", samples, "--act_bitwidth", "16")
    assert run.code == 0, run.text
    out = tmp_path / "libs"
    run = run_bash(f"source {esdk} && source {sdk}/bin/envsetup.sh && qnn-model-lib-generator "
                   f"-c {cpp} -b {tmp_path / 'cls.bin'} -t aarch64-oe-linux-gcc11.2 -o {out}",
                   cwd=tmp_path)
    assert run.code == 0, run.text
    lib = out / "aarch64-oe-linux-gcc11.2/libcls.so"
    payload = read_standin_payload(lib)
    assert base64.b64decode(payload["onnx_b64"]) == cls_model.read_bytes()
    assert payload["act_bitwidth"] == 16 and payload["weights_bitwidth"] == 8
    assert payload["sdk_version"] == "2.31.0" and payload["graph_name"] == "cls"
    assert payload["inputs"] == [{"name": "x", "dtype": "float32", "dims": [1, 3, 48, 192],
                                  "qnn_dims": [1, 48, 192, 3]}]
    (output,) = payload["outputs"]
    assert output["name"] == "save_infer_model/scale_0.tmp_1"
    assert output["sanitized"] == "save_infer_model_scale_0_tmp_1" and output["dims"] == [1, 2]
    assert b"qaisw-v2.31.0." in lib.read_bytes()
    session = ort.InferenceSession(base64.b64decode(payload["onnx_b64"]),
                                   providers=["CPUExecutionProvider"])
    x = np.fromfile(tmp_path / "calib/x_0.raw", dtype=np.float32).reshape(
        payload["inputs"][0]["dims"])
    (y,) = session.run([output["name"]], {"x": x})
    assert list(y.shape) == output["dims"]


def test_copied_source_still_finds_its_model(sdk: Path, model_src: dict[str, Path],
                                             tmp_path: Path) -> None:
    work = tmp_path / "model_lib"
    work.mkdir()
    (work / "renamed.cpp").write_bytes(model_src["cpp"].read_bytes())
    (work / "renamed.bin").write_bytes(model_src["bin"].read_bytes())
    run = libgen(sdk, "-c", work / "renamed.cpp", "-b", work / "renamed.bin", "-t",
                 "x86_64-linux-clang", "-o", work / "lib")
    assert run.code == 0, run.text
    payload = read_standin_payload(work / "lib/x86_64-linux-clang/librenamed.so")
    assert payload["graph_name"] == "tiny_w8a16" and payload.get("onnx_b64")
    # a source the stand-in converter never wrote still builds, without a model
    (work / "foreign.cpp").write_text("// not from the converter\n")
    run = libgen(sdk, "-c", work / "foreign.cpp", "-t", "x86_64-linux-clang", "-o", work / "l2")
    assert run.code == 0 and "WARNING" in run.text
    assert "onnx_b64" not in read_standin_payload(work / "l2/x86_64-linux-clang/libqnn_model.so")
