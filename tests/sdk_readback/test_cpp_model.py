"""Tensors and nodes in generated sources, and _net.json / QNN JSON graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.errors import UserError
from qnn_ci.sdk.cpp_model import parse_cpp_text, read_cpp_model, strip_comments
from qnn_ci.sdk.net_json import parse_net_json, read_net_json
from tests.sdk_readback.conftest import FP16_TENSORS, RECORD_FP16, source_text, tensor_fn


def test_real_231_tensors_and_nodes(cpp_231: Path) -> None:
    m = read_cpp_model(cpp_231)
    assert m.problems == []
    assert len(m.tensors) == 73
    assert m.data_type_counts() == {
        "QNN_DATATYPE_UFIXED_POINT_8": 30, "QNN_DATATYPE_SFIXED_POINT_32": 9,
        "QNN_DATATYPE_UINT_32": 30, "QNN_DATATYPE_INT_32": 4}
    types = {t.type for t in m.tensors}
    assert types == {"QNN_TENSOR_TYPE_APP_WRITE", "QNN_TENSOR_TYPE_APP_READ",
                     "QNN_TENSOR_TYPE_NATIVE", "QNN_TENSOR_TYPE_STATIC"}
    by_name = {t.name: t for t in m.tensors}
    inp = by_name["input_1"]
    assert inp.type == "QNN_TENSOR_TYPE_APP_WRITE" and inp.dims == [1, 512, 512, 4]
    w = by_name["conv0_weight"]
    assert (w.quant_encoding, w.scale, w.offset) == (
        "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET", pytest.approx(0.0013041008496657), -127)
    assert by_name["Conv_0_pad_amount"].dims == [2, 2]      # a node's tensor parameter
    assert "dilation" not in by_name and "group" not in by_name  # param names, not tensors
    assert m.graphs == ["naf_block_sota"]
    assert m.sdk_version_full == "qaisw-v2.31.0.250130151446_114721"
    conv = m.nodes[0]
    assert (conv.name, conv.package, conv.type) == ("Conv_0", "qti.aisw", "Conv2d")
    assert conv.inputs == ["input_1", "conv0_weight", "conv0_bias"]
    assert len(m.nodes) == 21 and m.nodes[1].type == "ElementWiseNeuron"


def test_real_227_head_is_incomplete_but_read(head_227: Path) -> None:
    m = read_cpp_model(head_227)
    assert [(t.name, t.data_type, t.dims) for t in m.tensors] == [
        ("input", "QNN_DATATYPE_FLOAT_32", [1, 288, 384, 3])]
    assert any("composeGraphs" in p for p in m.problems)


def test_header_words_are_not_tensor_data() -> None:
    # A record value that looks like a tensor field must not become one.
    record = RECORD_FP16 + "; define_symbol=['.name= \"ghost\", .dataType= QNN_DATATYPE_FLOAT_16']"
    m = parse_cpp_text(source_text(record, tensors=tensor_fn(
        "x", "APP_WRITE", "QNN_DATATYPE_FLOAT_32", [1, 4])))
    assert [t.name for t in m.tensors] == ["x"] and m.problems == []


def test_sample_with_fp16_tensors() -> None:
    m = parse_cpp_text(source_text(RECORD_FP16, tensors=FP16_TENSORS))
    assert [(t.name, t.data_type) for t in m.tensors] == [
        ("x", "QNN_DATATYPE_FLOAT_32"), ("x_fp16", "QNN_DATATYPE_FLOAT_16"),
        ("w", "QNN_DATATYPE_FLOAT_16"), ("y", "QNN_DATATYPE_UFIXED_POINT_16")]
    assert [(n.name, n.type, n.inputs) for n in m.nodes] == [
        ("add0", "ElementWiseAdd", ["x_fp16", "w"])]


def test_truncated_source_returns_what_was_read(cpp_231: Path) -> None:
    text = cpp_231.read_text("utf-8")
    cut = text.index('.name= "conv1_weight"') + 100    # after .type=, before .dataType=
    m = parse_cpp_text(text[:cut], source="cut.cpp")
    names = [t.name for t in m.tensors]
    assert names[:3] == ["input_1", "conv0_weight", "conv0_bias"]
    assert names[-1] == "conv1_weight" and m.tensors[-1].data_type is None
    assert any("cut short" in p for p in m.problems)
    assert any("composeGraphs" in p for p in m.problems)
    # cut right after a name: nothing invented, but said
    m1 = parse_cpp_text(text[:text.index('.name= "conv1_weight"') + 30])
    assert m1.tensors[-1].name == "_25"
    assert any("ends after .name= 'conv1_weight'" in p for p in m1.problems)
    # a cut inside a comment is also survivable
    m2 = parse_cpp_text(text[:200])
    assert m2.tensors == [] and any("unterminated" in p for p in m2.problems)


def test_hand_edited_source(cpp_231: Path) -> None:
    text = cpp_231.read_text("utf-8")
    edited = text.replace(".dataType= QNN_DATATYPE_UFIXED_POINT_8,", ".dataType= MY_TYPE,", 1)
    edited = edited.replace(".dimensions=dimensions_conv0_weight,", ".dimensions=dims_gone,")
    m = parse_cpp_text(edited)
    assert len(m.tensors) == 73
    assert m.tensors[0].data_type == "MY_TYPE"
    assert any("unknown data type MY_TYPE" in p for p in m.problems)
    assert any("dims_gone not found" in p for p in m.problems)


def test_strip_comments_keeps_strings() -> None:
    code = 'a = "x // not a comment /* no */"; // gone\n/* gone\n too */ b = 1;'
    out = strip_comments(code)
    assert '"x // not a comment /* no */"' in out and "gone" not in out and "b = 1;" in out


def test_missing_source_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        read_cpp_model(tmp_path / "nope.cpp")


def test_net_json_sample(fp16_net_json: Path) -> None:
    net = read_net_json(fp16_net_json)
    by_name = {t.name: t for t in net.tensors}
    assert by_name["x_fp16"].data_type == "QNN_DATATYPE_FLOAT_16"
    assert by_name["x_fp16"].data_type_code == 534
    assert by_name["w"].dims == [1, 4]                   # from current_dims (old files)
    assert by_name["w"].type_name == "STATIC" and by_name["x"].type_name == "APP_WRITE"
    assert by_name["y"].data_type == "QNN_DATATYPE_UFIXED_POINT_16"
    assert by_name["x"].quant["definition"] == 2147483647
    assert [(n.name, n.type, n.inputs, n.outputs) for n in net.nodes] == [
        ("add0", "ElementWiseAdd", ["x_fp16", "w"], ["y"])]
    assert net.converter_command == RECORD_FP16 and net.problems == []


def test_net_json_lenient_about_shape() -> None:
    data = {"graph": {"tensors": [{"name": "a", "data_type": 562, "dims": [1]},
                                  {"name": "b", "data_type": 12345}, {"nameless": 1},
                                  {"name": "c"}]}}
    net = parse_net_json(data)
    assert [t.name for t in net.tensors] == ["a", "b", "c"]
    assert net.tensors[1].data_type is None
    assert any("unknown data_type code 12345" in p for p in net.problems)
    assert any("tensors[2]: no name" in p for p in net.problems)
    assert any("'c': no data_type" in p for p in net.problems)
    assert parse_net_json([]).problems == ["JSON top level is not an object"]
    assert "no 'graph' object" in parse_net_json({"x": 1}).problems[0]


def test_net_json_not_json(tmp_path: Path) -> None:
    path = tmp_path / "m_net.json"
    path.write_text("qnn-onnx-converter; act_bitwidth=8", "utf-8")
    with pytest.raises(UserError, match="not valid JSON"):
        read_net_json(path)


def test_real_onnxruntime_qnn_json_graph(ort_qnn_fp16_json: Path) -> None:
    net = read_net_json(ort_qnn_fp16_json)
    dtypes = {t.name: t.data_type for t in net.tensors}
    assert dtypes == {"x": "QNN_DATATYPE_FLOAT_32", "xh": "QNN_DATATYPE_FLOAT_16",
                      "w": "QNN_DATATYPE_FLOAT_16", "t": "QNN_DATATYPE_FLOAT_16",
                      "y": "QNN_DATATYPE_FLOAT_32"}
    assert {n.type for n in net.nodes} == {"Cast", "ElementWiseAdd"}
    assert net.converter_command == ""
    json.dumps(net.to_dict())
