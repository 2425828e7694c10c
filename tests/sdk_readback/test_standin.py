"""End to end with the stand-in SDK (fixtures/qairt_standin): its converter writes
a tiny graph's source, _net.json and record; our parsers and stages read them.

The graph: Conv -> Relu -> Softmax on a float input `x`, plus an int64 token
input `ids` passed through. Softmax is one of the ops the stand-in leaves in float
under --float_fallback, so FLOAT_16 appears only with --float_bitwidth 16.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fixtures.qairt_standin as standin
from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import QuantizationSpec
from qnn_ci.sdk.cpp_model import read_cpp_model
from qnn_ci.sdk.fp16_audit import audit_fp16
from qnn_ci.sdk.net_json import read_net_json
from qnn_ci.sdk.record import read_record
from qnn_ci.stages.contract import ContractStage
from qnn_ci.stages.encodings import EncodingsStage
from qnn_ci.stages.fp16_gate import Fp16GateStage
from tests.sdk_readback.conftest import make_ctx, make_export, passed

CONVERTER = "bin/x86_64-linux-clang/qnn-onnx-converter"


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("standin")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    z = helper.make_tensor_value_info("z", TensorProto.INT64, [1, 4])
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "conv.bias")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["/conv/Conv_output_0"],
                          pads=[1, 1, 1, 1], name="/conv/Conv"),
         helper.make_node("Relu", ["/conv/Conv_output_0"], ["/relu/Relu_output_0"],
                          name="/relu/Relu"),
         helper.make_node("Softmax", ["/relu/Relu_output_0"], ["y"], axis=1, name="/sm"),
         helper.make_node("Identity", ["ids"], ["z"], name="/id")],
        "tiny", [x, ids], [y, z], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx_path = root / "tiny.onnx"
    onnx.save(model, str(onnx_path))
    rng = np.random.default_rng(1)
    lines = []
    for i in range(2):
        xp, ip = root / f"x{i}.raw", root / f"ids{i}.raw"
        rng.random((1, 3, 8, 8), dtype=np.float32).tofile(xp)
        np.arange(4, dtype=np.int64).reshape(1, 4).tofile(ip)
        lines.append(f"x:={xp} ids:={ip}")
    input_list = root / "input_list.txt"
    input_list.write_text("\n".join(lines) + "\n", "utf-8")
    encodings = root / "tiny.encodings"
    encodings.write_text(json.dumps({
        "version": "1.0.0",
        "activation_encodings": [{"name": "x", "dtype": "INT", "enc_type": "PER_TENSOR",
                                  "bw": 16, "is_sym": False, "scale": [1.5259e-05],
                                  "offset": [0]}],
        "param_encodings": [{"name": "conv.weight", "dtype": "INT", "enc_type": "PER_TENSOR",
                             "bw": 8, "is_sym": True, "scale": [0.02], "offset": [-128]}]}),
        "utf-8")
    return {"root": root, "model": onnx_path, "input_list": input_list,
            "encodings": encodings,
            "sdk231": standin.make_sdk(root / "sdk231", "2.31.0"),
            "sdk218": standin.make_sdk(root / "sdk218", "2.18.0"),
            "sdk218w": standin.make_sdk(root / "sdk218w", "2.18.0", tool_path_style="windows")}


def convert(material: dict[str, Path], sdk: str, out: Path, *flags: str) -> dict[str, Path]:
    argv = [str(material[sdk] / CONVERTER), "--input_network", str(material["model"]),
            "-d", "x", "1,3,8,8", "-d", "ids", "1,4", "-o", str(out), *flags]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    stem = out.with_suffix("") if out.suffix == ".cpp" else out
    arts = {"cpp": out, "net_json": Path(f"{stem}_net.json")}
    assert all(p.is_file() for p in arts.values())
    return arts


def _w8a16(material: dict[str, Path]) -> tuple[str, ...]:
    return ("--input_list", str(material["input_list"]), "--act_bitwidth", "16",
            "--weights_bitwidth", "8", "--bias_bitwidth", "32", "--input_encoding", "ids",
            "other")


def test_new_era_w8a16_reads_back_and_passes_contract_and_gate(
        material: dict[str, Path], tmp_path: Path) -> None:
    arts = convert(material, "sdk231", tmp_path / "out" / "model.cpp", *_w8a16(material))
    rec = read_record(arts["cpp"])
    assert rec.era == "semicolon" and rec.sdk_version == "2.31.0"
    assert (rec.value("act_bw"), rec.value("weights_bitwidth"), rec.value("bias_bitwidth")) \
        == (16, 8, 32)
    assert rec.value("input_encoding") == [["ids", "other"]]
    assert read_record(arts["net_json"]).args == rec.args
    m = read_cpp_model(arts["cpp"])
    assert m.problems == []
    dtypes = {t.name: t.data_type for t in m.tensors}
    assert dtypes["x"] == "QNN_DATATYPE_UFIXED_POINT_16"
    assert dtypes["ids"].startswith("QNN_DATATYPE_INT_")       # kept unquantized
    assert dtypes["conv_bias"] == "QNN_DATATYPE_SFIXED_POINT_32"
    assert "_conv_Conv_output_0" in dtypes                     # sanitised names
    net = read_net_json(arts["net_json"])
    assert {t.name for t in net.tensors} <= set(dtypes)

    export = make_export(tmp_path, material["model"], soc="QCS6490")
    up = {"convert": passed("convert", arts),
          "calibration": passed("calibration", {"input_list": material["input_list"]})}
    res = ContractStage().run(make_ctx(tmp_path, export, "contract", up))
    assert res.status == Status.PASSED, res.failure_text()
    gate = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate", up))
    assert gate.status == Status.PASSED and gate.properties["fp16_tensors"] == 0


def test_float_fallback_to_fp16_fails_the_gate_on_v68(material: dict[str, Path],
                                                      tmp_path: Path) -> None:
    arts = convert(material, "sdk231", tmp_path / "fb" / "model.cpp", *_w8a16(material),
                   "--float_fallback", "--float_bitwidth", "16")
    cpp, net = audit_fp16(arts["cpp"]), audit_fp16(arts["net_json"])
    assert cpp.count > 0 and set(net.tensors) == set(cpp.tensors) & set(net.tensors)
    assert "y" in cpp.tensors                                   # the Softmax output
    up = {"convert": passed("convert", arts)}
    res = Fp16GateStage().run(make_ctx(tmp_path, make_export(
        tmp_path, material["model"], soc="QCS6490"), "fp16_gate", up))
    assert res.status == Status.FAILED
    assert {f.subject for f in res.errors()} == set(cpp.tensors) | set(net.tensors)
    ok = Fp16GateStage().run(make_ctx(tmp_path, make_export(
        tmp_path, material["model"], soc="SM8550"), "fp16_gate", up))
    assert ok.status == Status.PASSED
    # the default manifest did not ask for float fallback: the contract says so
    contract = ContractStage().run(make_ctx(tmp_path, make_export(
        tmp_path, material["model"]), "contract",
        up | {"calibration": passed("calibration", {"input_list": material["input_list"]})}))
    assert {f.check for f in contract.errors()} == {"contract.float_fallback"}


def test_old_era_short_flags_and_the_int64_trap(material: dict[str, Path],
                                                tmp_path: Path) -> None:
    out = tmp_path / "old" / "model"                            # -o without .cpp
    arts = convert(material, "sdk218w", out, "--input_list", str(material["input_list"]),
                   "--act_bw", "16", "--weight_bw", "8", "--bias_bw", "32")
    rec = read_record(out)
    # no QNN_SDK_VERSION up to 2.22: the version comes from the Windows tool path
    assert rec.era == "space" and rec.sdk_version == "2.18.0"
    assert rec.sdk_version_source == "tool path" and rec.tool == "qnn-onnx-converter"
    assert rec.tool_path is not None and rec.tool_path.startswith("C:\\Qualcomm\\AIStack")
    assert rec.spellings("act_bitwidth") == ["act_bitwidth", "act_bw"]
    assert rec.value("act_bitwidth") == 16
    assert [c.canonical for c in rec.conflicts] == ["float_bias_bitwidth"]   # stand-in default
    export = make_export(tmp_path, material["model"])
    res = ContractStage().run(make_ctx(tmp_path, export, "contract", {
        "convert": passed("convert", arts),
        "calibration": passed("calibration", {"input_list": material["input_list"]})}))
    assert res.status == Status.FAILED
    unkept = ("integer input ids (int64) is QNN_DATATYPE_UFIXED_POINT_16 in {}, not an "
              "integer type: the converter quantized it (the record shows neither flag; "
              "pass --input_dtype ids int64 and --input_encoding ids other)")
    assert [f.message for f in res.errors()] == [
        "input_encoding: asked ['ids', 'other'], converter recorded []",
        unkept.format("model"), unkept.format("model_net.json")]
    assert [f.check for f in res.findings if f.severity == Severity.WARNING] == \
        ["contract.alias_conflict"] * len(rec.conflicts)


def test_overrides_recorded_and_encodings_checked(material: dict[str, Path],
                                                  tmp_path: Path) -> None:
    arts = convert(material, "sdk231", tmp_path / "ov" / "model.cpp", *_w8a16(material),
                   "--quantization_overrides", str(material["encodings"]))
    export = make_export(tmp_path, material["model"],
                         quantization=QuantizationSpec(overrides=material["encodings"]))
    up = {"convert": passed("convert", arts),
          "calibration": passed("calibration", {"input_list": material["input_list"]})}
    res = ContractStage().run(make_ctx(tmp_path, export, "contract", up))
    assert res.status == Status.PASSED, res.failure_text()
    assert res.properties["quantization_overrides"] == str(material["encodings"])
    enc = EncodingsStage().run(make_ctx(tmp_path, export, "encodings", {
        "static_shapes": passed("static_shapes", {"model": material["model"]})}))
    assert enc.status == Status.PASSED, enc.failure_text()
    assert enc.properties["encodings_known"] == 2
    assert enc.properties["activations_uncovered"] == 2        # relu, softmax outputs
    assert enc.properties["derived_by_converter"] == 2         # conv output, conv.bias
    report = json.loads(Path(enc.artefacts["report"]).read_text("utf-8"))
    assert report["coverage"]["uncovered_activations"] == ["/relu/Relu_output_0", "y"]
    assert report["coverage"]["uncovered_params"] == []
    assert report["coverage"]["derived_tensors"] == {"/conv/Conv_output_0": "fused",
                                                     "conv.bias": "bias"}
    assert [f.message for f in enc.findings if f.check == "encodings.derived"] == [
        "2 tensor(s) without encodings in tiny.encodings need none: 1 outputs fused away "
        "(Relu squashed, bias Add or BatchNorm folded, constants folded), 1 biases "
        "(quantized from the input and weight scales)"]


@pytest.mark.parametrize("sdk, flags", [
    ("sdk231", ("--act_bitwidth", "16", "--weights_bitwidth", "8", "--bias_bitwidth", "32")),
    ("sdk218", ("--act_bw", "16", "--weight_bw", "8", "--bias_bw", "32"))])
def test_standin_output_cut_in_half_fails_gate_and_contract(
        material: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        sdk: str, flags: tuple[str, ...]) -> None:
    from qnn_ci.cli import main

    arts = convert(material, sdk, tmp_path / "out" / "model.cpp", "--input_list",
                   str(material["input_list"]), *flags, "--input_encoding", "ids", "other")
    text = arts["cpp"].read_text("utf-8")
    calib = passed("calibration", {"input_list": material["input_list"]})
    export = make_export(tmp_path, material["model"], soc="QCS6490")
    whole = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate",
                                         {"convert": passed("convert", arts)}))
    assert whole.status == Status.PASSED, whole.failure_text()

    half = tmp_path / "half" / "model.cpp"
    half.parent.mkdir()
    half.write_text(text[: len(text) // 2], "utf-8")
    cut = {"cpp": half, "net_json": arts["net_json"]}
    gate = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate",
                                        {"convert": passed("convert", cut)}))
    assert gate.status == Status.FAILED
    assert [f.check for f in gate.errors()] == ["fp16.incomplete"]
    assert main(["fp16", str(half), "--soc", "QCS6490"]) == 2
    assert "truncated or edited" in capsys.readouterr().err

    mid_record = tmp_path / "mid" / "model.cpp"
    mid_record.parent.mkdir()
    mid_record.write_text(text[: text.index("input_encoding=")], "utf-8")
    res = ContractStage().run(make_ctx(tmp_path, export, "contract", {
        "convert": passed("convert", {"cpp": mid_record}), "calibration": calib}))
    assert res.status == Status.FAILED
    assert [f.check for f in res.errors()] == ["contract.truncated"]
    assert "input_encoding" in res.errors()[0].message.split("not checked: ")[1]
    assert main(["namespace", str(mid_record)]) == 2
    assert "truncated or edited" in capsys.readouterr().err
