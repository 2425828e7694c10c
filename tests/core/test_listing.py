"""Cut lists in messages: the worst entries kept, "+N more" for the rest."""

from __future__ import annotations

from qnn_ci.shapes.report import LOOSE_SHOWN, ShapeReport, TensorShapeInfo
from qnn_ci.util.listing import cut_text, more_text, shown


def test_shown_keeps_the_worst_and_counts_the_rest() -> None:
    values = [0.9, 0.2, 0.95, 0.1, 0.5]
    kept, more = shown(values, 2, key=lambda v: v)
    assert (kept, more) == ([0.1, 0.2], 3)
    assert shown(values, 10) == (values, 0)
    assert shown(values, -1) == ([], 5)
    assert shown([], 3) == ([], 0)
    assert more_text(0) == "" and more_text(4) == " (+4 more)"
    assert cut_text(["a", "b", "c"], 2) == "a, b (+1 more)"
    assert cut_text(values, 1, key=lambda v: -v, render=lambda v: f"{v:.2f}") == "0.95 (+4 more)"


def test_the_shapes_summary_names_a_few_dynamic_inputs_and_counts_the_rest() -> None:
    report = ShapeReport(model="m.onnx")
    report.inputs = [TensorShapeInfo(f"in{i}", "float32", None) for i in range(12)]
    line = report.summary()
    named = ", ".join(f"in{i}" for i in range(LOOSE_SHOWN))
    assert f"(dynamic inputs/outputs: {named} (+{12 - LOOSE_SHOWN} more))" in line
    assert "in11" not in line
