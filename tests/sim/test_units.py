"""Pieces that need no simulator run: Constant folding, the EP log reader, the
context-binary reader, SoC checks, AIMET overrides mapping, availability."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError
from qnn_ci.sdk.encodings import Enc, Encodings
from qnn_ci.sim import availability
from qnn_ci.sim.binary import ContextInfo, read_context_info
from qnn_ci.sim.constants import fold_constants
from qnn_ci.sim.ep import capture_native_output, sim_target
from qnn_ci.sim.fusion import fuse_batchnorm
from qnn_ci.sim.logparse import RejectedNode, parse_ep_log
from qnn_ci.sim.overrides import overrides_from_encodings
from qnn_ci.sim.prepare import attribute_log, check_context
from qnn_ci.tables import get_soc


def _cpu(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


# --------------------------------------------------------------- constants

def _constant_model() -> onnx.ModelProto:
    """Weights in Constant nodes, one inside an If branch, one Constant that is
    itself a graph output, and the value_float / value_ints forms."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "unused")
    branch_const = helper.make_node("Constant", [], ["k"], name="k_const",
                                    value=numpy_helper.from_array(np.float32([2.0]), "t"))
    then_g = helper.make_graph([branch_const, helper.make_node("Mul", ["x", "k"], ["t_out"])],
                               "then", [], [helper.make_tensor_value_info("t_out",
                                                                          TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Constant", [], ["wc"], name="w_const", value=w),
        helper.make_node("Constant", [], ["sf"], name="s_const", value_float=3.0),
        helper.make_node("Constant", [], ["shape"], name="shape_const", value_ints=[4]),
        helper.make_node("Constant", [], ["flag"], name="flag_const",
                         value=numpy_helper.from_array(np.array(True), "f")),
        helper.make_node("Constant", [], ["exported"], name="out_const", value_float=7.0),
        helper.make_node("Reshape", ["wc", "shape"], ["wr"]),
        helper.make_node("Mul", ["wr", "sf"], ["ws"]),
        helper.make_node("Add", ["in", "ws"], ["x"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(nodes, "consts",
                              [helper.make_tensor_value_info("in", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("exported", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_fold_constants_main_graph_and_subgraph_keeps_outputs_and_results() -> None:
    model = _constant_model()
    feeds = {"in": np.float32([1, 2, 3, 4])}
    before = _cpu(model, feeds)
    folded = fold_constants(model)
    assert folded == 5          # 4 in the main graph + 1 in the If branch; not the output one
    assert [n.name for n in model.graph.node if n.op_type == "Constant"] == ["out_const"]
    then_g = next(a.g for n in model.graph.node if n.op_type == "If"
                  for a in n.attribute if a.name == "then_branch")
    assert [i.name for i in then_g.initializer] == ["k"]
    assert {i.name for i in model.graph.initializer} >= {"wc", "sf", "shape", "flag"}
    onnx.checker.check_model(model)
    after = _cpu(model, feeds)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_fold_constants_on_the_real_classifier(cls_model: Path) -> None:
    model = onnx.load(str(cls_model))
    assert len(model.graph.initializer) == 0
    n = fold_constants(model)
    assert n == 308 and not any(x.op_type == "Constant" for x in model.graph.node)
    assert fold_constants(model) == 0


# --------------------------------------------------------------- BatchNormalization

def _conv_bn(op: str, group: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w_shape = (4, 2 // group, 3, 3) if op == "Conv" else (2, 4, 3, 3)
    inits = [numpy_helper.from_array(rng.normal(size=w_shape).astype(np.float32), "w")]
    inits += [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
        ("s", rng.uniform(0.5, 2, 4)), ("b", rng.normal(size=4)), ("m", rng.normal(size=4)),
        ("v", rng.uniform(0.1, 3, 4)))]
    nodes = [helper.make_node(op, ["x", "w"], ["c"], name="conv", group=group),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"],
                              name="bn", epsilon=1e-3)]
    out = [1, 4, 4, 4] if op == "Conv" else [1, 4, 8, 8]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(("op", "group"), [("Conv", 1), ("Conv", 2), ("ConvTranspose", 1)])
def test_fuse_batchnorm_keeps_the_results(op: str, group: int) -> None:
    model = _conv_bn(op, group)
    feeds = {"x": np.random.default_rng(0).normal(size=(1, 2, 6, 6)).astype(np.float32)}
    before = _cpu(model, feeds)[0]
    assert fuse_batchnorm(model) == 1
    assert [n.op_type for n in model.graph.node] == [op]
    assert {i.name for i in model.graph.initializer} == {"w_bnfused", "conv_bias_bnfused"}
    onnx.checker.check_model(model)
    np.testing.assert_allclose(_cpu(model, feeds)[0], before, rtol=1e-5, atol=1e-5)


def test_fuse_batchnorm_leaves_shared_or_non_conv_inputs() -> None:
    model = _conv_bn("Conv")
    model.graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    assert fuse_batchnorm(model) == 0               # the Conv output is used twice


def test_fuse_batchnorm_on_the_real_classifier(cls_model: Path) -> None:
    model = onnx.load(str(cls_model))
    fold_constants(model)
    feeds = {"x": np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)}
    before = _cpu(model, feeds)[0]
    assert fuse_batchnorm(model) == 35
    assert not any(n.op_type == "BatchNormalization" for n in model.graph.node)
    np.testing.assert_allclose(_cpu(model, feeds)[0], before, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------- EP log

LOG = """\
\x1b[0;93m2026-11-29 16:46:19.70 [W:onnxruntime:, qnn_model_wrapper.cc:565 CreateQnnNode] \
QNN.backendValidateOpConfig() failed for node `cast_in` of type `Cast` with error code 3110
\x1b[m
\x1b[0;93m2026-11-29 16:46:19.70 [W:onnxruntime:, qnn_model_wrapper.cc:565 CreateQnnNode] \
QNN.backendValidateOpConfig() failed for node `add_h` of type `ElementWiseAdd` with error code 3110
\x1b[1;31m2026-11-29 16:46:20.16 [E:onnxruntime:, qnn_execution_provider.cc:2453 GetCapability] \
Unsupported nodes in QNN EP: { name: conv1_token_1, type: Conv }{ name: relu1, type: Relu }\x1b[m
2026-11-29 16:46:36.22 [V:onnxruntime:, qnn_execution_provider.cc:1713 LogNodeSupport] \
Validation FAILED for 5 nodes in OrtNodeUnit (Conv) :
\tREASON : Cannot get shape
\x1b[1;31m2026-11-29 16:46:19.70 [E:onnxruntime:, inference_session.cc:3309 operator()] This \
session contains graph nodes that are assigned to the default CPU EP, but fallback to CPU EP \
has been explicitly disabled by the user.\x1b[m
"""


def test_parse_ep_log_names_nodes_types_codes_and_reasons() -> None:
    parsed = parse_ep_log(LOG)
    by = {r.name: r for r in parsed.rejected}
    assert set(by) == {"cast_in", "add_h", "conv1_token_1", "relu1"}
    assert (by["cast_in"].qnn_type, by["cast_in"].error_code) == ("Cast", 3110)
    assert by["add_h"].qnn_type == "ElementWiseAdd" and by["add_h"].op_type is None
    assert by["conv1_token_1"].op_type == "Conv" and by["conv1_token_1"].error_code is None
    assert parsed.unit_failures == [("Conv", 5, "Cannot get shape")]
    assert "Cannot get shape" in parsed.reasons
    assert len(parsed.errors) == 2 and parsed.errors[1].startswith("This session contains")
    assert "error code 3110" in by["cast_in"].describe()
    assert "\x1b" not in "".join(parsed.errors)


def test_attribute_log_joins_ep_made_ops_and_retries_to_their_node() -> None:
    """EP-made QNN op names (after a node or after a tensor), `_N`/`_token_N`
    retries, and names that are no node at all."""
    nodes = [helper.make_node("Cast", ["x"], ["xh"], name="cast_in", to=TensorProto.FLOAT16),
             helper.make_node("Gather", ["xh", "idx"], ["g"], name="gather1"),
             helper.make_node("Cast", ["g"], ["y"], name="cast_out", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [], [])
    model = helper.make_model(graph)
    logged = [RejectedNode("cast_in_ort_qnn_ep_convert", qnn_type="Convert", error_code=3110),
              RejectedNode("cast_in", qnn_type="Cast", error_code=3110),
              RejectedNode("cast_in_2", qnn_type="Cast", error_code=3110),
              RejectedNode("idx_ort_qnn_ep_cast", qnn_type="Cast", error_code=3110),
              RejectedNode("cast_out", op_type="Cast"),
              RejectedNode("somewhere_else", op_type="Relu")]
    session_nodes = {"cast_in": "Cast", "gather1": "Gather", "cast_out": "Cast",
                     "g/duplicated": "Identity"}
    merged, unmatched = attribute_log(logged, session_nodes, model)
    assert set(merged) == {"cast_in", "gather1", "cast_out"}
    c = merged["cast_in"]
    assert (c.op_type, c.qnn_type, c.error_code) == ("Cast", "Cast", 3110)
    assert c.ep_ops == ["'cast_in_ort_qnn_ep_convert' (Convert, error code 3110)"]
    # A tensor-named EP op belongs to the node that consumes (or produces) the tensor.
    assert merged["gather1"].ep_ops == ["'idx_ort_qnn_ep_cast' (Cast, error code 3110)"]
    assert merged["gather1"].error_code is None
    assert merged["cast_out"].ep_ops == []
    assert [r.name for r in unmatched] == ["somewhere_else"]


def test_unnamed_nodes_in_the_log_map_to_their_graph_position() -> None:
    """The EP logs a nameless node as <op type><graph index> (`_2` on a retry); the
    `Unsupported nodes` line gives such nodes an empty name, which names nothing."""
    log = ("[W:onnxruntime:, m.cc:565 C] QNN.backendValidateOpConfig() failed for node "
           "`Cast1` of type `Cast` with error code 3110\n"
           "[W:onnxruntime:, m.cc:565 C] QNN.backendValidateOpConfig() failed for node "
           "`Cast3_2` of type `Cast` with error code 3110\n"
           "[W:onnxruntime:, m.cc:565 C] QNN.backendValidateOpConfig() failed for node "
           "`_ort_qnn_ep_convert` of type `Convert` with error code 3110\n"
           "[E:onnxruntime:, q.cc:1 G] Unsupported nodes in QNN EP: { name: , type: Cast }"
           "{ name: , type: Cast }, \n")
    parsed = parse_ep_log(log)
    assert [r.name for r in parsed.rejected] == ["Cast1", "Cast3_2", "_ort_qnn_ep_convert"]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Cast", ["r"], ["c"], to=TensorProto.FLOAT16),
             helper.make_node("Relu", ["c"], ["r2"], name="named"),
             helper.make_node("Cast", ["r2"], ["y"], to=TensorProto.FLOAT)]
    model = helper.make_model(helper.make_graph(nodes, "g", [], []))
    merged, unmatched = attribute_log(parsed.rejected, {"Relu0": "Relu", "Cast1": "Cast",
                                                        "named": "Relu", "Cast3": "Cast"}, model)
    assert set(merged) == {"Cast1", "Cast3"}
    assert all(r.error_code == 3110 for r in merged.values())
    assert [r.name for r in unmatched] == ["_ort_qnn_ep_convert"]   # made for no known node
    assert "node 'Cast3' (unnamed node #3) of type Cast" in RejectedNode(
        "Cast3", op_type="Cast", index=3).describe()


def test_parse_ep_log_of_a_clean_run_is_empty() -> None:
    parsed = parse_ep_log("[W:onnxruntime:, x.cc:1 F] File mapped weights feature is only "
                          "available on Windows arm64 devices\n")
    assert parsed.rejected == [] and parsed.errors == [] and parsed.unit_failures == []


# --------------------------------------------------------------- context binary

def test_read_context_info_from_binary_text(tmp_path: Path) -> None:
    blob = (b"\x00\x01junk;min_arch=68;soc_type=QCS6490;arch=68;num_nsps=1;hvx_threads=4;"
            b"vtcm_size=2097152;02reserved_size=0;\x00more;soc_type=QCS6490;arch=68;")
    p = tmp_path / "x_ctx_qnn.bin"
    p.write_bytes(blob)
    info = read_context_info(p)
    assert info == ContextInfo("QCS6490", 68, 2097152, ("QCS6490",))
    assert info.arch_name == "v68"
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert read_context_info(empty).soc_type is None
    other = tmp_path / "other.bin"
    other.write_bytes(b"no settings here")
    assert read_context_info(other) == ContextInfo(None, None, None)


def test_check_context_flags_wrong_soc_arch_and_vtcm() -> None:
    soc = get_soc("QCS6490")
    assert check_context(ContextInfo("QCS6490", 68, 2 << 20), soc, Path("a.bin")) == []
    found = check_context(ContextInfo("SM7325", 73, 8 << 20), soc, Path("a.bin"))
    assert [f.check for f in found] == ["sim.soc_type", "sim.arch", "sim.vtcm"]
    assert [f.severity for f in found] == [Severity.ERROR, Severity.ERROR, Severity.WARNING]
    assert "not QCS6490 (simulator id 93)" in found[0].message
    # An alias of the SoC is the same chip.
    assert check_context(ContextInfo("QCM6490", 68, None), soc, Path("a.bin")) == []


# --------------------------------------------------------------- SoC checks

def test_sim_target_resolves_aliases_to_numeric_ids() -> None:
    assert sim_target("qcs6490").sim_soc_id == 93
    assert sim_target("QCM6490").name == "QCS6490"
    assert sim_target("SM8550").sim_soc_id == 43
    # Read back from context binaries the simulator built for these ids.
    assert sim_target("QCS8550").sim_soc_id == 66
    assert sim_target("SM8850").sim_soc_id == 87


@pytest.mark.parametrize(("name", "words"), [
    ("QCS6491", ["unknown SoC 'QCS6491'", "did you mean QCS6490"]),
    ("", ["no target SoC"]),
])
def test_sim_target_rejects_unknown_and_unsimulated_socs(name: str, words: list[str]) -> None:
    with pytest.raises(UserError) as err:
        sim_target(name, key="--soc")
    text = err.value.oneline()
    assert "\n" not in text
    for w in words:
        assert w in text


# --------------------------------------------------------------- native output capture

def test_capture_native_output_catches_fd_writes_and_restores(tmp_path: Path,
                                                              capfd: pytest.CaptureFixture[str]
                                                              ) -> None:
    log = tmp_path / "native.log"
    with capture_native_output(log):
        os.write(1, b"from fd1\n")
        os.write(2, b"from fd2\n")
    os.write(2, b"after\n")
    assert log.read_text() == "from fd1\nfrom fd2\n"
    out, err = capfd.readouterr()
    assert "from fd" not in out + err and "after" in err


# --------------------------------------------------------------- AIMET overrides

def test_overrides_from_encodings_map_offsets_types_and_channels() -> None:
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w"),
         numpy_helper.from_array(np.ones(2, np.float32), "bias")]))
    enc = Encodings("f.encodings", "1.0.0",
                    activations={"x": [Enc(16, scale=1e-4, offset=-32768)],
                                 "ghost": [Enc(8, scale=0.1, offset=0)],
                                 "y": [Enc(8, dtype="float", scale=None)]},
                    params={"w": [Enc(8, scale=0.01, offset=-128, axis=0),
                                  Enc(8, scale=0.02, offset=-128, axis=0)],
                            "bias": [Enc(32, scale=1e-6, offset=0)]})
    o = overrides_from_encodings(enc, model)
    from onnxruntime.quantization import QuantType

    assert o.applied == ["x", "w"] and o.unknown == ["ghost"]
    assert set(o.skipped) == {"bias"} and o.float_tensors == ["y"]   # y: kept float
    x = o.overrides["x"][0]
    assert x["quant_type"] == QuantType.QUInt16 and x["zero_point"] == 32768
    assert float(x["scale"]) == pytest.approx(1e-4)
    w = o.overrides["w"]
    assert len(w) == 2 and w[0]["axis"] == 0 and w[1]["zero_point"] == 128
    assert w[0]["quant_type"] == QuantType.QUInt8


# --------------------------------------------------------------- availability

def test_unavailable_reason_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    availability.sim_unavailable.cache_clear()
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)   # how Python blocks an import
    try:
        reason = availability.sim_unavailable()
        assert reason == "onnxruntime-qnn is not installed: pip install 'qnn-ci[sim]'"
        from qnn_ci.engine.spec import ExportSpec
        from qnn_ci.engine.stage import Environment
        from qnn_ci.stages.sim_npu import SimNpuStage
        from qnn_ci.stages.sim_numerics import SimNumericsStage

        export = ExportSpec("e", Path("m.onnx"), Path("qnn-ci.yaml"), 1)
        env = Environment(workdir=Path("."))
        assert SimNpuStage().unavailable(export, env) == reason
        assert SimNumericsStage().unavailable(export, env) == reason
    finally:
        availability.sim_unavailable.cache_clear()
    assert availability.versions()["onnxruntime"] != "absent"
