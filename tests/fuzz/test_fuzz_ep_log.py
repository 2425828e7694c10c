"""Fuzz the QNN EP log reader and the node-name matching: any log text and any
assignment record give a result (never another exception), and the record keeps
its size, order and op types with every empty name resolved."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from qnn_ci.sim.ep import EP_NAME
from qnn_ci.sim.logparse import parse_ep_log
from qnn_ci.sim.node_names import display_names, resolve_record
from qnn_ci.sim.prepare import attribute_log

OPS = ["Relu", "Cast", "Add", "Conv", "QuantizeLinear"]
names = st.one_of(st.just(""), st.sampled_from(["Relu0", "Cast1", "Add2_2", "conv1",
                                                 "conv1_token_3", "_ort_qnn_ep_convert",
                                                 "x_ort_qnn_ep_cast", "`", "{ }"]),
                  st.text(max_size=12))
codes = st.one_of(st.integers(-5, 99999).map(str), st.text(max_size=4))
lines = st.one_of(
    st.builds(lambda n, t, c: f"[W:onnxruntime:, x.cc:1 F] QNN.backendValidateOpConfig() "
              f"failed for node `{n}` of type `{t}` with error code {c}", names, names, codes),
    st.builds(lambda es: "[E:onnxruntime:, q.cc:2 G] Unsupported nodes in QNN EP: "
              + "".join(f"{{ name: {n}, type: {t} }}" for n, t in es),
              st.lists(st.tuples(names, st.sampled_from(OPS)), max_size=4)),
    st.builds(lambda n, t: f"Validation FAILED for {n} nodes in OrtNodeUnit ({t}) :",
              st.integers(0, 9), names),
    st.builds(lambda r: f"REASON : {r}", st.text(max_size=20)),
    st.text(max_size=60),
)


@st.composite
def models(draw: st.DrawFn) -> helper.ModelProto:
    nodes = []
    for i in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["Relu", "Cast", "Add"]))
        name = draw(st.sampled_from(["", "", f"n{i}", "Relu0", "dup"]))
        ins = ["x"] if i == 0 else [f"t{i - 1}"]
        if op == "Add":
            ins = ins * 2
        kw = {"to": TensorProto.FLOAT} if op == "Cast" else {}
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=name, **kw))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1])], [])
    return helper.make_model(graph)


@given(st.lists(lines, max_size=12), models(),
       st.lists(st.tuples(st.sampled_from([EP_NAME, "CPUExecutionProvider"]),
                          st.sampled_from(["", "", "n0", "Relu0", "other"]),
                          st.sampled_from(["Relu", "Cast", "Add"])), max_size=8))
def test_any_log_and_record(log_lines: list[str], model: helper.ModelProto,
                            record: list[tuple[str, str, str]]) -> None:
    parsed = parse_ep_log("\n".join(log_lines))
    assert all(r.name.strip() for r in parsed.rejected)     # a nameless entry names nothing
    graph_nodes = dict(zip(display_names(model), (n.op_type for n in model.graph.node),
                           strict=True))
    merged, _ = attribute_log(parsed.rejected, graph_nodes, model)
    assert set(merged) <= set(graph_nodes)
    by_ep: dict[str, list[tuple[str, str]]] = {}
    for ep, name, op in record:
        by_ep.setdefault(ep, []).append((name, op))
    resolved = resolve_record(by_ep, model, set(merged), EP_NAME)
    assert set(resolved) == set(by_ep)
    for ep, entries in by_ep.items():
        got = resolved[ep]
        assert [op for _, op in got] == [op for _, op in entries]
        assert all(name for name, _ in got)
        assert [n for (n, _), (o, _) in zip(got, entries, strict=True) if o] == \
            [o for o, _ in entries if o]
