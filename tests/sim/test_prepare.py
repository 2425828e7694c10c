"""Prepare on the real HTP simulator (onnxruntime-qnn) with tiny hand-built graphs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_ci.engine.results import Severity
from qnn_ci.sim.check import check_htp
from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.prepare import prepare_for_htp
from qnn_ci.sim.quantize import QuantSettings
from tests.sim.conftest import needs_sim

pytestmark = needs_sim


def _checks(findings: list) -> set[str]:
    return {f.check for f in findings if f.severity == Severity.ERROR}


def test_quantized_conv_prepares_for_qcs6490(graphs: dict[str, Path], tmp_path: Path,
                                            conv_feeds) -> None:
    soc = sim_target("QCS6490")
    report = check_htp(graphs["conv"], tmp_path, soc, conv_feeds(4), QuantSettings())
    p = report.prepare
    assert report.passed, report.findings
    # The binary says what it was built for.
    assert p is not None and p.context is not None
    assert (p.context.soc_type, p.context.arch, p.context.vtcm_size) == ("QCS6490", 68, 2 << 20)
    # Node counts: both from the session's assignment record, which counts the
    # Q/DQ nodes the quantizer added and the Transposes the EP added (NHWC).
    qdq_nodes = len(onnx.load(str(report.quantize.model)).graph.node)
    assert p.nodes_on_htp == p.nodes_total == p.by_ep["QNNExecutionProvider"]
    assert p.nodes_total > qdq_nodes > 3
    # The difference is what onnxruntime inserted or rewrote for the EP (NHWC).
    assert 0 < p.nodes_total - len(p.inserted) <= qdq_nodes
    assert any(op == "Transpose" for _, op, _ in p.inserted)
    assert set(p.by_ep) == {"QNNExecutionProvider"}
    # Artefacts: the EPContext model points at the binary next to it.
    assert p.ctx_model == tmp_path / "conv_ctx.onnx" and p.ctx_model.is_file()
    assert p.ctx_binary == tmp_path / "conv_ctx_qnn.bin"
    ctx = onnx.load(str(p.ctx_model))
    assert [n.op_type for n in ctx.graph.node] == ["EPContext"]
    # QNN JSON graph audited for FP16 (none: all quantized), op trace kept.
    assert len(p.qnn_json) == 1 and report.fp16[0]["count"] == 0
    assert report.fp16[0]["total_tensors"] > 0
    trace = json.loads(p.op_trace.read_text())
    dst = {m["dst_qnn_op_type"] for t in trace["subgraph_traces"] for m in t["op_mappings"]}
    assert "Conv2d" in dst
    assert trace["soc_traces"][0]["compilation_target"]["soc_model"] == 93


@pytest.mark.parametrize(("soc", "sim_id", "arch"), [("QCS8550", 66, 73), ("SM8850", 87, 81)])
def test_qcs8550_and_sm8850_prepare_for_their_own_ids(graphs: dict[str, Path], tmp_path: Path,
                                                      conv_feeds, soc: str, sim_id: int,
                                                      arch: int) -> None:
    """The SoC table's simulator ids for these two, read back from the binary."""
    target = sim_target(soc)
    assert target.sim_soc_id == sim_id
    report = check_htp(graphs["conv"], tmp_path, target, conv_feeds(2), QuantSettings())
    assert report.passed, report.findings
    ctx = report.prepare.context
    assert (ctx.soc_type, ctx.arch, ctx.vtcm_size) == (soc, arch, 8 << 20)


def test_fp16_graph_fails_for_qcs6490_and_names_the_nodes(graphs: dict[str, Path],
                                                          tmp_path: Path) -> None:
    res = prepare_for_htp(graphs["fp16"], tmp_path, sim_target("QCS6490"))
    assert not res.prepared and res.ctx_model is None
    by = {r.name: r for r in res.rejected}
    assert set(by) == {"cast_in", "add_h", "cast_out"}
    assert by["cast_in"].op_type == "Cast" and by["cast_in"].error_code == 3110
    assert by["add_h"].op_type == "Add" and by["add_h"].qnn_type == "ElementWiseAdd"
    messages = [f.message for f in res.findings if f.check == "sim.rejected"]
    assert any("'cast_in' of type Cast: QNN error code 3110" in m for m in messages)
    # Counts come from the diagnostic session's assignment record (fallback allowed).
    assert (res.nodes_on_htp, res.nodes_total) == (0, 3)
    assert (res.nodes_rejected, res.nodes_other, res.inserted) == (3, 0, [])
    assert "fallback to CPU EP has been explicitly disabled" in (res.error or "")


