"""Stage adapters fp16_gate, contract and encodings, with hand-built contexts and
upstream results pointing at files written here (or the real converter outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import InputSpec, QuantizationSpec
from qnn_ci.errors import UserError
from qnn_ci.stages.contract import ContractStage
from qnn_ci.stages.encodings import EncodingsStage
from qnn_ci.stages.fp16_gate import Fp16GateStage
from tests.sdk_readback.conftest import (
    FP16_TENSORS,
    RECORD_218,
    RECORD_FP16,
    make_ctx,
    make_export,
    net_json_dict,
    net_tensor,
    passed,
    source_text,
)
from tests.sdk_readback.test_encodings import enc_061, enc_100, write

# -- fp16_gate ----------------------------------------------------------------


def _convert(tmp_path: Path, cpp_text: str | None, net: dict | None) -> dict[str, Path]:
    arts: dict[str, Path] = {}
    if cpp_text is not None:
        arts["cpp"] = tmp_path / "model.cpp"
        arts["cpp"].write_text(cpp_text, "utf-8")
    if net is not None:
        arts["net_json"] = tmp_path / "model_net.json"
        arts["net_json"].write_text(json.dumps(net), "utf-8")
    return arts


def _fp16_net() -> dict:
    return net_json_dict(RECORD_FP16, {"x": net_tensor(0, 0, 562, [1, 4]),
                                       "x_fp16": net_tensor(1, 3, 534, [1, 4]),
                                       "w": net_tensor(2, 4, 534, [1, 4])})


def test_fp16_gate_real_231_passes_on_qcs6490(tmp_path: Path, cpp_231: Path) -> None:
    export = make_export(tmp_path, tmp_path / "m.onnx", soc="QCS6490")
    ctx = make_ctx(tmp_path, export, "fp16_gate",
                   {"convert": passed("convert", {"cpp": cpp_231})})
    res = Fp16GateStage().run(ctx)
    assert res.status == Status.PASSED
    assert res.properties == {"fp16_tensors": 0, "soc": "QCS6490", "htp_arch": "v68"}
    assert res.summary == "0 FP16 tensor(s) of 73 (QCS6490, HTP v68)"
    assert [f.check for f in res.findings] == ["fp16.missing", "fp16.count"]  # no net_json
    report = json.loads(Path(res.artefacts["report"]).read_text("utf-8"))
    assert report["files"][0]["total_tensors"] == 73


def test_fp16_gate_fails_once_per_tensor_on_v68(tmp_path: Path) -> None:
    arts = _convert(tmp_path, source_text(RECORD_FP16, tensors=FP16_TENSORS), _fp16_net())
    export = make_export(tmp_path, tmp_path / "m.onnx", soc="QCS6490")
    res = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate",
                                       {"convert": passed("convert", arts)}))
    assert res.status == Status.FAILED
    errors = res.errors()
    assert [(f.check, f.subject) for f in errors] == [("fp16.tensor", "x_fp16"),
                                                      ("fp16.tensor", "w")]
    assert res.properties["fp16_tensors"] == 2
    assert res.summary.startswith("2 FP16 tensor(s) of 4: QCS6490 (HTP v68) has no FP16")
    assert "exit 134" in res.failure_text()


def test_fp16_gate_fp16_soc_and_no_soc(tmp_path: Path) -> None:
    arts = _convert(tmp_path, source_text(RECORD_FP16, tensors=FP16_TENSORS), _fp16_net())
    up = {"convert": passed("convert", arts)}
    res = Fp16GateStage().run(make_ctx(tmp_path, make_export(tmp_path, tmp_path / "m.onnx",
                                                             soc="SM8750"), "fp16_gate", up))
    assert res.status == Status.PASSED and res.properties["htp_arch"] == "v79"
    assert res.properties["fp16_tensors"] == 2
    res2 = Fp16GateStage().run(make_ctx(tmp_path, make_export(tmp_path, tmp_path / "m.onnx",
                                                              soc=None), "fp16_gate", up))
    assert res2.status == Status.PASSED
    assert [f.check for f in res2.findings] == ["fp16.no_soc"]


def test_fp16_gate_without_readable_output_fails(tmp_path: Path) -> None:
    export = make_export(tmp_path, tmp_path / "m.onnx")
    res = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate",
                                       {"convert": passed("convert", {})}))
    assert res.status == Status.FAILED and res.errors()[0].check == "fp16.unreadable"


def test_fp16_gate_unknown_soc_is_a_user_error(tmp_path: Path, cpp_231: Path) -> None:
    export = make_export(tmp_path, tmp_path / "m.onnx", soc="QCS9999")
    with pytest.raises(UserError) as err:
        Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate",
                                     {"convert": passed("convert", {"cpp": cpp_231})}))
    assert f"{export.manifest}:2: target.soc: unknown SoC 'QCS9999'" in err.value.oneline()


def test_fp16_gate_fails_on_a_truncated_source(tmp_path: Path, cpp_231: Path) -> None:
    text = cpp_231.read_text("utf-8")
    cut = tmp_path / "model.cpp"
    cut.write_text(text[: len(text) // 2], "utf-8")
    for soc in ("QCS6490", None):          # gated or not, a cut file cannot pass
        export = make_export(tmp_path, tmp_path / "m.onnx", soc=soc)
        res = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate",
                                           {"convert": passed("convert", {"cpp": cut})}))
        assert res.status == Status.FAILED
        assert [f.check for f in res.errors()] == ["fp16.incomplete"]
        assert res.summary.startswith("model.cpp: no QnnModel_composeGraphs function")
        assert "truncated or edited" in res.summary and "audit is incomplete" in res.summary


def test_fp16_gate_fails_on_a_cut_net_json(tmp_path: Path, cpp_231: Path) -> None:
    net = tmp_path / "model_net.json"
    net.write_text(json.dumps(_fp16_net())[:200], "utf-8")
    export = make_export(tmp_path, tmp_path / "m.onnx", soc="SM8550")
    res = Fp16GateStage().run(make_ctx(tmp_path, export, "fp16_gate", {
        "convert": passed("convert", {"cpp": cpp_231, "net_json": net})}))
    assert res.status == Status.FAILED
    [err] = res.errors()
    assert err.check == "fp16.incomplete" and "not valid JSON" in err.message


# -- contract -----------------------------------------------------------------


@pytest.fixture
def two_input_model(tmp_path: Path) -> Path:
    """A float input `x` and an int64 token input `ids`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(
        [helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "idf"], ["y"])], "g", [x, ids], [y])
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _record(**over: str) -> str:
    args = {"act_bitwidth": "16", "bias_bitwidth": "32", "float_bitwidth": "32",
            "float_bw": "32", "float_fallback": "False", "input_encoding": "[['ids', 'other']]",
            "input_list": "/calib/input_list.txt", "quantization_overrides": "",
            "use_per_channel_quantization": "False", "weights_bitwidth": "8"}
    args.update(over)
    return "qnn-onnx-converter; " + "; ".join(f"{k}={v}" for k, v in sorted(args.items()))


