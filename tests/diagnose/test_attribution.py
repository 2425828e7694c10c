"""Attribution from two real comparisons (output sets written as .npy, compared by
qnn_ci.compare with real thresholds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qnn_ci.compare import compare_sets, load_output_set
from qnn_ci.diagnose.attribution import BOARD_LABELS, attribute, error_size
from qnn_ci.diagnose.model import BOTH, HTP, NONE, QUANTIZATION
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.sim.numerics import write_outputs

RNG = np.random.default_rng(5)
REF = {"logits": RNG.standard_normal(64).astype(np.float32),
       "cache": RNG.standard_normal(64).astype(np.float32)}


def at_cosine(ref: np.ndarray, cos: float, seed: int = 0) -> np.ndarray:
    """A vector whose cosine with ``ref`` is exactly ``cos`` (same norm)."""
    r = ref.astype(np.float64)
    o = np.random.default_rng(seed).standard_normal(r.shape)
    o -= (o @ r) / (r @ r) * r
    o *= np.linalg.norm(r) / np.linalg.norm(o)
    return (cos * r + np.sqrt(1 - cos * cos) * o).astype(np.float32)


def comparison(tmp_path: Path, name: str, cosines: dict[str, float],
               thresholds: Thresholds | None = None):
    ref_dir = tmp_path / "ref"
    if not ref_dir.is_dir():
        write_outputs(ref_dir, [REF])
    test = {k: at_cosine(REF[k], c) for k, c in cosines.items()}
    return compare_sets(load_output_set(ref_dir), load_output_set(write_outputs(
        tmp_path / name, [test])), thresholds or Thresholds())


def both(tmp_path: Path, sim: dict[str, float], qdq: dict[str, float],
         thresholds: Thresholds | None = None):
    return (comparison(tmp_path, "sim", sim, thresholds),
            comparison(tmp_path, "qdq", qdq, thresholds))


def test_quantization_when_the_qdq_model_is_as_bad(tmp_path: Path) -> None:
    sim, qdq = both(tmp_path, {"logits": 0.145, "cache": 1.0}, {"logits": 0.151, "cache": 1.0})
    attribution, detail = attribute(sim, qdq)
    assert attribution == QUANTIZATION
    assert detail == "QDQ on CPU worst cosine 0.151000 vs simulator 0.145000 on 'logits'"


def test_htp_when_the_qdq_model_passes(tmp_path: Path) -> None:
    sim, qdq = both(tmp_path, {"logits": 0.55, "cache": 1.0}, {"logits": 0.9999, "cache": 1.0})
    assert attribute(sim, qdq)[0] == HTP


def test_both_when_the_htp_is_clearly_worse_than_a_failing_qdq_model(tmp_path: Path) -> None:
    sim, qdq = both(tmp_path, {"logits": 0.90, "cache": 1.0}, {"logits": 0.98, "cache": 1.0})
    assert attribute(sim, qdq)[0] == BOTH


def test_quantization_when_the_qdq_model_barely_passes_near_the_htp(tmp_path: Path) -> None:
    # QDQ passes (0.991) but the HTP (0.985) is within 2x its error: quantization.
    sim, qdq = both(tmp_path, {"logits": 0.985, "cache": 1.0}, {"logits": 0.991, "cache": 1.0})
    assert attribute(sim, qdq)[0] == QUANTIZATION


def test_total_loss_on_both_sides_is_quantization(tmp_path: Path) -> None:
    # A collapsed QDQ model (cosine 0) and an HTP giving noise (-0.31): not "both".
    sim, qdq = both(tmp_path, {"logits": -0.31, "cache": 1.0}, {"logits": 0.0, "cache": 1.0})
    assert attribute(sim, qdq)[0] == QUANTIZATION


def test_none_when_nothing_failed(tmp_path: Path) -> None:
    sim, qdq = both(tmp_path, {"logits": 0.999, "cache": 0.9999}, {"logits": 0.2, "cache": 1.0})
    attribution, detail = attribute(sim, qdq)
    assert (attribution, detail) == (NONE, "nothing failed its bound")


def test_unbounded_outputs_never_count(tmp_path: Path) -> None:
    # 'cache' has no bound: far worse on the simulator only, it must not make this "both"
    # nor be named; 'logits' failed on both sides: quantization.
    only_logits = Thresholds(default={}, per_output={"logits": {"cosine": 0.99}})
    sim, qdq = both(tmp_path, {"logits": 0.5, "cache": 0.1}, {"logits": 0.52, "cache": 1.0},
                    only_logits)
    attribution, detail = attribute(sim, qdq)
    assert attribution == QUANTIZATION
    assert "on 'logits'" in detail and "cache" not in detail and "more failing" not in detail


def test_mixed_verdicts_are_both_and_the_detail_counts_the_rest(tmp_path: Path) -> None:
    sim, qdq = both(tmp_path, {"logits": 0.5, "cache": 0.2}, {"logits": 0.52, "cache": 0.9999})
    attribution, detail = attribute(sim, qdq)
    assert attribution == BOTH
    assert "on 'cache'" in detail and "+1 more failing" in detail


def test_no_reference_comparison(tmp_path: Path) -> None:
    sim = comparison(tmp_path, "sim", {"logits": 0.5, "cache": 1.0})
    attribution, detail = attribute(sim, None)
    assert attribution == NONE and "QDQ on CPU" in detail


def test_board_labels(tmp_path: Path) -> None:
    htp, cpu = both(tmp_path, {"logits": 0.5, "cache": 1.0}, {"logits": 0.9999, "cache": 1.0})
    attribution, detail = attribute(htp, cpu, labels=BOARD_LABELS)
    assert attribution == HTP
    assert detail.startswith("CPU backend worst cosine 0.999900 vs HTP backend 0.500000")


def test_max_abs_bound(tmp_path: Path) -> None:
    bound = Thresholds(default={"max_abs": 1e-3})
    ref_dir = tmp_path / "ref"
    write_outputs(ref_dir, [{"y": np.zeros(8, np.float32) + 1}])
    sim = compare_sets(load_output_set(ref_dir), load_output_set(write_outputs(
        tmp_path / "sim", [{"y": np.full(8, 1.5, np.float32)}])), bound)
    qdq = compare_sets(load_output_set(ref_dir), load_output_set(write_outputs(
        tmp_path / "qdq", [{"y": np.full(8, 1.0005, np.float32)}])), bound)
    attribution, detail = attribute(sim, qdq)
    assert attribution == HTP and "worst max_abs" in detail


@pytest.mark.parametrize(("metric", "better", "worse"), [
    ("cosine", 0.99, 0.9), ("snr", 30.0, 10.0), ("max_abs", 0.01, 0.1)])
def test_error_size_orders_values(metric: str, better: float, worse: float) -> None:
    assert error_size(metric, worse) > error_size(metric, better)
    assert error_size(metric, float("nan")) == float("inf")
    assert error_size("snr", -1e6) > 0 and error_size("snr", float("inf")) == 0.0
