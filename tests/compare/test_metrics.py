"""Streaming metrics against the plain numpy reference implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qnn_ci.compare.metrics import (
    MetricsAccumulator,
    OutputMetrics,
    compute_metrics,
    decade_histogram,
)
from tests.compare.conftest import reference_metrics

METRICS = ("cosine", "max_abs", "mean_abs", "snr", "psnr")


def assert_matches(m: OutputMetrics, ref: np.ndarray, test: np.ndarray,
                   step: float | None = None) -> None:
    want = reference_metrics(ref, test, step)
    assert m.finite == want["finite"]
    assert m.ref_peak == pytest.approx(want["peak"], rel=1e-12)
    for name in METRICS:
        got, exp = m.value(name), want[name]
        if exp is None:
            assert got is None, name
        elif math.isinf(exp):
            assert got == exp, name
        else:
            assert got == pytest.approx(exp, rel=1e-9, abs=1e-12), name


@pytest.mark.parametrize("n", [1, 2, 999, 10_007])
@pytest.mark.parametrize("chunk", [1, 7, 1000, 1 << 20])
def test_random_data_matches_reference_at_any_chunk(rng, n, chunk):
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + 0.05 * rng.standard_normal(n)).astype(np.float32)
    assert_matches(compute_metrics(ref, test, chunk=chunk), ref, test)


def test_chunk_size_does_not_change_results(rng):
    ref = rng.standard_normal(50_001).astype(np.float32)
    test = (ref * 0.9 + 0.1).astype(np.float32)
    a = compute_metrics(ref, test, chunk=4_096, sample_target=1_000)
    b = compute_metrics(ref, test, chunk=50_001, sample_target=1_000)
    for name in METRICS:
        assert a.value(name) == pytest.approx(b.value(name), rel=1e-12)
    # The |err| sample is a global stride, independent of chunking.
    assert a.quantiles == b.quantiles
    assert a.histogram == b.histogram
    assert a.sampled and a.sample_size == len(range(0, 50_001, 51))


def test_identical_outputs_are_perfect(rng):
    ref = rng.standard_normal(1000).astype(np.float32)
    m = compute_metrics(ref, ref.copy(), chunk=33)
    assert m.cosine == pytest.approx(1.0)
    assert m.max_abs == 0.0 and m.mean_abs == 0.0
    assert m.snr == math.inf and m.psnr == math.inf
    assert [(b.low, b.high, b.count) for b in m.histogram] == [(0.0, 0.0, 1000)]


def test_all_zero_reference_is_flagged_and_relative_metrics_dropped():
    ref = np.zeros(1001, np.float32)
    test = np.full(1001, 1e-3, np.float32)
    m = compute_metrics(ref, test, chunk=100)
    assert m.reference_near_zero
    assert m.cosine is None and m.snr is None and m.psnr is None
    assert m.max_abs == pytest.approx(1e-3) and m.mean_abs == pytest.approx(1e-3)


# The near-zero rule is relative (qnn_ci.compare.resolution): the reference's peak
# against the output's quantization step, its dtype's step, and the test's peak.
SIGMOID_STEP_16 = 1 / 65536      # the fixed output step of a W8A16 Sigmoid/Softmax


def _detector_like(rng: np.random.Generator, n: int = 20_000) -> np.ndarray:
    """A probability map that is essentially zero everywhere, peaking at 6.8e-6:
    the PP-OCR detector's fp32 output on uniform-random input."""
    ref = (6.8e-6 * rng.random(n) ** 6).astype(np.float32)
    ref[n // 3] = np.float32(6.8e-6)
    return ref


def test_detector_case_reference_at_6_8e_6_is_near_zero_against_its_quantization_step(rng):
    ref = _detector_like(rng)
    # The HTP's answer: the same map on the W8A16 output grid (one step 1.5e-5 > the
    # reference's peak) ...
    htp = (np.round(ref / SIGMOID_STEP_16) * SIGMOID_STEP_16).astype(np.float32)
    # ... or noise of the reference's own size (the reviewer's "cosine 0.7498").
    noisy = (ref + 1.3e-6 * rng.standard_normal(len(ref))).astype(np.float32)
    for test in (htp, noisy):
        blind = compute_metrics(ref, test, chunk=4096)
        assert not blind.reference_near_zero and blind.cosine < 0.9   # fails on noise
        m = compute_metrics(ref, test, chunk=4096, resolution=SIGMOID_STEP_16)
        assert m.reference_near_zero
        assert m.cosine is None and m.snr is None and m.psnr is None
        assert m.max_abs is not None and m.resolution == SIGMOID_STEP_16
        assert m.near_zero_reason == ("near zero everywhere (max |ref| 6.8e-06 is within 4 "
                                      "quantization steps of zero (step 1.526e-05))")
        assert_matches(m, ref, test, step=SIGMOID_STEP_16)


def test_a_small_genuine_signal_is_not_near_zero(rng):
    """A 1e-7-scale output compared with a 1e-7-scale test is a real comparison
    (the old fixed floor of 1e-6 flagged it)."""
    ref = (1e-7 * rng.standard_normal(5000)).astype(np.float32)
    close = (ref * (1 + 0.01 * rng.standard_normal(5000))).astype(np.float32)
    m = compute_metrics(ref, close, chunk=999)
    assert m.ref_peak < 1e-6 and not m.reference_near_zero and m.near_zero_reason == ""
    assert m.cosine > 0.999
    assert_matches(m, ref, close)
    # A broken test of the same scale is a plain cosine failure, not excused as noise.
    broken = (1e-7 * rng.standard_normal(5000)).astype(np.float32)
    bad = compute_metrics(ref, broken)
    assert not bad.reference_near_zero and abs(bad.cosine) < 0.1
    # With its quantization step known: many steps above zero, still judged.
    on_grid = compute_metrics(ref, close, resolution=float(np.abs(ref).max()) / 200)
    assert not on_grid.reference_near_zero and on_grid.cosine > 0.999


def test_near_zero_boundary_is_four_steps():
    step = 1e-3
    at = np.array([0.0, 4 * step, 2 * step])
    above = np.array([0.0, 4.01 * step, 2 * step])
    assert compute_metrics(at, at.copy(), resolution=step).reference_near_zero
    m = compute_metrics(above, above.copy(), resolution=step)
    assert not m.reference_near_zero and m.cosine == pytest.approx(1.0)


def test_reference_tiny_next_to_the_test_is_near_zero(rng):
    """A test 10^4 times the reference: cosine alone would pass the scaled copy."""
    x = rng.standard_normal(1000)
    m = compute_metrics(1e-4 * x, x)
    assert m.reference_near_zero and m.cosine is None
    assert "at most 0.1% of the test's peak" in m.near_zero_reason
    assert m.test_peak == pytest.approx(np.abs(x).max())
    # 100 times is still a comparison (SNR says how far off).
    m2 = compute_metrics(1e-2 * x, x)
    assert not m2.reference_near_zero and m2.cosine == pytest.approx(1.0)
    assert m2.snr == pytest.approx(10 * np.log10(1e-4 / (1 - 1e-2) ** 2), rel=1e-6)


def test_integer_outputs_use_their_own_step():
    """Native (integer) outputs: a reference within 4 counts of zero is near zero."""
    low = np.array([0, 3, 1, 0], np.uint8)
    assert compute_metrics(low, np.array([1, 0, 2, 1], np.uint8)).reference_near_zero
    assert "dtype uint8" in compute_metrics(low, low.copy()).near_zero_reason
    high = np.array([0, 9, 5, 2], np.uint8)
    assert not compute_metrics(high, high.copy()).reference_near_zero


def test_all_zero_test_output_scores_cosine_zero(rng):
    ref = rng.standard_normal(100).astype(np.float32)
    m = compute_metrics(ref, np.zeros(100, np.float32))
    assert m.cosine == 0.0
    assert m.snr == pytest.approx(0.0)
    assert_matches(m, ref, np.zeros(100, np.float32))


def test_constant_outputs(rng):
    ref = np.full(777, 3.0, np.float32)
    test = np.full(777, 3.5, np.float32)
    m = compute_metrics(ref, test, chunk=100)
    assert m.cosine == pytest.approx(1.0)       # parallel vectors: cosine cannot see offsets
    assert m.max_abs == pytest.approx(0.5)
    assert_matches(m, ref, test)


def test_negated_output_has_cosine_minus_one(rng):
    ref = rng.standard_normal(64)
    m = compute_metrics(ref, -ref, chunk=5)
    assert m.cosine == pytest.approx(-1.0)


def test_huge_float32_values_do_not_overflow(rng):
    ref = (rng.choice([-1, 1], 4097) * 3.0e38).astype(np.float32)
    test = (ref * np.float32(0.999)).astype(np.float32)
    m = compute_metrics(ref, test, chunk=1000)
    assert m.nonfinite == 0
    assert m.cosine == pytest.approx(1.0)
    assert_matches(m, ref, test)
    assert math.isfinite(m.snr) and math.isfinite(m.psnr)


def test_nan_and_inf_are_counted_and_excluded(rng):
    ref = rng.standard_normal(5003).astype(np.float32)
    test = (ref + 0.01).astype(np.float32)
    test[[0, 17, 5002]] = np.nan
    test[100] = np.inf
    ref[2000] = -np.inf
    test[2000] = -np.inf          # the same -inf on both sides: agreement
    ref[3000] = np.nan            # NaN only in the reference: disagreement
    m = compute_metrics(ref, test, chunk=1000)
    assert (m.test_nan, m.test_inf, m.ref_nan, m.ref_inf) == (3, 2, 1, 1)
    assert m.nonfinite_mismatch == 5
    assert m.finite == 5003 - 6
    assert_matches(m, ref, test)


def test_nan_everywhere_leaves_nothing_to_measure():
    ref = np.full(10, np.nan, np.float32)
    m = compute_metrics(ref, ref.copy(), chunk=3)
    assert m.finite == 0 and m.nonfinite_mismatch == 0 and m.ref_nan == 10
    assert m.cosine is None and m.max_abs is None and not m.reference_near_zero


def test_integer_and_half_inputs_are_compared_as_values(rng):
    ref = rng.integers(0, 255, 1000).astype(np.uint8)
    test = np.clip(ref.astype(np.int32) + rng.integers(-2, 3, 1000), 0, 255).astype(np.uint8)
    assert_matches(compute_metrics(ref, test, chunk=97), ref, test)
    half = rng.standard_normal(999).astype(np.float16)
    assert_matches(compute_metrics(half, half * np.float16(1.01), chunk=100), half,
                   half * np.float16(1.01))


def test_multi_dimensional_inputs_are_read_flat(rng):
    ref = rng.standard_normal((3, 5, 7))
    test = ref + 0.1
    assert_matches(compute_metrics(ref, test, chunk=8), ref, test)


def test_length_mismatch_is_a_programming_error():
    with pytest.raises(ValueError, match="11"):
        compute_metrics(np.zeros(10), np.zeros(11))


def test_accumulator_requires_the_announced_total():
    acc = MetricsAccumulator(10)
    acc.update(np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="expected 10"):
        acc.result()


def test_quantiles_and_histogram_match_numpy_on_unsampled_data(rng):
    ref = rng.standard_normal(20_000)
    test = ref + rng.standard_normal(20_000) * 10.0 ** rng.integers(-6, 0, 20_000)
    m = compute_metrics(ref, test, chunk=3_000)
    err = np.abs(test - ref)
    assert not m.sampled and m.sample_size == 20_000
    assert m.quantiles["p50"] == pytest.approx(np.quantile(err, 0.5))
    assert m.quantiles["p99"] == pytest.approx(np.quantile(err, 0.99))
    counts = {(b.low, b.high): b.count for b in m.histogram}
    assert sum(counts.values()) == 20_000
    for (low, high), count in counts.items():
        if low > 0:
            assert count == np.count_nonzero((err >= low) & (err < high)), (low, high)


def test_decade_histogram_folds_small_errors_into_one_bucket():
    err = np.array([0.0, 0.0, 1e-12, 5e-3, 0.5, 0.7, 3.0])
    buckets = [(b.low, b.high, b.count) for b in decade_histogram(err, decades=3)]
    assert buckets == [(0.0, 0.0, 2), (0.0, 0.01, 2), (0.1, 1.0, 2), (1.0, 10.0, 1)]


def test_to_dict_writes_non_finite_numbers_as_strings(rng):
    import json

    ref = rng.standard_normal(10)
    d = compute_metrics(ref, ref.copy()).to_dict()
    text = json.dumps(d, allow_nan=False)
    assert '"snr": "inf"' in text and d["cosine"] == pytest.approx(1.0)
