"""Intermediate tensors exposed and run on real onnxruntime; the QDQ mapping on a
real onnxruntime QDQ quantizer output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.diagnose.intermediates import (
    cpu_session,
    expose,
    float_tensors,
    quantized_names,
    run_samples,
    save_exposed,
)
from qnn_ci.diagnose.sweep import BoundOutputs, Sweep, align, float_model_of, sweep_qdq_cpu
from tests.diagnose.graphs import COLLAPSE_LAYER, COLLAPSE_NODE, collapse_model, collapse_samples


def mixed_model(path: Path) -> Path:
    """Float tensors, an int64 shape chain, a constant-only node and an If whose
    branch computes a tensor of its own."""
    then_out = helper.make_tensor_value_info("branch", TensorProto.FLOAT, None)
    then = helper.make_graph([helper.make_node("Neg", ["r"], ["branch"], name="neg_in_branch")],
                             "then", [], [then_out])
    other = helper.make_graph([helper.make_node("Identity", ["r"], ["branch"], name="id_in_br")],
                              "else", [], [then_out])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["shape"], name="shape"),
        helper.make_node("Cast", ["k"], ["k2"], name="const_only", to=TensorProto.FLOAT),
        helper.make_node("Add", ["r", "k2"], ["s"], name="add"),
        helper.make_node("ReduceSum", ["s"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [numpy_helper.from_array(np.ones((2, 3), np.float32), "k"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_float_tensors_skip_ints_constants_and_subgraphs(tmp_path: Path) -> None:
    model = onnx.load(str(mixed_model(tmp_path / "mixed.onnx")))
    infos = float_tensors(model)
    assert [(i.tensor, i.node, i.op_type) for i in infos] == [
        ("r", "relu", "Relu"), ("s", "add", "Add"), ("total", "sum", "ReduceSum"),
        ("y", "if", "If")]
    assert infos[1].inputs == ("r", "k2")


def test_unnamed_nodes_get_op_and_index(tmp_path: Path) -> None:
    model = onnx.load(str(mixed_model(tmp_path / "mixed.onnx")))
    for node in model.graph.node:
        node.name = ""
    assert [i.node for i in float_tensors(model)] == ["Relu#0", "Add#3", "ReduceSum#4", "If#6"]


def test_exposed_values_are_the_real_intermediates(tmp_path: Path) -> None:
    path = mixed_model(tmp_path / "mixed.onnx")
    model = onnx.load(str(path))
    exposed = save_exposed(model, ["r", "s", "total"], tmp_path / "exposed.onnx")
    x = np.array([[-1, 2, 3], [4, -5, 6]], np.float32)
    (got,) = list(run_samples(exposed, [{"x": x}], ["r", "s", "total", "y", "nope"]))
    assert set(got) == {"r", "s", "total", "y"}
    np.testing.assert_array_equal(got["r"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["s"], np.maximum(x, 0) + 1)
    assert got["total"] == pytest.approx(float(np.sum(np.maximum(x, 0) + 1)))
    np.testing.assert_array_equal(got["y"], -np.maximum(x, 0))       # the If's then branch
    # the original outputs are kept, the original model is untouched
    assert [o.name for o in expose(model, ["r"]).graph.output] == ["y", "shape", "r"]
    assert [o.name for o in model.graph.output] == ["y", "shape"]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp

    folder = tmp_path_factory.mktemp("q")
    model = collapse_model(folder / "collapse.onnx")
    return quantize_for_htp(model, folder / "collapse.qdq.onnx", collapse_samples(4, seed=1),
                            QuantSettings()).model


def test_qdq_mapping_follows_the_graph(quantized: Path) -> None:
    folded = float_model_of(quantized)
    assert folded is not None and folded.name == "collapse.float.onnx"
    order = float_tensors(onnx.load(str(folded)))
    qmodel = onnx.load(str(quantized))
    names = quantized_names(qmodel, order)
    producer = {o: n for n in qmodel.graph.node for o in n.output}
    # every mapped intermediate is a DequantizeLinear's output fed by a QuantizeLinear of T
    for t, q in names.names.items():
        dq = producer[q]
        assert dq.op_type == "DequantizeLinear"
        assert producer[dq.input[0]].op_type == "QuantizeLinear"
        if q != t:
            assert producer[dq.input[0]].input[0] == t
    assert names.names["logits"] == "logits"        # the graph output is the DQ's output
    assert names.producers["logits"] == ("fc", "Gemm")
    # onnxruntime's quantizer fuses each Relu into the Conv before it
    assert COLLAPSE_LAYER in names.missing and names.fused[COLLAPSE_LAYER] == (COLLAPSE_NODE,
                                                                              "Conv")
    aligned = {i.tensor: i for i in align(order, names)}
    assert (aligned["b_relu"].node, aligned["b_relu"].op_type) == (COLLAPSE_NODE, "Conv")
    assert "fused into Conv 'conv_b'" in aligned["b_relu"].note
    assert aligned[COLLAPSE_LAYER].note.startswith("not in the quantized model")


def test_mapped_values_sit_on_the_quantization_grid(quantized: Path, tmp_path: Path) -> None:
    qmodel = onnx.load(str(quantized))
    names = quantized_names(qmodel, float_tensors(onnx.load(str(float_model_of(quantized)))))
    q = names.names["b_relu"]
    dq = next(n for n in qmodel.graph.node if q in n.output)
    inits = {i.name: numpy_helper.to_array(i) for i in qmodel.graph.initializer}
    scale, zero = float(inits[dq.input[1]]), float(inits[dq.input[2]])
    d = names.dequant["b_relu"]
    path = save_exposed(qmodel, [q, d.source], tmp_path / "q.onnx")
    (got,) = list(run_samples(path, collapse_samples(1, seed=3), [q, d.source]))
    steps = got[q] / scale + zero
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-2)
    # the sweep's shortcut: the integer tensor dequantized here equals onnxruntime's
    assert got[d.source].dtype.kind == "u"
    np.testing.assert_allclose(d.apply(got[d.source]), got[q], rtol=1e-6, atol=1e-6 * scale)


def test_sweep_names_the_collapsed_layer(quantized: Path, tmp_path: Path) -> None:
    res = sweep_qdq_cpu(float_model_of(quantized), quantized, collapse_samples(2, seed=2),
                        {"cosine": 0.99}, tmp_path / "work")
    rep = res.report
    assert rep.first is not None
    assert (rep.first.tensor, rep.first.node) == ("b_relu", COLLAPSE_NODE)
    assert rep.first.metric == "worst_channel_cosine"
    assert [m.tensor for m in rep.layers] == [i.tensor for i in res.order]
    before = [m for m in rep.layers if m.index < rep.first.index and m.cosine is not None]
    assert before and all(not m.crosses for m in before)
    assert rep.jumps[0].tensor == "b_relu"
    assert res.samples == 2 and res.run_s > 0


def test_bound_outputs_give_each_samples_own_values(quantized: Path, tmp_path: Path) -> None:
    """The sweep's reused output arrays: every sample's values are its own (the same
    as a plain run), and onnxruntime writes every sample into the arrays of its first
    run (nothing allocated per sample, no second copy of each tensor)."""
    qmodel = onnx.load(str(quantized))
    names = quantized_names(qmodel, float_tensors(onnx.load(str(float_model_of(quantized)))))
    wanted = sorted({d.source for d in names.dequant.values()} | set(names.names.values()))
    path = save_exposed(qmodel, wanted, tmp_path / "q.onnx")
    samples = collapse_samples(3, seed=5)
    plain = list(run_samples(path, samples, wanted))
    bound = BoundOutputs(cpu_session(path), wanted)
    seen = []
    for feeds, expected in zip(samples, plain, strict=True):
        got = bound.run(feeds)
        seen.append([id(a) for a in got])
        for name, value in zip(wanted, got, strict=True):
            np.testing.assert_array_equal(value, expected[name])
    assert seen[0] == seen[1] == seen[2]
    assert any(not np.array_equal(plain[0][n], plain[1][n]) for n in wanted)


def test_models_side_by_side_give_the_same_report(quantized: Path, tmp_path: Path) -> None:
    """With 2+ cores the sweep runs the QDQ model in a thread beside the float model:
    the same report as one after the other; a run's error reaches the caller."""
    reports = []
    for side_by_side in (False, True):
        sweep = Sweep(float_model_of(quantized), quantized, tmp_path / str(side_by_side))
        sweep.side_by_side = side_by_side
        for feeds in collapse_samples(3, seed=7):
            sweep.add(feeds)
        reports.append(sweep.report({"cosine": 0.99}))
    assert reports[0].layers == reports[1].layers and reports[0].first == reports[1].first
    assert reports[1].first is not None and reports[1].first.tensor == "b_relu"
    with pytest.raises(Exception, match=r"(?i)input"):
        sweep.add({"not_an_input": np.zeros((1, 4), np.float32)})