def _contract(tmp_path: Path, export, record: str, input_list: Path | None,
              *, where: str = "cpp"):
    arts = _convert(tmp_path, source_text(record, version="qaisw-v2.31.0.250130151446_114721")
                    if where == "cpp" else None,
                    net_json_dict(record, {}) if where == "net_json" else None)
    calib = passed("calibration", {"input_list": input_list} if input_list else {})
    ctx = make_ctx(tmp_path, export, "contract",
                   {"convert": passed("convert", arts), "calibration": calib})
    return ContractStage().run(ctx)


def test_contract_passes_when_everything_took_effect(tmp_path: Path,
                                                     two_input_model: Path) -> None:
    calib = tmp_path / "calib" / "input_list.txt"
    calib.parent.mkdir()
    calib.write_text("x:=/a.raw ids:=/b.raw\n", "utf-8")
    enc = write(tmp_path, enc_061(["x"], []))
    export = make_export(tmp_path, two_input_model,
                         quantization=QuantizationSpec(overrides=enc))
    res = _contract(tmp_path, export, _record(input_list=str(calib),
                                              quantization_overrides=str(enc)), calib)
    assert res.status == Status.PASSED, res.failure_text()
    assert res.properties["act_bitwidth"] == "16" and res.properties["sdk_version"] == "2.31.0"
    assert res.properties["input_encoding"] == "[['ids', 'other']]"
    assert Path(res.artefacts["report"]).is_file()


