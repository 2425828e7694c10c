"""Dry run and conversion against the stand-in SDK, both flag eras."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.engine.spec import InputSpec, QuantizationSpec
from qnn_ci.sdk.convert import convert
from qnn_ci.sdk.converter_cmd import build_convert_argv, clear_memory_cache, probe_converter
from qnn_ci.sdk.dry_run import parse_dry_run
from qnn_ci.sdk.record import read_record
from qnn_ci.sdk.toolrun import run_tool
from tests.sdk_tools.conftest import (
    int64_input_model,
    tiny_conv_model,
    unsupported_op_model,
    weightless_model,
    write_input_list,
)

X = {"x": InputSpec("x", (1, 3, 8, 8), "float32")}


def _convert(sdk, export, model: Path, input_list: Path | None, out: Path, flags=None):
    flags = flags if flags is not None else probe_converter(sdk, out.parent / "cache").flags
    argv = build_convert_argv(export, model, input_list, out, flags)
    return argv, convert(argv, sdk=sdk, workdir=out.parent, output_path=out, model=model,
                         timeout=120)


@pytest.mark.parametrize("version, spelling, style, source", [
    ("2.31.0", "--act_bitwidth", "name", "QNN_SDK_VERSION"),
    ("2.13.0", "--act_bw", "windows", "tool path")])      # no stamp up to 2.22
def test_convert_per_era_w8a16_bias32(sdk_factory, export_factory, tmp_path: Path,
                                      version: str, spelling: str, style: str,
                                      source: str) -> None:
    sdk = sdk_factory(version, tool_path_style=style)
    model = tiny_conv_model(tmp_path / "m.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    argv, out = _convert(sdk, export_factory(inputs=X), model, lst, tmp_path / "o" / "m.cpp")
    assert out.ok, out.failures
    assert spelling in argv
    assert out.cpp == tmp_path / "o" / "m.cpp" and out.bin == tmp_path / "o" / "m.bin"
    assert out.net_json == tmp_path / "o" / "m_net.json"
    rec = read_record(out.cpp)
    assert rec.sdk_version == version and rec.sdk_version_source == source
    assert (rec.value("act_bitwidth"), rec.value("weights_bitwidth"),
            rec.value("bias_bitwidth")) == (16, 8, 32)
    assert rec.value("input_list") == str(lst)
    assert out.run.log_path.read_text().startswith("command: qnn-onnx-converter ")


def test_long_flags_on_old_sdk_fail_with_command_and_last_lines(
        sdk_factory, export_factory, tmp_path: Path) -> None:
    new_flags = probe_converter(sdk_factory("2.31.0"), tmp_path / "cache").flags
    sdk = sdk_factory("2.13.0")
    model = tiny_conv_model(tmp_path / "m.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    _, out = _convert(sdk, export_factory(inputs=X), model, lst, tmp_path / "o" / "m.cpp",
                      flags=new_flags)
    assert not out.ok and out.run.exit_code == 2
    msg = out.failures[0]
    assert "command: qnn-onnx-converter --input_network" in msg
    assert "unrecognized arguments: --act_bitwidth" in msg
    assert out.run.log_path.is_file()


def test_help_probed_once_per_sdk(sdk_factory, tmp_path: Path) -> None:
    sdk = sdk_factory("2.18.0")
    clear_memory_cache()
    first = probe_converter(sdk, tmp_path / "cache")
    logs = sorted((tmp_path / "cache").glob("converter-help-*.log"))
    assert len(logs) == 1
    logs[0].unlink()
    clear_memory_cache()           # a new process: the disk cache answers
    again = probe_converter(sdk, tmp_path / "cache")
    assert again == first and not list((tmp_path / "cache").glob("*.log"))
    other = probe_converter(sdk_factory("2.31.0"), tmp_path / "cache")
    assert other.help_hash != first.help_hash


def test_overrides_with_input_list(sdk_factory, export_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = tiny_conv_model(tmp_path / "m.onnx")
    enc = tmp_path / "m.encodings"
    enc.write_text(json.dumps({"version": "0.6.1", "activation_encodings": {"x": [{
        "bitwidth": 16, "dtype": "int", "is_symmetric": "False", "max": 1.0, "min": 0.0,
        "offset": 0, "scale": 1.0 / 65535}]}, "param_encodings": {}}))
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    export = export_factory(inputs=X, quantization=QuantizationSpec(overrides=enc))
    argv, out = _convert(sdk, export, model, lst, tmp_path / "o" / "m.cpp")
    assert out.ok, out.failures
    assert "--quantization_overrides" in argv and "--input_list" in argv
    rec = read_record(out.cpp)
    assert rec.value("quantization_overrides") == str(enc)
    assert rec.value("input_list") == str(lst)


def test_int64_input_stays_unquantized(sdk_factory, export_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = int64_input_model(tmp_path / "e.onnx")
    lst = write_input_list(tmp_path / "cal", {"ids": ((1, 5), "int64")})
    graph = [{"name": "ids", "dtype": "int64", "shape": [1, 5]}]
    flags = probe_converter(sdk, tmp_path / "cache").flags
    argv = build_convert_argv(export_factory(), model, lst, tmp_path / "o" / "e.cpp", flags,
                              graph_inputs=graph)
    out = convert(argv, sdk=sdk, workdir=tmp_path / "o", output_path=tmp_path / "o" / "e.cpp",
                  model=model, timeout=120)
    assert out.ok, out.failures
    assert read_record(out.cpp).value("input_encoding") == [["ids", "other"]]
    tensors = json.loads(out.net_json.read_text())["graph"]["tensors"]
    # Not quantized: an integer type (INT_64, or INT_32 without --keep_int64_inputs).
    assert tensors["ids"]["data_type"] in (100, 50)


def test_unsupported_op_fails_naming_node_and_op(sdk_factory, export_factory,
                                                 tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = unsupported_op_model(tmp_path / "u.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 2, 4, 4), "float32")})
    _, out = _convert(sdk, export_factory(), model, lst, tmp_path / "o" / "u.cpp")
    assert not out.ok and out.run.exit_code == 255
    assert (out.failed_node, out.failed_op) == ("warp/GridSample", "GridSample")
    assert "'warp/GridSample'" in out.failures[0] and "GridSample" in out.failures[0]
    assert "onnx_gridsample" in out.failures[0]


def test_encountered_error_text(sdk_factory, export_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = tiny_conv_model(tmp_path / "m.onnx")
    export = export_factory(inputs={"nope": InputSpec("nope", (1, 3, 8, 8))})
    _, out = _convert(sdk, export, model, None, tmp_path / "o" / "m.cpp")
    assert not out.ok and out.run.exit_code == 1
    assert out.failures[0].startswith("qnn-onnx-converter failed: ")
    assert "nope" in out.failures[0].splitlines()[0]


def test_source_without_extension_is_copied(sdk_factory, export_factory,
                                            tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = tiny_conv_model(tmp_path / "m.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    _, out = _convert(sdk, export_factory(inputs=X), model, lst, tmp_path / "o" / "qnn_model")
    assert out.ok, out.failures
    assert (tmp_path / "o" / "qnn_model").is_file()
    assert out.cpp == tmp_path / "o" / "qnn_model.cpp" and out.cpp.is_file()
    assert out.bin == tmp_path / "o" / "qnn_model.bin"
    assert any("without a .cpp extension" in n for n in out.notes)


def test_missing_bin_only_without_weights(sdk_factory, export_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = weightless_model(tmp_path / "w.onnx")
    lst = write_input_list(tmp_path / "cal", {"a": ((1, 4), "float32"),
                                              "b": ((1, 4), "float32")})
    _, out = _convert(sdk, export_factory(), model, lst, tmp_path / "o" / "w.cpp")
    assert out.ok, out.failures
    assert out.bin is None and not (tmp_path / "o" / "w.bin").exists()
    assert any("no w.bin written" in n for n in out.notes)


def test_missing_bin_with_weights_fails(sdk_factory, export_factory, tmp_path: Path) -> None:
    """A converter that loses the weights file (the stand-in, wrapped) is caught."""
    sdk = sdk_factory()
    wrapper = tmp_path / "bin" / "qnn-onnx-converter"
    wrapper.parent.mkdir()
    wrapper.write_text(
        '#!/bin/bash\n'
        f'"{sdk.tool("qnn-onnx-converter")}" "$@"; rc=$?\n'
        'while [ $# -gt 0 ]; do [ "$1" = --output_path ] && out=$2; shift; done\n'
        'rm -f "${out%.cpp}.bin"; exit $rc\n')
    wrapper.chmod(0o755)
    model = tiny_conv_model(tmp_path / "m.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    out_cpp = tmp_path / "o" / "m.cpp"
    flags = probe_converter(sdk, tmp_path / "cache").flags
    argv = build_convert_argv(export_factory(inputs=X), model, lst, out_cpp, flags)
    argv[0] = str(wrapper)
    out = convert(argv, sdk=sdk, workdir=out_cpp.parent, output_path=out_cpp, model=model,
                  timeout=120)
    assert out.run.exit_code == 0 and out.cpp == out_cpp
    assert not out.ok and out.bin is None
    assert "wrote no m.bin although the model has weights" in out.failures[0]


@pytest.mark.parametrize("ansi", [False, True])
def test_dry_run_problem_rows_fail_with_exit_0(sdk_factory, export_factory, tmp_path: Path,
                                               ansi: bool) -> None:
    sdk = sdk_factory(dry_run_ansi=ansi)
    model = unsupported_op_model(tmp_path / "u.onnx")
    flags = probe_converter(sdk, tmp_path / "cache").flags
    argv = build_convert_argv(export_factory(), model, None, tmp_path / "p.cpp", flags,
                              dry_run=True)
    run = run_tool(argv, sdk=sdk, workdir=tmp_path, log_name="dry_run", timeout=120)
    assert run.exit_code == 0
    assert ("\x1b[" in run.output) == ansi
    report = parse_dry_run(run.output)
    assert not report.passed(run.exit_code)
    assert [(p.layer, p.op, p.column) for p in report.problems] == \
        [("warp/GridSample", "GridSample", "Ops")]
    assert report.problems[0].text.endswith("unsupported in Converter")


def test_dry_run_clean(sdk_factory, export_factory, tmp_path: Path) -> None:
    sdk = sdk_factory("2.18.0")
    model = tiny_conv_model(tmp_path / "m.onnx")
    flags = probe_converter(sdk, tmp_path / "cache").flags
    argv = build_convert_argv(export_factory(inputs=X), model, None, tmp_path / "p.cpp", flags,
                              dry_run=True)
    run = run_tool(argv, sdk=sdk, workdir=tmp_path, log_name="dry_run", timeout=120)
    report = parse_dry_run(run.output)
    assert report.clean and report.passed(run.exit_code)


def test_failed_help_probe_runs_once_per_process(tmp_path: Path) -> None:
    from fixtures.qairt_standin import make_sdk
    from qnn_ci.errors import ToolError
    from qnn_ci.sdk.locate import Sdk

    # An SDK of its own: the shared session SDKs must keep a working converter.
    sdk = Sdk(root=make_sdk(tmp_path / "sdk", "2.31.0"), esdk_env=None, version="2.31.0")
    tool = sdk.tool("qnn-onnx-converter")
    calls = tmp_path / "calls"
    tool.write_text(f"#!/bin/bash\necho called >> {calls}\necho 'broken install' >&2\nexit 1\n")
    clear_memory_cache()
    for _ in range(3):  # fingerprint and run of dry_run and convert all ask
        with pytest.raises(ToolError, match="could not read the flags"):
            probe_converter(sdk, tmp_path / "cache")
    assert calls.read_text().count("called") == 1
    clear_memory_cache()           # a new process tries again
    with pytest.raises(ToolError):
        probe_converter(sdk, tmp_path / "cache")
    assert calls.read_text().count("called") == 2
