"""The per-layer sweep in bounded memory: tensors exposed in batches sized from
their bytes, the batch budget from the memory available (``QNN_CI_MEMORY``), the
one line that says so, and the same metrics as one batch. Real onnxruntime."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from qnn_ci.diagnose.layers import LayerMetrics
from qnn_ci.diagnose.sweep import BATCH_CAP, Batch, batch_budget, plan_batches, sweep_qdq_cpu
from qnn_ci.util.memory import MiB
from tests.diagnose.graphs import COLLAPSE_LAYER, COLLAPSE_NODE, collapse_model, collapse_samples

BOUNDS = {"cosine": 0.99}


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The collapse model quantized W8A16 per-tensor: (its float model, its QDQ model)."""
    from qnn_ci.diagnose.sweep import float_model_of
    from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp

    folder = tmp_path_factory.mktemp("collapse")
    model = collapse_model(folder / "collapse.onnx")
    q = quantize_for_htp(model, folder / "collapse.qdq.onnx", collapse_samples(4, seed=1),
                         QuantSettings())
    folded = float_model_of(q.model)
    assert folded is not None
    return folded, q.model


def _metrics(m: LayerMetrics) -> tuple[object, ...]:
    return (m.tensor, m.node, m.cosine, m.snr_db, m.max_abs, m.channel_axis,
            m.worst_channel, m.worst_channel_cosine, m.crosses, m.jump)


def _close(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, float) and isinstance(y, float):
            if not (math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) or (x == y)):
                return False
        elif x != y:
            return False
    return True


def test_batched_sweep_gives_the_one_batch_metrics(quantized: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    """A budget of 20 KB cuts the collapse model's tensors (48-96 KB per conv on the two
    sides) into 4 batches: every metric as one batch gives it, the first
    divergence at conv_b's output, the samples counted once."""
    folded, qdq = quantized
    held = collapse_samples(3, seed=9)
    lines: list[str] = []
    one = sweep_qdq_cpu(folded, qdq, held, BOUNDS, tmp_path / "one")
    many = sweep_qdq_cpu(folded, qdq, held, BOUNDS, tmp_path / "many", budget=20_000,
                         progress=lines.append)
    assert one.batches == 1 and many.batches == 4   # 3 convs alone, the small rest together
    assert one.need_bytes == many.need_bytes > 20_000 * 4
    assert many.samples == one.samples == 3
    assert many.report.compared == one.report.compared > 0
    for a, b in zip(one.report.layers, many.report.layers, strict=True):
        assert _close(_metrics(a), _metrics(b)), (a, b)
    assert one.report.first is not None and many.report.first is not None
    assert many.report.first.tensor == one.report.first.tensor == f"{COLLAPSE_LAYER}_relu"
    assert many.report.first.node == COLLAPSE_NODE         # the Relu fused into conv_b
    assert [j.tensor for j in many.report.jumps] == [j.tensor for j in one.report.jumps]
    said = [line for line in lines if "need" in line]
    assert len(said) == 1 and f"{many.batches} batches" in said[0]
    assert not list((tmp_path / "many").glob("*.onnx"))     # batch models removed once read


def test_the_budget_follows_the_memory_available(quantized: tuple[Path, Path],
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """QNN_CI_MEMORY=100K: a quarter of it per batch, the one line (progress and the
    log) naming the bytes needed, the memory available and the batches."""
    import logging

    folded, qdq = quantized
    monkeypatch.setenv("QNN_CI_MEMORY", "100K")
    lines: list[str] = []
    with caplog.at_level(logging.INFO, logger="qnn_ci.diagnose.sweep"):
        res = sweep_qdq_cpu(folded, qdq, collapse_samples(1, seed=9), BOUNDS, tmp_path,
                            progress=lines.append)
    assert res.budget_bytes == 25_600 and res.batches > 1
    said = [line for line in lines if "need" in line]
    assert len(said) == 1
    assert "100 KiB available" in said[0] and "25 KiB" in said[0], said
    assert f"the {len(res.order) - len(res.names.missing):,} tensors need" in said[0]
    assert said[0] in [r.getMessage() for r in caplog.records]
    monkeypatch.setenv("QNN_CI_MEMORY", "64G")          # plenty: one batch, nothing said
    lines.clear()
    res = sweep_qdq_cpu(folded, qdq, collapse_samples(1, seed=9), BOUNDS, tmp_path / "b",
                        progress=lines.append)
    assert res.batches == 1 and res.budget_bytes == BATCH_CAP
    assert not [line for line in lines if "need" in line]


def test_batch_budget_and_plan() -> None:
    assert batch_budget(None) == BATCH_CAP
    assert batch_budget(64 * 1024 * MiB) == BATCH_CAP
    assert batch_budget(400 * MiB) == 100 * MiB
    groups = [("q1", [("a", None)], 40), ("q2", [("b", None)], 70),
              ("q3", [("c", None), ("d", None)], 30), ("q4", [("e", None)], 200),
              ("q5", [("f", None)], 10)]
    batches = plan_batches(groups, 100)
    assert [b.q_names for b in batches] == [["q1"], ["q2", "q3"], ["q4"], ["q5"]]
    assert [b.tensors for b in batches][1] == ["b", "c", "d"]
    assert [b.nbytes for b in batches] == [40, 100, 200, 10]   # q4 alone: over the budget
    assert plan_batches([], 100) == []
    assert isinstance(batches[0], Batch)
