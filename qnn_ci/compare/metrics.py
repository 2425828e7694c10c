"""Streaming comparison metrics of a test output against a reference output.

Both inputs are equally long 1-D views (typically read-only ``np.memmap``s of
``.raw`` files), read once, in order, in steps of ``chunk`` elements. Pages of
a memory-mapped input are dropped from the process's resident set once their
step is done, and, with a core to spare, the next step is mapped while this one
is folded (``qnn_ci.compare.pages``): memory stays a few steps of each file
whatever its size. Each step is folded block by block into float64 sums
(``qnn_ci.compare.fold``): large float32 outputs in cache-sized float32 blocks
with BLAS dots, everything else exactly in float64.

Definitions (``r`` reference, ``t`` test, ``e = t - r``, over the positions
where both are finite):

- cosine   = Σ r·t / (‖r‖·‖t‖); 0.0 when the test is all zeros
- max_abs  = max |e|, mean_abs = Σ|e| / n
- snr      = 10·log10(Σ r² / Σ e²) dB (signal = reference); +inf when e ≡ 0
- psnr     = 10·log10(peak² / (Σ e² / n)) dB with peak = max |r|; +inf when e ≡ 0

A reference that is near zero (``qnn_ci.compare.resolution``: its peak within 4
quantization steps of zero, or of its dtype's step, or at most 0.1 % of the
test's peak) makes cosine, SNR and PSNR measure noise: they are reported as
``None``, ``reference_near_zero`` is set and ``near_zero_reason`` says why.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from qnn_ci.compare.fold import F32, Folder
from qnn_ci.compare.pages import Pager
from qnn_ci.compare.resolution import near_zero_reason

# Elements per step: 16 MiB of a float32 file. Pages are mapped ahead and dropped behind
# a step at a time; the folding works on far smaller blocks.
DEFAULT_CHUNK = 4 * 1024 * 1024
# Float32 outputs from this many elements on take the float32 pass; below it the exact
# float64 pass costs a few milliseconds at most.
FLOAT32_FROM = 4 * 1024 * 1024
SAMPLE_TARGET = 1 << 20                # |err| values kept for quantiles and the histogram
HIST_DECADES = 8                       # decades shown below the largest error's decade
QUANTILES = (0.5, 0.9, 0.99, 0.999)


@dataclass(frozen=True)
class HistogramBucket:
    """Errors with ``low <= |err| < high`` (``low == high == 0``: exact zeros;
    ``low == 0 < high``: every non-zero error below ``high``)."""

    low: float
    high: float
    count: int


@dataclass
class OutputMetrics:
    """One test output's metrics against its reference, NaN/Inf counts and error spread."""

    count: int                       # elements compared (reference length)
    finite: int                      # positions where both are finite
    cosine: float | None
    max_abs: float | None
    mean_abs: float | None
    snr: float | None                # dB
    psnr: float | None               # dB
    ref_peak: float                  # max |reference| over the finite positions
    test_peak: float = 0.0           # max |test| over the same positions
    resolution: float | None = None  # the output's quantization step, when known
    ref_nan: int = 0
    ref_inf: int = 0
    test_nan: int = 0
    test_inf: int = 0
    nonfinite_mismatch: int = 0      # positions where the two disagree about NaN/Inf
    reference_near_zero: bool = False
    near_zero_reason: str = ""       # why it is near zero (empty when it is not)
    sample_size: int = 0             # how many |err| values the quantiles/histogram saw
    sampled: bool = False            # True when that was a strided sample, not all
    quantiles: dict[str, float] = field(default_factory=dict)   # "p50" -> |err|
    histogram: list[HistogramBucket] = field(default_factory=list)

    def value(self, metric: str) -> float | None:
        return {"cosine": self.cosine, "max_abs": self.max_abs, "mean_abs": self.mean_abs,
                "snr": self.snr, "psnr": self.psnr}[metric]

    @property
    def nonfinite(self) -> int:
        return self.ref_nan + self.ref_inf + self.test_nan + self.test_inf

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("cosine", "max_abs", "mean_abs", "snr", "psnr", "ref_peak", "test_peak"):
            d[key] = json_float(d[key])
        d["quantiles"] = {k: json_float(v) for k, v in self.quantiles.items()}
        d["histogram"] = [[b.low, b.high, b.count] for b in self.histogram]
        return d


