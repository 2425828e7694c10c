"""Each QAIRT era and header variant the stand-in SDK draws (fixtures/qairt_standin,
modelled on the real files), read back by our parsers: record, version and where it
came from, model prefix, FP16 audit, and the integer-input check from the CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fixtures.qairt_standin as standin
from qnn_ci.cli import main
from qnn_ci.sdk.cpp_model import read_cpp_model
from qnn_ci.sdk.fp16_audit import audit_fp16
from qnn_ci.sdk.net_json import read_net_json
from qnn_ci.sdk.record import read_record

CONVERTER = "bin/x86_64-linux-clang/qnn-onnx-converter"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eras")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, [1, 4])
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu"),
         helper.make_node("Identity", ["ids"], ["z"], name="id")],
        "tiny", [x, ids], [y, z], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(root / "tiny.onnx"))
    rng = np.random.default_rng(1)
    lines = []
    for i in range(2):
        xp, ip = root / f"x{i}.raw", root / f"ids{i}.raw"
        rng.random((1, 3, 8, 8), dtype=np.float32).tofile(xp)
        np.arange(4, dtype=np.int64).reshape(1, 4).tofile(ip)
        lines.append(f"x:={xp} ids:={ip}")
    (root / "list.txt").write_text("\n".join(lines) + "\n", "utf-8")
    return {"root": root, "model": root / "tiny.onnx", "list": root / "list.txt"}


_SDKS: dict[str, Path] = {}


def run(tiny: dict[str, Path], out: Path, version: str, *flags: str, **options: object
        ) -> Path:
    key = version + repr(sorted(options.items()))
    if key not in _SDKS:
        _SDKS[key] = standin.make_sdk(tiny["root"] / f"sdk{len(_SDKS)}", version,
                                      **options)  # type: ignore[arg-type]
    bw = ("--act_bitwidth", "16", "--weights_bitwidth", "8") if version >= "2.14" else \
        ("--act_bw", "16", "--weight_bw", "8")
    argv = [str(_SDKS[key] / CONVERTER), "--input_network", str(tiny["model"]),
            "-d", "x", "1,3,8,8", "-d", "ids", "1,4", "-o", str(out),
            "--input_list", str(tiny["list"]), *bw, *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


# version -> (era, SDK version read from a name-only record, its source)
ERAS = {
    "2.10.0": ("space", None, None),
    "2.18.0": ("space", None, None),
    "2.22.0": ("space", None, None),
    "2.25.0": ("semicolon", "2.25.0", "QNN_SDK_VERSION"),
    "2.29.0": ("semicolon", "2.29.0", "QNN_SDK_VERSION"),
    "2.33.0": ("semicolon", "2.33.0", "QNN_SDK_VERSION"),
    "2.45.0": ("semicolon", "2.45.0", "QNN_SDK_VERSION"),
}


@pytest.mark.parametrize("version", sorted(ERAS))
def test_each_era_reads_back_whole(tiny: dict[str, Path], tmp_path: Path,
                                   version: str) -> None:
    era, read_version, source = ERAS[version]
    cpp = run(tiny, tmp_path / "m.cpp", version, "--input_encoding", "ids", "other")
    rec = read_record(cpp)
    assert (rec.era, rec.sdk_version, rec.sdk_version_source) == (era, read_version, source)
    assert rec.value("act_bitwidth") == 16 and rec.problems == [] and rec.truncated is None
    if version == "2.45.0":                                    # no _N suffix from 2.45
        assert rec.sdk_version_full is not None and "_" not in rec.sdk_version_full
    model = read_cpp_model(cpp)
    assert model.problems == [] and model.truncated is None and model.untyped == []
    assert model.compose_function == "QnnModel_composeGraphs"
    net = read_net_json(tmp_path / "m_net.json")
    assert net.problems == []
    assert {t.name for t in net.tensors} <= {t.name for t in model.tensors}
    assert all(t.dims for t in net.tensors)
    assert read_record(tmp_path / "m_net.json").args == rec.args
    for path in (cpp, tmp_path / "m_net.json"):
        report = audit_fp16(path)
        assert (report.count, report.incomplete) == (0, None) and report.total_tensors > 0
    assert main(["namespace", str(cpp), "--model", str(tiny["model"])]) == 0


@pytest.mark.parametrize("version, full", [("2.22.0", "2.22.0."), ("2.18.0", "2.18.0.")])
def test_windows_tool_path_gives_version_and_tool_name(tiny: dict[str, Path], tmp_path: Path,
                                                       version: str, full: str,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    cpp = run(tiny, tmp_path / "m.cpp", version, tool_path_style="windows")
    rec = read_record(cpp)
    assert rec.tool == "qnn-onnx-converter"
    assert rec.tool_path is not None and rec.tool_path.endswith(
        "\\bin\\x86_64-windows-msvc\\qnn-onnx-converter")
    assert (rec.sdk_version, rec.sdk_version_source) == (version, "tool path")
    assert rec.sdk_version_full is not None and rec.sdk_version_full.startswith(full)
    assert main(["namespace", str(cpp)]) == 0
    out = capsys.readouterr().out
    assert f"SDK version: {version} ({rec.sdk_version_full}, from the tool path)" in out


def test_header_variants_of_modern_records(tiny: dict[str, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    cpp = run(tiny, tmp_path / "m.cpp", "2.40.0", "--preserve_io", "layout",
              "--model_version", "1.0", tool_name="qnn-pytorch-converter",
              extra_comment="Generated for the qnn-ci tests",
              record_values={"quantizer_log_level": "LogLevel.NONE", "float_bitwidth": "8",
                             "dry_run": "False", "debug": "None"})
    rec = read_record(cpp)
    assert (rec.tool, rec.era, rec.sdk_version) == ("qnn-pytorch-converter", "semicolon",
                                                    "2.40.0")
    assert rec.raw_value("quantizer_log_level") == "LogLevel.NONE"
    assert rec.value("preserve_io") == [["layout"]] and rec.value("model_version") == 1.0
    assert rec.value("dry_run") is False and rec.value("debug") is None
    assert [(c.canonical, c.values) for c in rec.conflicts] == [
        ("float_bitwidth", {"float_bitwidth": "8", "float_bw": "32"})]
    assert rec.problems == []
    model = read_cpp_model(cpp)
    assert model.truncated is None and model.problems == []
    assert main(["fp16", str(cpp), "--soc", "QCS6490"]) == 0
    capsys.readouterr()
    assert main(["namespace", str(cpp)]) == 0
    assert "warning: float_bitwidth: alias spellings disagree (float_bitwidth=8, " \
        "float_bw=32)" in capsys.readouterr().out


@pytest.mark.parametrize("version", ["2.18.0", "2.31.0"])
def test_model_prefix_follows_the_record(tiny: dict[str, Path], tmp_path: Path,
                                         version: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    cpp = run(tiny, tmp_path / "ElementwiseAdd.cpp", version, "--overwrite_model_prefix")
    text = cpp.read_text("utf-8")
    assert "ElementwiseAdd_composeGraphs" in text and "QnnModel_composeGraphs" not in text
    model = read_cpp_model(cpp)
    assert model.prefixed is True and model.truncated is None and model.problems == []
    assert model.compose_function == "ElementwiseAdd_composeGraphs"
    assert main(["fp16", str(cpp), "--soc", "QCS6490"]) == 0
    # the same source with the record edited to say False is not complete
    edited = tmp_path / "edited.cpp"
    edited.write_text(text.replace("overwrite_model_prefix=True", "overwrite_model_prefix=False"),
                      "utf-8")
    model = read_cpp_model(edited)
    assert model.truncated == ("no QnnModel_composeGraphs function; found "
                               "ElementwiseAdd_composeGraphs, but the record says "
                               "overwrite_model_prefix=False")
    capsys.readouterr()
    assert main(["fp16", str(edited), "--soc", "QCS6490"]) == 2
    assert "found ElementwiseAdd_composeGraphs" in capsys.readouterr().err


def test_namespace_model_check_fails_on_a_quantized_integer_input(
        tiny: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpp = run(tiny, tmp_path / "m.cpp", "2.31.0")               # neither flag: the trap
    assert main(["namespace", str(cpp), "--model", str(tiny["model"])]) == 1
    errors = [line for line in capsys.readouterr().out.splitlines()
              if line.startswith("error: ")]
    assert errors == [
        f"error: integer input ids (int64) is QNN_DATATYPE_UFIXED_POINT_16 in {name}, not an "
        f"integer type: the converter quantized it (the record shows neither flag; pass "
        f"--input_dtype ids int64 and --input_encoding ids other)"
        for name in ("m.cpp", "m_net.json")]
    # from the _net.json side too, and in JSON
    assert main(["namespace", str(tmp_path / "m_net.json"), "--model", str(tiny["model"]),
                 "--json"]) == 1
    import json

    shown = json.loads(capsys.readouterr().out)["integer_inputs"]
    assert [(q["input"], q["data_type"], Path(q["file"]).name) for q in shown] == [
        ("ids", "QNN_DATATYPE_UFIXED_POINT_16", "m_net.json"),
        ("ids", "QNN_DATATYPE_UFIXED_POINT_16", "m.cpp")]


@pytest.mark.parametrize("flags, kept", [
    (("--input_dtype", "ids", "int32"), "QNN_DATATYPE_INT_32"),
    (("--input_encoding", "ids", "other"), "QNN_DATATYPE_INT_32"),      # int64 -> INT_32
    (("--input_encoding", "ids", "other", "--keep_int64_inputs"), "QNN_DATATYPE_INT_64")])
def test_namespace_model_check_passes_when_kept(tiny: dict[str, Path], tmp_path: Path,
                                                flags: tuple[str, ...], kept: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cpp = run(tiny, tmp_path / "m.cpp", "2.31.0", *flags)
    assert {t.name: t.data_type for t in read_cpp_model(cpp).tensors}["ids"] == kept
    assert main(["namespace", str(cpp), "--model", str(tiny["model"])]) == 0
    assert "ok: the integer/bool inputs of tiny.onnx stayed integer" in \
        capsys.readouterr().out
