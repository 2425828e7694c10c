"""Fuzz what issue 10 added to the converter-output readers: the SDK version read
from a recorded tool path, the model-prefix completeness check, the integer-input
outcome check and the AIMET coverage classes. Each may only give a result,
findings or one ``UserError`` line."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from qnn_ci.sdk.cpp_model import parse_cpp_text
from qnn_ci.sdk.encoding_roles import ROLES, derived_roles
from qnn_ci.sdk.integer_inputs import check_outputs
from qnn_ci.sdk.net_json import parse_net_json
from qnn_ci.sdk.record import parse_record_text, set_version, version_text

RECORD_TOKENS = st.sampled_from([
    "C:\\Qualcomm\\AIStack\\QAIRT\\2.22.6.240515\\bin\\x86_64-windows-msvc\\",
    "/opt/qcom/aistack/qairt/2.20.0.240223/bin/x86_64-linux-clang/", "qnn-onnx-converter",
    "qnn-pytorch-converter", " ", "; ", "\\", "/", "act_bw=8", "float_bitwidth=8",
    "float_bw=32", "overwrite_model_prefix=True", "use_per_channel_quantization=[False]",
    "2.", "9" * 30, ".", "v", "\n", "=", "[", "]"])


@given(pieces=st.lists(st.one_of(RECORD_TOKENS, st.text(max_size=6)), max_size=60),
       stamp=st.one_of(st.none(), st.text(max_size=30),
                       st.just("qaisw-v2.45.0.260326154327")))
def test_record_version_sources(pieces: list[str], stamp: str | None) -> None:
    rec = parse_record_text("".join(pieces), source="fuzz")
    set_version(rec, stamp)
    assert rec.sdk_version_source in (None, "QNN_SDK_VERSION", "tool path")
    assert (rec.sdk_version is None) == (rec.sdk_version_source is None)
    version_text(rec)
    json.dumps(rec.to_dict())


CPP_TOKENS = st.sampled_from([
    "/* Command Line used:\n", "*/\n", "overwrite_model_prefix=True", "overwrite_model_prefix=",
    "False", "[True]", "QnnModel_composeGraphs(", "ElementwiseAdd_composeGraphs(", "_" * 200,
    "composeGraphs(", ") {", "}", "{", "(", ")", "\n", '.name= "ids"', '.name= "_73"',
    ".type= QNN_TENSOR_TYPE_APP_WRITE,", ".dataType= QNN_DATATYPE_UFIXED_POINT_16,",
    ".dataType= QNN_DATATYPE_INT_32,", ".dataType= ", '"', "//", "a" * 500])


@given(pieces=st.lists(st.one_of(CPP_TOKENS, st.text(max_size=6)), max_size=80),
       codes=st.lists(st.one_of(st.integers(-5, 2000), st.text(max_size=4), st.none()),
                      max_size=4),
       overridden=st.lists(st.sampled_from(["ids", "73", "x"]), max_size=3))
def test_integer_outcome_and_prefix(pieces: list[str], codes: list[object],
                                    overridden: list[str]) -> None:
    model = parse_cpp_text("".join(pieces), source="fuzz.cpp")
    model.incomplete()
    net = parse_net_json({"graph": {"tensors": {
        name: {"type": 0, "data_type": code, "quant_params": {"is_overridden": True}}
        for name, code in zip(["ids", "_73", "x", "y"], codes, strict=False)}}},
        source="fuzz_net.json")
    found = check_outputs({"ids": "int64", "73": "int32"}, [model, net],
                          overridden=overridden)
    for q in found:
        assert q.input in ("ids", "73")
        q.message()


OPS = ["Conv", "MatMul", "Add", "Relu", "Clip", "Reshape", "Concat", "MaxPool",
       "BatchNormalization", "Identity", "Mul", "Gemm", "Constant"]


@given(spec=st.lists(st.tuples(st.sampled_from(OPS),
                               st.lists(st.integers(0, 30), min_size=0, max_size=5)),
                     max_size=25))
def test_coverage_roles_on_any_graph(spec: list[tuple[str, list[int]]]) -> None:
    """Random (even invalid) wiring: roles are assigned without raising."""
    names = ["x", "w0", "w1"]
    nodes = []
    for k, (op, picks) in enumerate(spec):
        ins = [names[p % len(names)] for p in picks] if op != "Constant" else []
        out = f"t{k}"
        nodes.append(helper.make_node(op, ins, [out], name=f"n{k}"))
        names.append(out)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])],
        [helper.make_tensor("w0", TensorProto.FLOAT, [1], [1.0]),
         helper.make_tensor("w1", TensorProto.FLOAT, [1], [2.0])])
    roles = derived_roles(helper.make_model(graph), names)
    assert set(roles.values()) <= set(ROLES)
