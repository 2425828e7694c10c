"""Nodes without names: the QNN EP logs them as <op type><graph node index>; they
are matched back to the graph so the counts agree and each rejection names its
node and QNN error code. And the node count of `qnn-ci sim` equals the sim_npu
stage's on the same model (the OCR demo)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.cli import main
from qnn_ci.sim.check import check_htp
from qnn_ci.sim.ep import EP_NAME, sim_target
from qnn_ci.sim.node_names import display_names, resolve_record, unnamed_nodes
from qnn_ci.sim.prepare import prepare_for_htp
from qnn_ci.sim.quantize import QuantSettings
from tests.sim.conftest import EXAMPLES, needs_sim

CPU = "CPUExecutionProvider"


def unnamed_fp16_graph(path: Path) -> Path:
    """x -> Relu -> Cast(f16) -> Add -> Cast(f32) -> Relu -> y, no node named: on an
    HTP without FP16 (QCS6490) every one of them is refused."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Cast", ["r"], ["xh"], to=TensorProto.FLOAT16),
             helper.make_node("Add", ["xh", "xh"], ["s"]),
             helper.make_node("Cast", ["s"], ["y0"], to=TensorProto.FLOAT),
             helper.make_node("Relu", ["y0"], ["y"])]
    graph = helper.make_graph(
        nodes, "unnamed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


# -- the naming rule and the record matching, without the simulator ----------------

def test_an_unnamed_node_is_named_by_op_type_and_global_index(tmp_path: Path) -> None:
    model = onnx.load(str(unnamed_fp16_graph(tmp_path / "u.onnx")))
    model.graph.node[2].name = "add_me"
    # Global index (Cast1, Cast3), not a count per op type (Cast0, Cast1).
    assert display_names(model) == ["Relu0", "Cast1", "add_me", "Cast3", "Relu4"]
    assert unnamed_nodes(model) == {"Relu0": 0, "Cast1": 1, "Cast3": 3, "Relu4": 4}


def test_record_entries_are_matched_only_where_nothing_is_guessed(tmp_path: Path) -> None:
    model = onnx.load(str(unnamed_fp16_graph(tmp_path / "u.onnx")))
    # Every Cast off the HTP, one of two Relus off: the log says which one.
    record = {EP_NAME: [("", "Relu"), ("", "Add")],
              CPU: [("", "Cast"), ("", "Relu"), ("", "Cast")]}
    got = resolve_record(record, model, {"Relu4"}, EP_NAME)
    assert got[CPU] == [("Cast1", "Cast"), ("Relu4", "Relu"), ("Cast3", "Cast")]
    assert got[EP_NAME] == [("Relu0", "Relu"), ("Add2", "Add")]
    # The log names neither Relu: which one is off the HTP stays open.
    got = resolve_record(record, model, set(), EP_NAME)
    assert ("unnamed Relu", "Relu") in got[CPU] and ("unnamed Relu", "Relu") in got[EP_NAME]
    assert [n for n, op in got[CPU] if op == "Cast"] == ["Cast1", "Cast3"]
    # Named entries pass through.
    assert resolve_record({CPU: [("conv1", "Conv")]}, model, set(), EP_NAME) == \
        {CPU: [("conv1", "Conv")]}


# -- on the simulator ---------------------------------------------------------------

@needs_sim
def test_unnamed_float_nodes_rejected_on_qcs6490_are_counted_and_named(tmp_path: Path) -> None:
    res = prepare_for_htp(unnamed_fp16_graph(tmp_path / "u.onnx"), tmp_path / "p",
                          sim_target("QCS6490"))
    assert not res.prepared
    assert [r.name for r in res.rejected] == ["Relu0", "Cast1", "Add2", "Cast3", "Relu4"]
    assert [r.index for r in res.rejected] == [0, 1, 2, 3, 4]
    assert [r.op_type for r in res.rejected] == ["Relu", "Cast", "Add", "Cast", "Relu"]
    assert all(r.error_code == 3110 and r.ep == CPU for r in res.rejected)
    # The counts agree: every node off the HTP has its logged reason.
    assert (res.nodes_total, res.nodes_on_htp, res.nodes_rejected, res.nodes_other) == \
        (5, 0, 5, 0)
    assert res.counts_text() == "5 = 0 on HTP + 5 rejected + 0 not on HTP without a logged reason"
    assert res.log_only == []          # the diagnostic session's `Relu0_2` etc. matched too
    messages = [f.message for f in res.findings if f.check == "sim.rejected"]
    assert len(messages) == 5
    assert "node 'Cast3' (unnamed node #3) of type Cast: QNN error code 3110" in messages[3]


@needs_sim
def test_unnamed_nodes_through_check_htp(tmp_path: Path) -> None:
    """Quantized, the Add goes to the HTP; the Relus and Casts around the FP16 part
    do not. The names are indices into the QDQ model, Q/DQ nodes counted."""
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
    report = check_htp(unnamed_fp16_graph(tmp_path / "u.onnx"), tmp_path / "c",
                       sim_target("QCS6490"), [{"x": x}, {"x": -x}], QuantSettings())
    p = report.prepare
    assert p is not None and not p.prepared and p.nodes_total is not None
    qdq = onnx.load(str(report.quantize.model))
    unnamed = unnamed_nodes(qdq)
    off = {r.name for r in p.rejected}
    assert off <= set(unnamed) and len(off) == len(p.rejected) == 4
    assert {qdq.graph.node[unnamed[n]].op_type for n in off} == {"Relu", "Cast"}
    assert all(r.error_code == 3110 and r.index == unnamed[r.name] for r in p.rejected)
    assert p.nodes_on_htp + p.nodes_rejected + p.nodes_other == p.nodes_total
    assert (p.nodes_rejected, p.nodes_other) == (4, 0)
    assert report.summary_line().endswith(
        f"prepare FAILED, {p.nodes_on_htp}/{p.nodes_total} nodes on HTP, 4 rejected "
        "(QNN error 3110)")
    assert all(r.name.endswith("_ort_qnn_ep_convert") for r in p.log_only)


@needs_sim
def test_qnn_ci_sim_and_the_sim_npu_stage_count_the_same_nodes(
        cls_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The OCR demo's classifier: the stage prepares the static_shapes model, the CLI
    its own --dim pin; both now quantize a fully static model (681 nodes each; the
    CLI counted 687 when the output dim stayed symbolic)."""
    work = tmp_path / "w"
    assert main(["run", str(EXAMPLES / "qnn-ci.yaml"), "--stage", "sim_npu", "--workdir",
                 str(work)]) == 0, capsys.readouterr()
    stage = json.loads((work / "text_direction" / "sim_npu" / "sim_npu.json").read_text())
    capsys.readouterr()
    assert main(["sim", str(cls_model), "--soc", "QCS6490", "--dim", "x=1,3,48,192",
                 "--out", str(tmp_path / "cli"), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    counts = [(d["prepare"]["nodes_on_htp"], d["prepare"]["nodes_total"],
               d["prepare"]["model_nodes"]) for d in (stage, cli)]
    assert counts[0] == counts[1]
    assert counts[0][0] == counts[0][1] > 600
    assert stage["prepare"]["nodes_counted"] == cli["prepare"]["nodes_counted"]
    assert "QDQ graph" in cli["prepare"]["nodes_counted"]
    filled = [f for f in cli["findings"] if f["check"] == "sim.static_shapes"]
    assert len(filled) == 1 and filled[0]["severity"] == "info"
    assert not [f for f in stage["findings"] if f["check"] == "sim.static_shapes"]