def test_quantized_fp16_graph_counts_add_up_and_ep_made_ops_join_their_node(
        graphs: dict[str, Path], tmp_path: Path) -> None:
    """Quantized, the FP16 graph gains Q/DQ nodes and a DequantizeLinear that
    onnxruntime duplicates for the EP; the EP log also names a Convert op the EP
    made while lowering `cast_in`. Rejected + on HTP + other = total, all from
    the assignment record; the Convert is reported with its node, not counted."""
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    report = check_htp(graphs["fp16"], tmp_path, sim_target("QCS6490"),
                       [{"x": x}, {"x": -x}], QuantSettings())
    p = report.prepare
    assert p is not None and not p.prepared and p.nodes_total is not None
    assert p.nodes_on_htp + p.nodes_rejected + p.nodes_other == p.nodes_total
    assert p.nodes_total == sum(p.by_ep.values())
    by = {r.name: r for r in p.rejected}
    assert set(by) == {"cast_in", "cast_out"}
    assert all(r.ep == "CPUExecutionProvider" and r.error_code == 3110 for r in by.values())
    assert len(p.rejected) == p.nodes_total - p.nodes_on_htp
    assert any(op.startswith("'cast_in_ort_qnn_ep_convert' (Convert") for op in
               by["cast_in"].ep_ops)
    assert "made for it failed too: 'cast_in_ort_qnn_ep_convert'" in by["cast_in"].describe()
    qdq_names = {n.name for n in onnx.load(str(report.quantize.model)).graph.node}
    assert p.model_nodes == len(qdq_names)
    assert p.inserted and all(name not in qdq_names for name, _, _ in p.inserted)
    assert p.nodes_total == p.model_nodes + len(p.inserted)    # nothing fused away here
    assert "inserted or rewritten by onnxruntime" in (p.origin_text() or "")
    assert report.summary_line().endswith(
        f"prepare FAILED, {p.nodes_on_htp}/{p.nodes_total} nodes on HTP, 2 rejected "
        "(QNN error 3110)")
    d = p.to_dict()
    assert (d["nodes_rejected"], d["nodes_other"]) == (2, 0) and d["log_only"] == []


def test_fp16_graph_passes_for_sm8550_and_the_audit_counts_fp16(graphs: dict[str, Path],
                                                               tmp_path: Path) -> None:
    soc = sim_target("SM8550")
    res = prepare_for_htp(graphs["fp16"], tmp_path, soc)
    assert res.prepared, res.findings
    assert (res.context.soc_type, res.context.arch) == ("SM8550", 73)
    assert res.nodes_on_htp == res.nodes_total == 3
    from qnn_ci.sdk.fp16_audit import audit_fp16, gate_fp16

    audit = audit_fp16(res.qnn_json[0])
    assert audit.count >= 1
    assert [f.severity for f in gate_fp16(audit, soc)] == [Severity.INFO]
    # The same graph dumped for SM8550 is what the gate would reject for QCS6490.
    assert {f.check for f in gate_fp16(audit, sim_target("QCS6490"))} == {"fp16.tensor"}


def test_unquantized_float_graph_fails_for_qcs6490(graphs: dict[str, Path],
                                                   tmp_path: Path) -> None:
    res = prepare_for_htp(graphs["conv"], tmp_path, sim_target("QCS6490"))
    assert not res.prepared
    assert {r.name for r in res.rejected} == {"conv1", "relu1"}
    assert all(r.error_code == 3110 for r in res.rejected)
    assert "sim.nhwc" in _checks(res.findings)     # the NHWC message, explained
    # The float graph is fine for an HTP with FP16.
    assert prepare_for_htp(graphs["conv"], tmp_path / "v73", sim_target("SM8550")).prepared


