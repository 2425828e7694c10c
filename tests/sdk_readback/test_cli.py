"""`qnn-ci namespace`, `qnn-ci fp16`, `qnn-ci encodings`: exit codes and output."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from qnn_ci.cli import main
from tests.sdk_readback.conftest import FP16_TENSORS, RECORD_218, RECORD_FP16, source_text
from tests.sdk_readback.test_encodings import enc_061, enc_200, write


def test_namespace_human(head_227: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namespace", str(head_227)]) == 0
    out = capsys.readouterr().out
    assert "tool:        qnn-onnx-converter" in out
    assert "SDK version: 2.27.0 (qaisw-v2.27.0.240926142112_100894, from QNN_SDK_VERSION)" \
        in out
    assert "act_bitwidth = 8" in out and "input_list = None" in out
    assert "quantization_overrides = (empty)" in out and "float_bitwidth/float_bw = 32" in out


def test_namespace_expectations(head_227: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = ["--expect", "act_bw=8", "--expect", "float_fallback=false",
          "--expect", "weights_bitwidth=8.0", "--expect", "quantization_overrides="]
    assert main(["namespace", str(head_227), *ok]) == 0
    capsys.readouterr()
    assert main(["namespace", str(head_227), "--expect", "act_bitwidth=16",
                 "--expect", "input_list=/calib/list.txt", "--expect", "bias_bw=8"]) == 1
    out = capsys.readouterr().out
    assert "act_bitwidth: expected 16, recorded 8" in out
    assert "input_list: expected /calib/list.txt, recorded None" in out
    assert "ok: bias_bw = 8" in out
    assert main(["namespace", str(head_227), "--expect", "no_such_flag=1"]) == 1
    assert "no_such_flag: expected 1, recorded (not recorded)" in capsys.readouterr().out


def test_namespace_json_and_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "model.cpp"
    src.write_text(source_text(RECORD_218), "utf-8")
    assert main(["namespace", str(src), "--json", "--expect", "act_bw=8"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tool"] == "qnn-onnx-converter" and data["sdk_version"] == "2.18.0"
    assert data["args"]["weights_bitwidth"] == "8" and "weight_bw" not in data["args"]
    assert data["conflicts"] == [{"canonical": "float_bias_bitwidth",
                                  "values": {"float_bias_bitwidth": "0",
                                             "float_bias_bw": "32"}}]
    assert data["raw"] == RECORD_218 and data["expect"][0]["ok"] is True
    assert main(["namespace", str(src)]) == 0
    assert "warning: float_bias_bitwidth: alias spellings disagree" in capsys.readouterr().out


def test_namespace_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "m_net.json"
    bad.write_text("not json", "utf-8")
    assert main(["namespace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qnn-ci namespace: error: {bad}: not valid JSON")
    plain = tmp_path / "x.cpp"
    plain.write_text("int x;\n", "utf-8")
    assert main(["namespace", str(plain)]) == 2
    assert "no recorded argument list" in capsys.readouterr().err
    assert main(["namespace", str(tmp_path / "missing.cpp")]) == 2
    assert main(["namespace", str(plain), "--expect", "novalue"]) == 2
    assert "--expect: expected KEY=VALUE" in capsys.readouterr().err


def test_fp16_cli(tmp_path: Path, cpp_231: Path, fp16_net_json: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fp16", str(cpp_231), "--soc", "QCS6490"]) == 0
    out = capsys.readouterr().out
    assert "0 FP16 tensor(s) of 73" in out and out.rstrip().endswith("PASS")
    src = tmp_path / "model"
    src.write_text(source_text(RECORD_FP16, tensors=FP16_TENSORS), "utf-8")
    assert main(["fp16", str(src), str(fp16_net_json), "--soc", "qcm6490"]) == 1
    out = capsys.readouterr().out
    assert out.count("error: tensor x_fp16") == 2 and "exit 134" in out and "FAIL" in out
    assert main(["fp16", str(src), "--soc", "SM8650", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["htp_arch"] == "v75"
    assert data["files"][0]["fp16_tensors"] == ["x_fp16", "w"]


def test_fp16_cli_truncated_file_is_bad_input(tmp_path: Path, cpp_231: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    text = cpp_231.read_text("utf-8")
    cut = tmp_path / "cut.cpp"
    cut.write_text(text[: len(text) // 2], "utf-8")
    for soc in ("QCS6490", "SM8550"):
        assert main(["fp16", str(cut), "--soc", soc]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        [line] = captured.err.splitlines()
        assert line.startswith(f"qnn-ci fp16: error: {cut}: no QnnModel_composeGraphs function")
        assert "truncated or edited" in line and "audit would be incomplete" in line
    assert main(["fp16", str(cpp_231), str(cut), "--soc", "QCS6490", "--json"]) == 2


def test_fp16_cli_not_converter_output_is_bad_input(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# My model\n\nSee docs/*.md for the export /* notes.\n", "utf-8")
    other_json = tmp_path / "package.json"
    other_json.write_text('{"name": "x"}', "utf-8")
    for path in (readme, other_json):
        assert main(["fp16", str(path), "--soc", "SM8550"]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line == (f"qnn-ci fp16: error: {path}: no tensor definitions: not converter "
                        "output; pass the generated model source, its _net.json or a QNN "
                        "JSON graph")


def test_namespace_truncated_record_is_bad_input(tmp_path: Path, cpp_231: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    text = cpp_231.read_text("utf-8")
    cut = tmp_path / "cut.cpp"
    cut.write_text(text[: text.index("; weights_bitwidth=8")], "utf-8")
    for extra in ([], ["--json"], ["--expect", "act_bitwidth=8"]):
        assert main(["namespace", str(cut), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.splitlines() == [
            f"qnn-ci namespace: error: {cut}: the 'Command Line used:' comment is not closed: "
            "the file is truncated or edited, so the recorded argument list is incomplete; "
            "regenerate it with qnn-onnx-converter"]
    # cut after the record: the record itself is whole and is read
    half = tmp_path / "half.cpp"
    half.write_text(text[: len(text) // 2], "utf-8")
    assert main(["namespace", str(half), "--expect", "weights_bitwidth=8"]) == 0


def test_fp16_cli_bad_soc(cpp_231: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fp16", str(cpp_231), "--soc", "QCS649"]) == 2
    err = capsys.readouterr().err
    assert "--soc: unknown SoC 'QCS649' (did you mean QCS6490?)" in err


def test_encodings_cli(tmp_path: Path, cls_model: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    model = onnx.load(str(cls_model))
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    good = write(tmp_path, enc_061(["x", conv.output[0]], [conv.input[1]]), "good.encodings")
    assert main(["encodings", str(good), "--model", str(cls_model)]) == 0
    out = capsys.readouterr().out
    assert "AIMET encodings version 0.6.1" in out and "bitwidths:    8, 16" in out
    assert "known names:  3 of 3 (2 activations, 1 params)" in out
    assert "warning:" in out and "activation(s) not covered" in out

    other = write(tmp_path, enc_200(["input.1", "73"]), "other.encodings")
    assert main(["encodings", str(other), "--model", str(cls_model)]) == 1
    out = capsys.readouterr().out
    assert "none of the 2 names in the file exist in the model" in out

    assert main(["encodings", str(other), "--model", str(cls_model), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["coverage"]["unknown"] == ["73", "input.1"] and data["passed"] is False

    assert main(["encodings", str(other)]) == 0           # without a model: read only
    assert "entries:      2" in capsys.readouterr().out


def test_encodings_cli_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = enc_061(["x"], [])
    data["activation_encodings"]["x"][0]["bitwidth"] = "sixteen"
    bad = write(tmp_path, data)
    assert main(["encodings", str(bad)]) == 2
    assert "activation_encodings['x'][0].bitwidth: expected an integer" in \
        capsys.readouterr().err
