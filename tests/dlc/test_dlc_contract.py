"""``dlc_contract``'s checks on literal dumps: what the quantizer and the converter
RECORDED and what the DLC's tensors ARE, against the manifest; each mismatch one line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from qnn_ci.engine.results import Severity
from qnn_ci.engine.spec import ExportSpec, InputSpec, QuantizationSpec
from qnn_ci.sdk.dlc_info import parse_dlc_info
from qnn_ci.stages.dlc_contract import outcome_findings, record_findings
from tests.dlc.test_dlc_info import SNPE

QUANT = "Quantizer command: qairt-quantizer act_bitwidth=16 bias_bitwidth=32 " \
        "input_list=/work/cal/input_list.txt use_per_channel_quantization=True weights_bitwidth=8"


def _export(**changes: object) -> ExportSpec:
    export = ExportSpec(name="cnn", model=Path("/work/cnn.onnx"),
                        manifest=Path("/work/qnn-ci.yaml"), line=1,
                        inputs={"x": InputSpec("x", (1, 3, 16, 16), "float32")},
                        quantization=QuantizationSpec(per_channel=True))
    return replace(export, **changes)  # type: ignore[arg-type]


def _errors(found: list) -> list[str]:
    return [f.message for f in found if f.severity == Severity.ERROR]


def test_a_dump_that_matches_the_manifest_has_no_error() -> None:
    info = parse_dlc_info(SNPE)
    found = record_findings(info, _export(), Path("/work/cal/input_list.txt"), Path("/work"))
    found += outcome_findings(info, _export(), {}, set())
    assert _errors(found) == []


def test_what_the_tools_recorded_is_compared_with_what_was_asked(tmp_path: Path) -> None:
    enc = tmp_path / "cnn.encodings"
    enc.write_text("{}")
    text = SNPE.replace(QUANT, QUANT.replace("act_bitwidth=16", "act_bitwidth=8")
                        .replace("/work/cal/input_list.txt", "/elsewhere/list.txt"))
    export = _export(quantization=QuantizationSpec(per_channel=True, overrides=enc),
                     inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")})
    found = record_findings(parse_dlc_info(text), export, Path("/work/cal/input_list.txt"),
                            Path("/work"))
    assert _errors(found) == [
        "act_bitwidth: asked 16, qairt-quantizer recorded 8",
        "input_list: asked /work/cal/input_list.txt, qairt-quantizer recorded "
        "/elsewhere/list.txt",
        f"quantization_overrides: asked {enc}, qairt-converter recorded (empty) (the AIMET "
        "encodings were not applied)",
        "input_dim: asked x 1,3,8,8, qairt-converter recorded 1,3,16,16"]
    assert all("\n" not in m for m in _errors(found))
    missing = record_findings(parse_dlc_info(SNPE.replace(QUANT, "Quantizer command: N/A")),
                              _export(), None, Path("/work"))
    assert _errors(missing)[0].startswith("qairt-dlc-info prints no Quantizer command")


def test_the_tensors_say_what_took_effect() -> None:
    # the integer input quantized, 8-bit activations, a float tensor left, no per-axis
    text = (SNPE.replace("x (data type: uFxp_16", "x (data type: uFxp_16")
            .replace("/c1/Conv_output_0 (data type: uFxp_16", "/c1/Conv_output_0 (data type: "
                     "uFxp_8").replace("y (data type: uFxp_16", "y (data type: Float_32")
            .replace(" for channel_0:", ":").replace("axis-quant: axis: 3, ", ""))
    info = parse_dlc_info(text)
    export = _export(inputs={"x": InputSpec("x", (1, 3, 16, 16), "int32")})
    found = outcome_findings(info, export, {"x": "int32"}, {"x"})
    errors = _errors(found)
    assert errors[0] == ("integer input x (int32) is uFxp_16 in the DLC: the quantizer "
                         "treated it as a real-valued signal (--preserve_io_datatype was "
                         "passed); the app's integers would be read on a calibrated scale")
    assert errors[1].startswith("act_bitwidth: asked 16, 1 activation(s) are not: "
                                "/c1/Conv_output_0 (uFxp_8)")
    assert errors[2].startswith("1 tensor(s) stayed float without float_fallback: y "
                                "(Float_32)")
    assert errors[3] == ("per_channel: asked true, but no static tensor of the DLC has a "
                         "per-axis encoding")
    # with AIMET encodings, other bit widths may be on purpose: warnings
    relaxed = outcome_findings(info, replace(export, quantization=QuantizationSpec(
        overrides=Path("/work/a.encodings"))), {}, set())
    assert not [f for f in relaxed if f.check == "contract.act_bitwidth"
                and f.severity == Severity.ERROR]


def test_command_line_records_are_checked_too() -> None:
    from tests.dlc.test_dlc_info import COLUMN

    info = parse_dlc_info(COLUMN)
    export = _export(quantization=QuantizationSpec(act_bitwidth=8, bias_bitwidth=8,
                                                   float_fallback=True, float_bitwidth=16))
    found = record_findings(info, export, Path("/work/list.txt"), Path("/work"))
    assert _errors(found) == ["input_dim: asked x 1,3,16,16, qairt-converter recorded 1,3,8,8"]
    assert not [f for f in found if f.check == "contract.unrecorded"]