def test_contract_relative_recorded_path_resolves_beside_the_source(
        tmp_path: Path, two_input_model: Path) -> None:
    calib = tmp_path / "input_list.txt"
    calib.write_text("\n", "utf-8")
    export = make_export(tmp_path, two_input_model)
    res = _contract(tmp_path, export, _record(input_list="./input_list.txt"), calib)
    assert res.status == Status.PASSED, res.failure_text()
    # ... and the comparison really happened: a different list beside the source fails.
    other = tmp_path / "other" / "input_list.txt"
    other.parent.mkdir()
    other.write_text("\n", "utf-8")
    res = _contract(tmp_path, export, _record(input_list="./input_list.txt"), other)
    assert res.status == Status.FAILED
    assert any(f.message.startswith("input_list: asked ") for f in res.errors())


def test_contract_reports_each_setting_that_did_not_take_effect(
        tmp_path: Path, two_input_model: Path) -> None:
    calib = tmp_path / "input_list.txt"
    calib.write_text("\n", "utf-8")
    enc = write(tmp_path, enc_061(["x"], []))
    export = make_export(tmp_path, two_input_model, quantization=QuantizationSpec(
        overrides=enc, per_channel=True, float_bitwidth=32, act_calibration="mse"))
    record = _record(act_bitwidth="8", input_list="None", input_encoding="[]",
                     use_per_channel_quantization="False",
                     act_quantizer_calibration="min-max")
    res = _contract(tmp_path, export, record, calib)
    assert res.status == Status.FAILED
    msgs = {f.check: f.message for f in res.errors()}
    assert msgs["contract.act_bitwidth"] == "act_bitwidth: asked 16, converter recorded 8"
    assert msgs["contract.input_list"] == (
        f"input_list: asked {calib}, converter recorded None "
        f"(no calibration: the converter skipped quantization)")
    assert msgs["contract.quantization_overrides"] == (
        f"quantization_overrides: asked {enc}, converter recorded (empty) "
        f"(the AIMET encodings were not applied)")
    assert msgs["contract.input_encoding"] == (
        "input_encoding: asked ['ids', 'other'], converter recorded []")
    assert msgs["contract.use_per_channel_quantization"].endswith("asked True, converter "
                                                                  "recorded False")
    assert msgs["contract.act_quantizer_calibration"] == (
        "act_quantizer_calibration: asked mse, converter recorded min-max")
    assert len(res.errors()) == 6
    assert res.summary.startswith("6 setting(s) did not take effect")


def test_contract_manifest_encodings_and_other_paths(tmp_path: Path,
                                                     two_input_model: Path) -> None:
    calib = tmp_path / "input_list.txt"
    calib.write_text("\n", "utf-8")
    other_list = tmp_path / "other_list.txt"
    export = make_export(tmp_path, two_input_model,
                         inputs={"x": InputSpec("x", encoding="bgr"),
                                 "ids": InputSpec("ids", dtype="int64")})
    res = _contract(tmp_path, export, _record(
        input_list=str(other_list), quantization_overrides="/some/file.encodings",
        input_encoding="[['ids', 'other'], ['x', 'rgb']]"), calib)
    msgs = {f.check: f.message for f in res.errors()}
    assert msgs["contract.input_list"].endswith(f"converter recorded {other_list}")
    assert msgs["contract.quantization_overrides"] == (
        "quantization_overrides: asked none, converter recorded /some/file.encodings")
    assert msgs["contract.input_encoding"] == (
        "input_encoding: asked ['x', 'bgr'], converter recorded [['ids', 'other'], "
        "['x', 'rgb']] (x recorded as 'rgb')")


