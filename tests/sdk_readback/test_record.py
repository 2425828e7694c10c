"""The recorded argument list: real 2.27/2.31 sources, 2.18-era samples, _net.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.errors import UserError
from qnn_ci.sdk.record import (
    canonical_key,
    literal,
    loose_literal,
    parse_record_text,
    read_record,
    same_value,
    short_version,
)
from tests.sdk_readback.conftest import RECORD_218, RECORD_FP16, net_json_dict, source_text


def test_real_227_head(head_227: Path) -> None:
    rec = read_record(head_227)
    assert rec.tool == "qnn-onnx-converter"
    assert rec.era == "semicolon"
    assert rec.sdk_version == "2.27.0"
    assert rec.sdk_version_full == "qaisw-v2.27.0.240926142112_100894"
    assert rec.value("act_bitwidth") == 8
    assert rec.value("act_bw") == 8                     # alias spelling resolves
    assert rec.value("input_list") is None              # printed as None
    assert rec.raw_value("quantization_overrides") == ""  # empty string prints as nothing
    assert rec.value("float_fallback") is False
    assert rec.value("out_names") == ["output"]
    assert rec.value("percentile_calibration_value") == 99.99
    assert rec.value("act_quantizer_calibration") == "min-max"
    # 2.27 carries both float_bitwidth and float_bw; they agree, so no conflict.
    assert rec.spellings("float_bw") == ["float_bitwidth", "float_bw"]
    assert "float_bw" not in rec.args and rec.args["float_bitwidth"] == "32"
    assert rec.conflicts == [] and rec.problems == []
    # input_network / output_path are left out of the record by the converter.
    assert not rec.has("input_network") and not rec.has("output_path")
    assert rec.raw.startswith("qnn-onnx-converter; act_bitwidth=8;")


def test_real_231_source(cpp_231: Path) -> None:
    rec = read_record(cpp_231)
    assert rec.sdk_version == "2.31.0"
    assert rec.value("bias_bitwidth") == 32
    assert rec.value("input_dim") == [["input.1", "1,4,512,512"]]
    assert rec.value("input_list").endswith("naf_block_sota_pc_input_list.txt")
    assert rec.value("out_names") == ["73"]
    assert len(rec.raw_args) == 96 and rec.conflicts == []


def test_space_era_218_alias_pairs_conflict_and_lists(tmp_path: Path) -> None:
    src = tmp_path / "model.cpp"
    src.write_text(source_text(RECORD_218), "utf-8")
    rec = read_record(src)
    assert rec.era == "space"
    assert rec.sdk_version == "2.18.0"
    assert rec.value("act_bitwidth") == 8 and rec.spellings("act_bitwidth") == [
        "act_bitwidth", "act_bw"]
    assert rec.value("weight_bw") == 8 and rec.value("bias_bw") == 32
    # values containing spaces stay whole
    assert rec.value("out_names") == ["a", "b"]
    assert rec.value("input_list") == "/data/calib run/input_list.txt"
    assert rec.value("input_encoding") == [["input_data", "other", "bgr"]]
    assert rec.value("input_dim") == [["input_data", "1,3,224,224"]]
    assert rec.raw_value("quantization_overrides") == ""
    assert rec.value("use_per_channel_quantization") is True
    # the disagreeing pair is reported, the canonical spelling's value is kept
    assert [c.canonical for c in rec.conflicts] == ["float_bias_bitwidth"]
    assert rec.conflicts[0].values == {"float_bias_bitwidth": "0", "float_bias_bw": "32"}
    assert "float_bias_bw=32" in rec.conflicts[0].message()
    assert rec.value("float_bias_bitwidth") == 0


def test_oldest_short_names_only() -> None:
    rec = parse_record_text("qnn-onnx-converter act_bw=16 weight_bw=8 bias_bw=32 "
                            "float_bw=32 input_list=/a/b.txt")
    assert rec.args == {"act_bitwidth": "16", "weights_bitwidth": "8", "bias_bitwidth": "32",
                        "float_bitwidth": "32", "input_list": "/a/b.txt"}
    assert rec.value("act_bitwidth") == 16


def test_source_without_cpp_extension_and_no_version(tmp_path: Path) -> None:
    src = tmp_path / "qnn_model_dynamic"          # -o without extension: no .cpp added
    src.write_text(source_text(RECORD_FP16, version=None), "utf-8")
    rec = read_record(src)
    assert rec.era == "semicolon"
    assert rec.sdk_version is None and rec.sdk_version_full is None
    assert rec.value("float_bitwidth") == 16 and rec.value("float_fallback") is True


def test_net_json_converter_command(tmp_path: Path) -> None:
    path = tmp_path / "m_net.json"
    path.write_text(json.dumps(net_json_dict(RECORD_FP16, {})), "utf-8")
    rec = read_record(path)
    assert rec.value("act_bitwidth") == 16 and rec.value("input_list") == "/calib/input_list.txt"
    assert rec.source == str(path)


@pytest.mark.parametrize("content, expected", [
    ("this is { not json", "not valid JSON"),
    (json.dumps(net_json_dict("", {})), "converter_command is empty"),
    (json.dumps({"graph": {}}), "converter_command is missing"),
    ("[1, 2]", "not an object"),
])
def test_net_json_problems_are_one_line_user_errors(tmp_path: Path, content: str,
                                                    expected: str) -> None:
    path = tmp_path / "bad_net.json"
    path.write_text(content, "utf-8")
    with pytest.raises(UserError) as err:
        read_record(path)
    text = err.value.oneline()
    assert expected in text and str(path) in text and "\n" not in text


def test_no_record_in_source_or_binary(tmp_path: Path, bin_231: Path) -> None:
    src = tmp_path / "plain.cpp"
    src.write_text('#include "QnnModel.hpp"\nint main() { return 0; }\n', "utf-8")
    for path in (src, bin_231):
        with pytest.raises(UserError, match="no recorded argument list") as err:
            read_record(path)
        assert str(path) in err.value.oneline()


def test_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        read_record(tmp_path / "missing.cpp")
    with pytest.raises(UserError, match="cannot read"):
        read_record(tmp_path)                      # a directory


def test_truncated_header_still_reads_what_is_there(tmp_path: Path) -> None:
    src = tmp_path / "cut.cpp"
    text = source_text(RECORD_FP16)
    src.write_text(text[:text.index("out_names")], "utf-8")
    rec = read_record(src)
    assert rec.value("act_bitwidth") == 16
    assert not rec.has("weights_bitwidth")
    assert any("not closed" in p for p in rec.problems)


def test_odd_content_never_crashes() -> None:
    rec = parse_record_text("qnn-onnx-converter; a=[1, 2; b=3; junk; c=x y=z")
    assert rec.problems == ["unbalanced brackets in the value of a"]
    # split only before `key=`: text without one stays in the value before it
    assert rec.args == {"a": "[1, 2", "b": "3; junk", "c": "x y=z"}
    assert rec.value("a") == "[1, 2"
    rec2 = parse_record_text("qnn-onnx-converter define_symbol=['A=1 B=2'] act_bw=8")
    assert rec2.value("define_symbol") == ["A=1 B=2"]     # key=-like text inside a list
    assert rec2.value("act_bitwidth") == 8


def test_value_semantics() -> None:
    assert literal("None") is None and literal("") == "" and literal("False") is False
    assert literal("min-max") == "min-max" and literal("1e-3") == 0.001
    assert literal("/abs/path.txt") == "/abs/path.txt" and literal("1+2j") == "1+2j"
    assert loose_literal("true") is True and loose_literal("NONE") is None
    assert same_value(16, 16.0) and same_value(None, "") and same_value([["a", "b"]], (("a", "b"),))
    assert not same_value(True, 1) and not same_value(8, 16) and not same_value("a", "b")
    assert canonical_key("--act_bw") == "act_bitwidth" and canonical_key("foo") == "foo"
    assert short_version("qaisw-v2.31.0.250130151446_114721") == "2.31.0"
    assert short_version("v2.18") == "2.18.0" and short_version("x") is None


def test_to_dict_shape(head_227: Path) -> None:
    d = read_record(head_227).to_dict()
    assert {"tool", "sdk_version", "args", "conflicts", "raw"} <= set(d)
    json.dumps(d)