def json_float(value: float | None) -> float | str | None:
    """JSON has no inf/nan: write them as the strings "inf", "-inf", "nan"."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _flat(a: Any) -> np.ndarray:
    arr = a if isinstance(a, np.ndarray) else np.asarray(a)
    return arr if arr.ndim == 1 else arr.reshape(-1)


def iter_chunks(arrays: Sequence[Any], *, chunk: int = DEFAULT_CHUNK,
                release_pages: bool = True,
                pager_thread: bool | None = None) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield ``(start, [chunk of each array])`` over equally long 1-D arrays.
    ``release_pages``: drop the pages of memory-mapped arrays once their chunk is
    done (and, on the pager's thread, map the next chunk ahead:
    ``qnn_ci.compare.pages``); ``pager_thread`` None: when there is a core to
    spare and more than one chunk."""
    flats = [_flat(a) for a in arrays]
    n = len(flats[0])
    if any(len(f) != n for f in flats):
        raise ValueError(f"arrays differ in length: {[len(f) for f in flats]}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    # Plain views: slicing an np.memmap runs Python code (__array_finalize__) per slice.
    plain = [f.view(np.ndarray) for f in flats]
    pager = None
    if release_pages:
        pager = Pager(flats, threaded=False if n <= chunk else pager_thread)
    try:
        if pager is not None:
            pager.ahead(0, min(n, chunk))
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            if pager is not None and stop < n:
                pager.ahead(stop, min(n, stop + chunk))
            yield start, [f[start:stop] for f in plain]
            if pager is not None:
                pager.behind(start, stop)
    finally:
        if pager is not None:
            pager.close()


class MetricsAccumulator:
    """Fold chunks of (reference, test) in order; ``result()`` gives the metrics.

    ``total`` is the full length, needed up front to choose the sample stride so
    that the |err| sample is the same whatever the chunk size, and the pass:
    outputs of at least ``float32_from`` elements whose reference and test are
    both float32 are folded in float32 blocks with BLAS dots, every other chunk
    exactly in float64 (``qnn_ci.compare.fold``). ``resolution``: the output's
    quantization step when known (for the near-zero rule).
    """

    def __init__(self, total: int, *, sample_target: int = SAMPLE_TARGET,
                 resolution: float | None = None, float32_from: int = FLOAT32_FROM) -> None:
        self.total = total
        self.resolution = resolution
        self._dtypes: set[np.dtype] = set()
        self._stride = max(1, -(-total // max(1, sample_target)))
        self._fold = Folder(self._stride)
        self._float32 = total >= float32_from
        self._pos = 0

    def update(self, ref: Any, test: Any) -> None:
        ref, test = _flat(ref), _flat(test)
        n = len(ref)
        if len(test) != n:
            raise ValueError(f"chunk lengths differ: {n} vs {len(test)}")
        if n == 0:
            return
        self._dtypes.update((ref.dtype, test.dtype))
        if self._float32 and ref.dtype == F32 and test.dtype == F32:
            self._fold.float32(ref, test, self._pos)
        else:
            self._fold.exact(ref, test, self._pos)
        self._pos += n

    def result(self) -> OutputMetrics:
        if self._pos != self.total:
            raise ValueError(f"accumulated {self._pos} elements, expected {self.total}")
        f = self._fold
        n = f.finite
        reason = near_zero_reason(f.peak, f.tpeak, self.resolution, self._dtypes) if n else None
        near_zero = reason is not None
        meaningful = n > 0 and not near_zero
        cosine = snr = psnr = None
        if meaningful:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                if f.tt == 0.0:
                    cosine = 0.0
                else:
                    denom = math.sqrt(f.rr) * math.sqrt(f.tt)
                    cosine = max(-1.0, min(1.0, f.rt / denom)) if denom else 0.0
                if f.ee == 0.0:
                    snr = psnr = math.inf
                else:
                    snr = 10.0 * math.log10(f.rr / f.ee)
                    psnr = 20.0 * math.log10(f.peak) - 10.0 * math.log10(f.ee / n)
        sample = f.take_sample()
        return OutputMetrics(
            count=self.total, finite=n, cosine=cosine,
            max_abs=f.max_abs if n else None,
            mean_abs=f.sum_abs / n if n else None,
            snr=snr, psnr=psnr, ref_peak=f.peak, test_peak=f.tpeak,
            resolution=self.resolution,
            ref_nan=f.ref_nan, ref_inf=f.ref_inf, test_nan=f.test_nan, test_inf=f.test_inf,
            nonfinite_mismatch=f.mismatch, reference_near_zero=near_zero,
            near_zero_reason=reason or "",
            sample_size=len(sample), sampled=self._stride > 1,
            quantiles=quantiles(sample), histogram=decade_histogram(sample),
        )


def quantiles(sample: np.ndarray, qs: tuple[float, ...] = QUANTILES) -> dict[str, float]:
    """``{"p50": ..., ...}``: linear interpolation between the closest ranks, as
    ``np.quantile``'s default (which imports numpy.ma: ~15 ms of every start).
    The lower ranks are partitioned for lowest first, each in what lies above the
    last (numpy's own order for several ranks goes over the whole lower part again
    for each); the rank after one is the least value between it and the next."""
    n = len(sample)
    if n == 0:
        return {}
    ranks = [(n - 1) * q for q in qs]
    lows = sorted({math.floor(h) for h in ranks})
    part = np.partition(sample, lows[0])
    for prev, lo in itertools.pairwise(lows):
        part[prev + 1:].partition(lo - prev - 1)
    value = {lo: float(part[lo]) for lo in lows}
    after = {lo: float(part[lo + 1:stop + 1].min()) if lo + 1 < n else value[lo]
             for lo, stop in zip(lows, [*lows[1:], n - 1], strict=True)}
    return {_qname(q): value[lo] + (h - lo) * (after[lo] - value[lo])
            for q, h, lo in ((q, h, math.floor(h)) for q, h in zip(qs, ranks, strict=True))}


def _qname(q: float) -> str:
    return "p" + f"{q * 100:g}"


def decade_histogram(abs_err: np.ndarray, decades: int = HIST_DECADES) -> list[HistogramBucket]:
    """|err| counted per decade [10^k, 10^(k+1)), for the ``decades`` decades up to
    the largest error; smaller non-zero errors share one bucket, zeros another.
    Decades are found with log10 in the input's precision, so a value within an
    ulp of a power of ten may land in the neighbouring bucket."""
    if len(abs_err) == 0:
        return []
    buckets: list[HistogramBucket] = []
    zeros = int(np.count_nonzero(abs_err == 0))
    if zeros:
        buckets.append(HistogramBucket(0.0, 0.0, zeros))
    if zeros == len(abs_err):
        return buckets
    with np.errstate(divide="ignore"):
        exps = np.log10(abs_err)                 # zeros: -inf
    np.floor(exps, out=exps)
    top = int(exps.max())
    bottom = top - decades + 1
    # One count: index 0 gathers every error below the lowest decade, zeros included.
    np.clip(exps, bottom - 1, top, out=exps)
    exps -= bottom - 1
    counts = np.bincount(exps.astype(np.intp), minlength=decades + 1)
    below = int(counts[0]) - zeros
    if below:
        buckets.append(HistogramBucket(0.0, 10.0 ** bottom, below))
    for i, c in enumerate(counts[1:]):
        if c:
            buckets.append(HistogramBucket(10.0 ** (bottom + i), 10.0 ** (bottom + i + 1),
                                           int(c)))
    return buckets


def compute_metrics(reference: Any, test: Any, *, chunk: int = DEFAULT_CHUNK,
                    sample_target: int = SAMPLE_TARGET, release_pages: bool = True,
                    resolution: float | None = None,
                    float32_from: int = FLOAT32_FROM) -> OutputMetrics:
    """Metrics of ``test`` against ``reference`` (equally long; any shape, read flat).
    ``resolution``: the output's quantization step, when known; ``float32_from``:
    see ``MetricsAccumulator``."""
    ref, tst = _flat(reference), _flat(test)
    if len(ref) != len(tst):
        raise ValueError(f"reference has {len(ref)} elements, test {len(tst)}")
    acc = MetricsAccumulator(len(ref), sample_target=sample_target, resolution=resolution,
                             float32_from=float32_from)
    for _start, (r, t) in iter_chunks([ref, tst], chunk=chunk, release_pages=release_pages):
        acc.update(r, t)
    return acc.result()
