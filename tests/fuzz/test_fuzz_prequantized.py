"""Fuzz the already-quantized detector (qnn_ci.model.prequantized): random graphs that mix
quantization ops (QDQ, QOperator, dynamic, integer, weight-only contrib ops) with
float ops, odd domains and op names, nested If/Loop bodies, local functions,
initializers and Constant values of any (also unknown) data type; and byte
mutations of a real-format QDQ model file. The detector may only give a result
(whose kind agrees with the ops it names) or one UserError line."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from qnn_ci.errors import UserError
from qnn_ci.model.prequantized import FLOAT, KINDS, QDQ, category, detect, detect_file
from tests.fuzz.mutations import apply_edits, byte_edits

OPS = ["QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QLinearAdd",
       "QLinearSigmoid", "QGemm", "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear",
       "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
       "MatMulNBits", "QOrderedMatMul", "QuantizeBFP", "Conv", "Relu", "MatMul", "Add",
       "QuickGelu", "Constant", "If", "Loop", "Q", ""]
DOMAINS = ["", "ai.onnx", "com.microsoft", "local", "\u00e9x", "a" * 300]
NAMES = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
DATA_TYPES = st.sampled_from([1, 2, 3, 6, 7, 10, 21, 22, 0, 99, -1, 2**31 - 1])


def _tensor(name: str, data_type: int) -> onnx.TensorProto:
    t = onnx.TensorProto()
    t.name = name
    t.data_type = data_type
    t.dims.extend([1])
    return t


@st.composite
def graphs(draw: st.DrawFn, depth: int = 0) -> onnx.GraphProto:
    g = onnx.GraphProto()
    g.name = draw(NAMES)
    for i in range(draw(st.integers(0, 6))):
        g.initializer.append(_tensor(f"w{i}", draw(DATA_TYPES)))
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(OPS) | NAMES)
        node = g.node.add()
        node.op_type = op
        node.domain = draw(st.sampled_from(DOMAINS))
        node.name = draw(NAMES)
        node.input.extend(draw(st.lists(st.sampled_from(["x", "w0", "w1", "c0", ""]),
                                        max_size=3)))
        node.output.extend(draw(st.lists(NAMES, max_size=2)))
        if op == "Constant":
            node.attribute.append(helper.make_attribute("value",
                                                        _tensor("c", draw(DATA_TYPES))))
        if depth < 2 and draw(st.integers(0, 3)) == 0:    # a body, now and then
            if draw(st.booleans()):
                node.attribute.append(helper.make_attribute("body", draw(graphs(depth + 1))))
            else:
                sub = draw(st.lists(graphs(depth + 1), max_size=2))
                attr = onnx.AttributeProto()
                attr.name, attr.type = "branches", onnx.AttributeProto.GRAPHS
                attr.graphs.extend(sub)
                node.attribute.append(attr)
    return g


@st.composite
def models(draw: st.DrawFn) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.graph.CopyFrom(draw(graphs()))
    for _ in range(draw(st.integers(0, 1))):
        fn = model.functions.add()
        fn.name, fn.domain = draw(NAMES), draw(st.sampled_from(DOMAINS))
        fn.node.extend(draw(graphs(1)).node)
    return model


def _check(found: object) -> None:
    assert found.kind in KINDS                       # type: ignore[attr-defined]
    ops = found.ops                                  # type: ignore[attr-defined]
    assert found.quantized == bool(ops)              # type: ignore[attr-defined]
    assert all(category(op.rsplit(".", 1)[-1]) for op in ops)
    if found.weight_only:                            # type: ignore[attr-defined]
        assert found.kind == QDQ                     # type: ignore[attr-defined]
    for tool in ("simulator", "converter"):
        text = found.message(tool)                   # type: ignore[attr-defined]
        assert isinstance(text, str) and text


@given(models())
def test_random_graphs_give_a_result(model: onnx.ModelProto) -> None:
    found = detect(model)
    _check(found)
    # round trip: what is stored is what is read
    assert detect(onnx.load_model_from_string(model.SerializeToString())).to_dict() == \
        found.to_dict()


def _qdq_bytes() -> bytes:
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], name="wdq"),
             helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]),
                     helper.make_tensor("z", TensorProto.UINT8, [], [128]),
                     helper.make_tensor("w", TensorProto.UINT8, [4, 4], list(range(16)))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


QDQ_BYTES = _qdq_bytes()
TOKENS = [b"\x00", b"\xff", b"\x0a\x00", b"\x12\x01\xff", b"\x80" * 11, b"\x3a\x02QL",
          b"\xff" * 10]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_prequantized")


@given(byte_edits(TOKENS))
def test_mutated_model_files_give_a_result_or_one_line(folder: Path, edits: list) -> None:
    path = folder / "m.onnx"
    path.write_bytes(apply_edits(QDQ_BYTES, edits))
    try:
        found = detect_file(path)
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    _check(found)
    assert found.kind in (QDQ, FLOAT) or found.ops
