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


def assert_matches(m: OutputMetrics, ref: np.ndarray, test: np.ndarray) -> None:
    want = reference_metrics(ref, test)
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


def test_tiny_but_nonzero_reference_is_near_zero_and_just_above_is_not():
    near = compute_metrics(np.full(10, 1e-6, np.float64), np.zeros(10))
    assert near.reference_near_zero
    above = compute_metrics(np.full(10, 2e-6, np.float64), np.full(10, 2e-6))
    assert not above.reference_near_zero and above.cosine == pytest.approx(1.0)


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