def test_dynamic_batch_is_caught_and_points_at_static_shapes(graphs: dict[str, Path],
                                                             tmp_path: Path, conv_feeds) -> None:
    report = check_htp(graphs["dyn"], tmp_path, sim_target("QCS6490"), conv_feeds(2),
                       QuantSettings())
    assert not report.passed
    dyn = [f for f in report.findings if f.check == "sim.dynamic_dim"]
    inputs = [f for f in dyn if f.severity == Severity.ERROR]
    assert [f.subject for f in inputs] == ["x"]
    assert "[N, 3, 8, 8]" in inputs[0].message and "static_shapes" in inputs[0].message
    p = report.prepare
    assert p is not None and p.nodes_on_htp == 0 and p.nodes_total == len(p.rejected) > 0
    assert (p.nodes_rejected, p.nodes_other) == (0, p.nodes_total)   # no reason logged
    # The per-node list is summed up in one finding that names the likely cause.
    rejected = [f for f in report.findings if f.check == "sim.rejected"]
    assert len(rejected) == 1 and "dynamic input dims above" in rejected[0].message


def test_a_second_prepare_in_the_same_folder_replaces_the_artefacts(
        graphs: dict[str, Path], tmp_path: Path, conv_feeds) -> None:
    soc = sim_target("SM8550")
    first = check_htp(graphs["conv"], tmp_path, soc, conv_feeds(2), QuantSettings())
    again = check_htp(graphs["conv"], tmp_path, soc, conv_feeds(2), QuantSettings())
    assert first.passed and again.passed
    assert len(list((tmp_path / "qnn_json").glob("*.json"))) == 2   # graph + tensor log


@pytest.mark.parametrize("act", [8, 16])
def test_bitwidths_reach_the_qnn_graph(graphs: dict[str, Path], tmp_path: Path, conv_feeds,
                                       act: int) -> None:
    report = check_htp(graphs["conv"], tmp_path, sim_target("QCS6490"), conv_feeds(2),
                       QuantSettings(act_bitwidth=act, weights_bitwidth=8))
    assert report.passed
    graph = json.loads(report.prepare.qnn_json[0].read_text())["graph"]
    conv = next(n for n in graph["nodes"].values() if n["type"] == "Conv2d")
    act_in, weight = (graph["tensors"][t] for t in conv["input_names"][:2])
    ufixed = {8: 0x408, 16: 0x416}
    assert act_in["data_type"] == ufixed[act]
    assert weight["data_type"] == ufixed[8]


def test_verbose_ep_log_gives_the_reason_for_a_dynamic_dim(graphs: dict[str, Path],
                                                          tmp_path: Path, conv_feeds) -> None:
    from qnn_ci.sim.quantize import quantize_for_htp

    qdq = quantize_for_htp(graphs["dyn"], tmp_path / "dyn.qdq.onnx", conv_feeds(1),
                           QuantSettings())
    res = prepare_for_htp(qdq.model, tmp_path, sim_target("QCS6490"), log_severity=0)
    reasons = [f for f in res.findings if f.check == "sim.validation"]
    assert reasons and all("Cannot get shape" in f.message for f in reasons)
    assert {f.subject for f in reasons} >= {"Conv"}


def test_fp16_on_sm8350_prepares_but_the_fp16_audit_follows_the_soc_table(
        graphs: dict[str, Path], tmp_path: Path) -> None:
    """The simulator builds FP16 for id 30; vendor docs say SM8350's HTP has none."""
    report = check_htp(graphs["fp16"], tmp_path, sim_target("SM8350"),
                       [{"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)}],
                       QuantSettings())
    assert report.prepare is not None and report.prepare.prepared
    assert not report.passed
    assert {f.check for f in report.errors()} == {"fp16.tensor"}


def test_weight_bitwidths_4_and_16_per_soc(graphs: dict[str, Path], tmp_path: Path,
                                           conv_feeds) -> None:
    """4-bit weights go signed per-channel (said so); 16-bit weights prepare for
    SM8550 (v73) but the QCS6490 (v68) HTP rejects the Conv."""
    w4 = check_htp(graphs["conv"], tmp_path / "w4", sim_target("QCS6490"), conv_feeds(2),
                   QuantSettings(weights_bitwidth=4))
    assert w4.passed, w4.findings
    assert "sim.quantize.per_channel" in {f.check for f in w4.findings}
    w16 = {soc: check_htp(graphs["conv"], tmp_path / soc, sim_target(soc), conv_feeds(2),
                          QuantSettings(weights_bitwidth=16))
           for soc in ("SM8550", "QCS6490")}
    assert w16["SM8550"].passed
    assert not w16["QCS6490"].passed
    assert {r.name for r in w16["QCS6490"].prepare.rejected} == {"conv1"}
