"""The float32 pass (qnn_ci.compare.fold): BLAS dots over float32 blocks, held to
the float64 reference and to the exact pass. ``float32_from=0`` sends outputs of
any size through it (by default only outputs of 4 Mi elements and more take it)."""

from __future__ import annotations

import numpy as np
import pytest

from qnn_ci.compare import blas, fold
from qnn_ci.compare.metrics import FLOAT32_FROM, MetricsAccumulator, compute_metrics
from tests.compare.conftest import reference_metrics

EXACT = 1 << 62                     # float32_from that keeps every output on the exact pass
REL = 1e-6                          # what the float32 pass promises for the sums' metrics


@pytest.fixture(autouse=True, params=["openblas", "numpy"])
def reductions(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs twice: Σ|e| and the maxima from numpy's OpenBLAS, and
    from numpy's own passes (what a numpy built on another BLAS does)."""
    if request.param == "numpy":
        monkeypatch.setenv(blas.ENV_OFF, "1")
        assert blas.kernels() is None
    else:
        monkeypatch.delenv(blas.ENV_OFF, raising=False)
        if blas.kernels() is None:
            pytest.skip("numpy is not built with OpenBLAS")
    return str(request.param)


def assert_close(m, ref: np.ndarray, test: np.ndarray) -> None:
    want = reference_metrics(ref, test)
    assert m.finite == want["finite"]
    assert m.ref_peak == want["peak"]                  # maxima are exact
    assert m.cosine == pytest.approx(want["cosine"], abs=REL)
    for name in ("snr", "psnr", "mean_abs"):
        assert m.value(name) == pytest.approx(want[name], rel=REL), name
    # max |float32(t - r)|: the exact |t - r| rounded to float32.
    assert m.max_abs == pytest.approx(want["max_abs"], rel=2.0 ** -24)


@pytest.mark.parametrize("n", [1, 5, fold.ROW - 1, fold.ROW + 3, fold.BLOCK,
                               3 * fold.BLOCK + 4097])
def test_matches_the_float64_reference_at_any_length(rng, n):
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + 0.02 * rng.standard_normal(n)).astype(np.float32)
    assert_close(compute_metrics(ref, test, float32_from=0), ref, test)


@pytest.mark.parametrize("scale", [1e-12, 1e-3, 1.0, 1e6, 1e15])
def test_matches_the_float64_reference_at_any_scale(rng, scale):
    n = 2 * fold.BLOCK + 11
    ref = (scale * rng.standard_normal(n)).astype(np.float32)
    ref[: fold.BLOCK] = 0.0                       # a whole block of zeros, as a ReLU map has
    test = (ref + scale * 1e-3 * rng.standard_normal(n)).astype(np.float32)
    assert_close(compute_metrics(ref, test, float32_from=0), ref, test)


def test_cosine_error_shrinks_with_one_minus_cosine(rng):
    """Σrt is derived from Σr², Σt² and Σe²: a near-identical test is graded as
    finely as the float64 reference grades it."""
    n = 5 * fold.BLOCK
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + 1e-3 * rng.standard_normal(n)).astype(np.float32)
    want = reference_metrics(ref, test)["cosine"]
    got = compute_metrics(ref, test, float32_from=0).cosine
    assert abs(got - want) < 1e-3 * (1.0 - want)


def test_quantiles_histogram_peaks_and_max_equal_the_exact_pass(rng):
    n = 6 * fold.BLOCK + 123
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + rng.standard_normal(n) * 10.0 ** rng.integers(-6, 0, n)).astype(np.float32)
    fast = compute_metrics(ref, test, float32_from=0, sample_target=50_000)
    exact = compute_metrics(ref, test, float32_from=EXACT, sample_target=50_000)
    assert fast.sampled and fast.sample_size == exact.sample_size
    assert fast.quantiles == exact.quantiles
    assert fast.histogram == exact.histogram
    assert (fast.ref_peak, fast.test_peak) == (exact.ref_peak, exact.test_peak)
    assert fast.max_abs == np.float32(exact.max_abs)


def _rounds_down(y: np.float32) -> np.float32:
    """A positive float32 x below y with fl(y - x) + x < y: |r| + |e| undershoots |t|."""
    for k in range(1, 10_000):
        x = np.float32(0.3 + k * 1e-4)
        if float(np.float32(y - x)) + float(x) < float(y):
            return x
    raise AssertionError("no such x")


def test_the_test_peak_is_exact_when_it_sits_where_the_reference_is_small(rng):
    """The test's peak is only looked for in blocks where |r| + |e| could beat the
    peak so far; e's float32 rounding must not hide it."""
    n = 4 * fold.BLOCK
    ref = rng.standard_normal(n).astype(np.float32)
    ref[2 * fold.BLOCK:3 * fold.BLOCK] *= np.float32(0.01)  # a block where |r| stays small
    test = ref.copy()
    y = np.float32(1000.0)
    test[5] = ref[5] = np.nextafter(y, np.float32(0))      # the peak so far: just below y
    i = 2 * fold.BLOCK + 9
    ref[i], test[i] = _rounds_down(y), y                    # |r| + |e| a little under y
    test[3 * fold.BLOCK + 17] = np.float32(-700.0)          # large, but not the peak
    m = compute_metrics(ref, test, float32_from=0)
    assert m.test_peak == 1000.0 and m.ref_peak == float(np.abs(ref).max())
    assert_close(m, ref, test)