def test_contract_space_era_from_net_json_warns_on_conflicts(tmp_path: Path) -> None:
    export = make_export(tmp_path, tmp_path / "absent.onnx", quantization=QuantizationSpec(
        act_bitwidth=8, weights_bitwidth=8, bias_bitwidth=32, per_channel=True))
    calib = Path("/data/calib run/input_list.txt")
    res = _contract(tmp_path, export, RECORD_218, calib, where="net_json")
    assert res.status == Status.PASSED, res.failure_text()
    warnings = [f for f in res.findings if f.severity == Severity.WARNING]
    assert [f.check for f in warnings] == ["contract.alias_conflict"]
    assert "float_bias_bw=32" in warnings[0].message


def test_contract_on_the_real_227_record(tmp_path: Path, head_227: Path) -> None:
    """The real 2.27 passthrough was converted float (no input_list), W8 bias 8: a W8A16
    manifest with calibration must see every difference named."""
    export = make_export(tmp_path, tmp_path / "absent.onnx")
    calib = tmp_path / "input_list.txt"
    ctx = make_ctx(tmp_path, export, "contract", {
        "convert": passed("convert", {"cpp": head_227}),
        "calibration": passed("calibration", {"input_list": calib})})
    res = ContractStage().run(ctx)
    assert res.status == Status.FAILED
    assert [f.check for f in res.errors()] == [
        "contract.act_bitwidth", "contract.bias_bitwidth", "contract.input_list"]
    assert res.properties["sdk_version"] == "2.27.0"


def test_contract_fails_on_a_record_cut_before_weights_bitwidth(
        tmp_path: Path, two_input_model: Path) -> None:
    calib = tmp_path / "input_list.txt"
    calib.write_text("\n", "utf-8")
    export = make_export(tmp_path, two_input_model)
    text = source_text(_record(input_list=str(calib)), version=None)
    cpp = tmp_path / "model.cpp"
    cpp.write_text(text[: text.index("; weights_bitwidth")], "utf-8")
    res = ContractStage().run(make_ctx(tmp_path, export, "contract", {
        "convert": passed("convert", {"cpp": cpp}),
        "calibration": passed("calibration", {"input_list": calib})}))
    assert res.status == Status.FAILED
    [err] = res.errors()
    assert err.check == "contract.truncated"
    assert err.message == (
        "model.cpp: the 'Command Line used:' comment is not closed: the file is truncated "
        "or edited, so the contract check is incomplete (not checked: weights_bitwidth); "
        "re-run the conversion")
    assert res.summary == err.message
    # what the cut record still holds is checked
    assert not any(f.check == "contract.unrecorded" for f in res.findings)


def test_contract_without_record_fails(tmp_path: Path) -> None:
    export = make_export(tmp_path, tmp_path / "absent.onnx")
    cpp = tmp_path / "x.cpp"
    cpp.write_text("int x;\n", "utf-8")
    ctx = make_ctx(tmp_path, export, "contract", {
        "convert": passed("convert", {"cpp": cpp}), "calibration": passed("calibration", {})})
    res = ContractStage().run(ctx)
    assert res.status == Status.FAILED and res.errors()[0].check == "contract.no_record"
    assert "no recorded argument list" in res.summary


# -- encodings ----------------------------------------------------------------