def test_nan_and_inf_blocks_are_counted_as_the_exact_pass_counts_them(rng):
    n = 3 * fold.BLOCK
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + 0.01).astype(np.float32)
    test[[5, fold.BLOCK + 1, n - 1]] = np.nan
    test[2 * fold.BLOCK] = np.inf
    ref[7] = -np.inf
    test[7] = -np.inf
    fast = compute_metrics(ref, test, float32_from=0)
    exact = compute_metrics(ref, test, float32_from=EXACT)
    for key in ("finite", "ref_nan", "ref_inf", "test_nan", "test_inf", "nonfinite_mismatch",
                "sample_size", "ref_peak", "test_peak"):
        assert getattr(fast, key) == getattr(exact, key), key
    assert (fast.test_nan, fast.test_inf, fast.ref_inf, fast.nonfinite_mismatch) == (3, 2, 1, 4)
    assert_close(fast, ref, test)


def test_float32_overflow_and_underflow_fall_back_to_exact_sums(rng):
    """Squares beyond float32's range (|x| > 1.8e19) or below its normal range
    (|x| < 1e-19) are not summed in float32: those blocks take the exact pass."""
    n = 2 * fold.BLOCK
    for scale in (3.0e38, 1e19, 1e-25, 1e-40):
        ref = (scale * rng.choice([-1.0, 1.0], n)).astype(np.float32)
        test = (ref * np.float32(0.999)).astype(np.float32)
        m = compute_metrics(ref, test, float32_from=0)
        assert m.nonfinite == 0
        want = reference_metrics(ref, test)
        for name in ("cosine", "snr", "psnr", "max_abs", "mean_abs"):
            got, exp = m.value(name), want[name]
            assert (got is None) == (exp is None), (scale, name)
            if exp is not None:
                assert got == pytest.approx(exp, rel=1e-9), (scale, name)


def test_identical_and_zero_outputs(rng):
    n = 2 * fold.BLOCK + 1
    ref = rng.standard_normal(n).astype(np.float32)
    same = compute_metrics(ref, ref.copy(), float32_from=0)
    assert same.cosine == pytest.approx(1.0, abs=1e-15)
    assert same.snr == np.inf and same.max_abs == 0.0
    assert same.histogram[0].count == same.sample_size
    zero = compute_metrics(np.zeros(n, np.float32), ref, float32_from=0)
    assert zero.reference_near_zero and zero.cosine is None and zero.ref_peak == 0.0
    assert zero.test_peak == float(np.abs(ref).max())


def test_whole_block_steps_give_identical_sums(rng):
    """Chunks that are whole blocks leave the block boundaries where they were:
    the float64 totals are the same bit for bit."""
    n = 8 * fold.BLOCK + 77
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + 0.1 * rng.standard_normal(n)).astype(np.float32)
    a = compute_metrics(ref, test, float32_from=0, chunk=fold.BLOCK)
    b = compute_metrics(ref, test, float32_from=0, chunk=4 * fold.BLOCK)
    assert a.to_dict() == b.to_dict()


def test_only_float32_pairs_of_large_outputs_take_the_float32_pass(rng):
    """float64 / float16 / integer data and outputs below the threshold are summed
    exactly: they match the float64 reference to 1e-12."""
    n = 2 * fold.BLOCK
    ref = rng.standard_normal(n)
    test = ref + 0.05 * rng.standard_normal(n)
    pairs = [(ref, test), (ref.astype(np.float16), test.astype(np.float16)),
             (ref.astype(np.float32), test)]
    for r, t in pairs:
        m = compute_metrics(r, t, float32_from=0)
        assert m.cosine == pytest.approx(reference_metrics(r, t)["cosine"], rel=1e-12)
    r32, t32 = ref.astype(np.float32), test.astype(np.float32)
    below = compute_metrics(r32, t32)                  # n < FLOAT32_FROM: exact
    assert n < FLOAT32_FROM
    assert below.mean_abs == pytest.approx(reference_metrics(r32, t32)["mean_abs"], rel=1e-12)


def test_accumulator_fed_in_uneven_chunks(rng):
    n = 3 * fold.BLOCK + 999
    ref = rng.standard_normal(n).astype(np.float32)
    test = (ref + 0.03 * rng.standard_normal(n)).astype(np.float32)
    acc = MetricsAccumulator(n, float32_from=0)
    for start, stop in ((0, 10), (10, fold.BLOCK + 3), (fold.BLOCK + 3, n)):
        acc.update(ref[start:stop], test[start:stop])
    assert_close(acc.result(), ref, test)


def test_both_row_dot_kernels_agree(rng):
    a = rng.standard_normal((3, fold.ROW)).astype(np.float32)
    b = rng.standard_normal((3, fold.ROW)).astype(np.float32)
    for other, want in ((b, (a.astype(np.float64) * b).sum(axis=1)),
                        (b[1], (a.astype(np.float64) * b[1]).sum(axis=1))):   # one row
        one, two = np.empty(3, np.float32), np.empty(3, np.float32)
        fold._matmul_rows(a, other, one)
        fold._vecdot_rows(a, other, two)
        np.testing.assert_allclose(one, want, rtol=1e-4)
        np.testing.assert_allclose(two, want, rtol=1e-4)


def test_strided_inputs_take_numpy_passes_to_the_same_numbers(rng):
    """OpenBLAS is handed contiguous blocks only; a strided view is folded with numpy."""
    n = 2 * fold.BLOCK + 5
    ref = rng.standard_normal(2 * n).astype(np.float32)[::2]
    test = (ref + 0.01 * rng.standard_normal(n)).astype(np.float32)[::-1][::-1]
    assert not ref.flags.c_contiguous
    assert_close(compute_metrics(ref, test, float32_from=0), ref, test)