def _enc_stage(tmp_path: Path, cls_model: Path, data: dict, **q) -> tuple:
    path = write(tmp_path, data)
    export = make_export(tmp_path, cls_model,
                         quantization=QuantizationSpec(overrides=path, **q))
    ctx = make_ctx(tmp_path, export, "encodings",
                   {"static_shapes": passed("static_shapes", {"model": cls_model})})
    return EncodingsStage(), ctx, path


def _cls_names(cls_model: Path) -> tuple[list[str], list[str]]:
    m = onnx.load(str(cls_model))
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    return [n.output[0] for n in convs], [n.input[1] for n in convs]


def test_encodings_stage_applies_only_with_overrides(tmp_path: Path) -> None:
    assert not EncodingsStage().applies(make_export(tmp_path, tmp_path / "m.onnx"))
    export = make_export(tmp_path, tmp_path / "m.onnx",
                         quantization=QuantizationSpec(overrides=tmp_path / "m.encodings"))
    assert EncodingsStage().applies(export)


def test_encodings_stage_passes_and_warns_uncovered(tmp_path: Path, cls_model: Path) -> None:
    outs, weights = _cls_names(cls_model)
    stage, ctx, _ = _enc_stage(tmp_path, cls_model, enc_100(["x", *outs], weights))
    res = stage.run(ctx)
    assert res.status == Status.PASSED, res.failure_text()
    assert res.properties["encodings_version"] == "1.0.0"
    assert res.properties["encodings_bitwidths"] == "8,16"
    assert res.properties["encodings_known"] == 1 + len(outs) + len(weights)
    assert res.properties["encodings_unknown"] == 0
    assert res.properties["activations_covered"] == 1 + len(outs)
    assert res.properties["activations_uncovered"] > 0
    uncovered = [f for f in res.findings if f.check == "encodings.uncovered"]
    assert len(uncovered) == 2 and all(f.severity == Severity.WARNING for f in uncovered)
    assert "--input_list" in uncovered[0].message
    assert Path(res.artefacts["report"]).is_file()


def test_encodings_stage_file_for_another_model(tmp_path: Path, cls_model: Path) -> None:
    stage, ctx, path = _enc_stage(tmp_path, cls_model,
                                  enc_061(["input.1", "73"], ["conv0.weight"]))
    res = stage.run(ctx)
    assert res.status == Status.FAILED
    assert res.errors()[0].check == "encodings.model_mismatch"
    assert res.summary.startswith(f"none of the 3 tensor names in {path.name} exist in "
                                  f"{cls_model.name}: the encodings file is for a different model")


def test_encodings_stage_some_unknown_and_bitwidths(tmp_path: Path, cls_model: Path) -> None:
    outs, weights = _cls_names(cls_model)
    stage, ctx, _ = _enc_stage(tmp_path, cls_model,
                               enc_061(["x", outs[0], "ghost"], weights[:1], act_bw=8))
    res = stage.run(ctx)
    checks = [f.check for f in res.errors()]
    assert checks == ["encodings.unknown", "encodings.bitwidth", "encodings.bitwidth"]
    assert "ghost" in res.errors()[0].message
    assert res.errors()[1].message == "activation x: encodings bitwidth 8, export asks 16"
    # the same file is fine for a W8A8 export
    stage2, ctx2, _ = _enc_stage(tmp_path, cls_model,
                                 enc_061(["x", outs[0]], weights[:1], act_bw=8),
                                 act_bitwidth=8)
    assert stage2.run(ctx2).status == Status.PASSED


def test_encodings_stage_malformed_and_fingerprint(tmp_path: Path, cls_model: Path) -> None:
    data = enc_100(["x"], [])
    data["activation_encodings"][0]["bw"] = "16"
    stage, ctx, path = _enc_stage(tmp_path, cls_model, data)
    with pytest.raises(UserError, match=r"activation_encodings\[0\].bw: expected an integer"):
        stage.run(ctx)
    before = stage.fingerprint(ctx)
    path.write_text(json.dumps(enc_100(["x"], [])), "utf-8")
    assert stage.fingerprint(ctx) != before
