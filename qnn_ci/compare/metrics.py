"""Streaming comparison metrics of a test output against a reference output.

Both inputs are equally long 1-D views (typically read-only ``np.memmap``s of
``.raw`` files). They are read in chunks of ``chunk`` elements, each chunk is
cast to float64 and folded into float64 accumulators, so memory stays bounded
by a few chunk buffers whatever the file size. Pages of a memory-mapped input
are dropped from the process's resident set once their chunk is done.

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

import logging
import math
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from qnn_ci.compare.resolution import near_zero_reason

log = logging.getLogger(__name__)

# Elements per chunk: 32 MiB per float64 buffer. Three buffers and a chunk of each
# file stay well inside 300 MiB for any file size (8 Mi elements took ~290 MiB) and
# run as fast: the passes are memory-bound either way.
DEFAULT_CHUNK = 4 * 1024 * 1024
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


class _PageReleaser:
    """Drops already-read pages of a read-only ``np.memmap`` from the resident set
    (``MADV_DONTNEED``; the page cache keeps them, nothing is lost)."""

    def __init__(self, arr: np.ndarray) -> None:
        self._arr = arr
        self._mm: mmap.mmap | None = None
        self._base = 0
        mm = getattr(arr, "_mmap", None)
        if (isinstance(mm, mmap.mmap) and hasattr(mm, "madvise") and arr.ndim == 1
                and arr.flags.c_contiguous and hasattr(mmap, "MADV_DONTNEED")):
            try:
                self._base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
                self._mm = mm
            except (TypeError, ValueError):  # closed or not exportable: just don't release
                self._mm = None

    def release(self, start: int, stop: int) -> None:
        if self._mm is None:
            return
        size = self._arr.itemsize
        lo = self._arr.ctypes.data - self._base + start * size
        hi = self._arr.ctypes.data - self._base + stop * size
        lo -= lo % mmap.PAGESIZE
        hi -= hi % mmap.PAGESIZE
        if hi > lo:
            try:
                self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError) as exc:  # pragma: no cover - platform specific
                log.debug("madvise failed (%s); pages stay resident", exc)
                self._mm = None


def iter_chunks(arrays: Sequence[Any], *, chunk: int = DEFAULT_CHUNK,
                release_pages: bool = True) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield ``(start, [chunk of each array])`` over equally long 1-D arrays."""
    flats = [_flat(a) for a in arrays]
    n = len(flats[0])
    if any(len(f) != n for f in flats):
        raise ValueError(f"arrays differ in length: {[len(f) for f in flats]}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    releasers = [_PageReleaser(f) for f in flats] if release_pages else []
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        yield start, [f[start:stop] for f in flats]
        for r in releasers:
            r.release(start, stop)


class MetricsAccumulator:
    """Fold chunks of (reference, test) in order; ``result()`` gives the metrics.

    ``total`` is the full length, needed up front to choose the sample stride so
    that the |err| sample is the same whatever the chunk size. ``resolution``:
    the output's quantization step when known (for the near-zero rule).
    """

    def __init__(self, total: int, *, sample_target: int = SAMPLE_TARGET,
                 resolution: float | None = None) -> None:
        self.total = total
        self.resolution = resolution
        self._dtypes: set[np.dtype] = set()
        self._stride = max(1, -(-total // max(1, sample_target)))
        self._pos = 0
        self._finite = 0
        self._rr = self._tt = self._rt = self._ee = self._sum_abs = 0.0
        self._max_abs = 0.0
        self._peak = 0.0
        self._tpeak = 0.0
        self._ref_nan = self._ref_inf = self._test_nan = self._test_inf = 0
        self._mismatch = 0
        self._samples: list[np.ndarray] = []
        self._bufs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _buffers(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._bufs is None or len(self._bufs[0]) < n:
            self._bufs = (np.empty(n), np.empty(n), np.empty(n))
        r, t, e = self._bufs
        return r[:n], t[:n], e[:n]

    def update(self, ref: Any, test: Any) -> None:
        ref, test = _flat(ref), _flat(test)
        n = len(ref)
        if len(test) != n:
            raise ValueError(f"chunk lengths differ: {n} vs {len(test)}")
        if n == 0:
            return
        self._dtypes.update((ref.dtype, test.dtype))
        r, t, e = self._buffers(n)
        np.copyto(r, ref, casting="unsafe")
        np.copyto(t, test, casting="unsafe")
        first = (-self._pos) % self._stride
        self._pos += n
        rr = float(r @ r)
        tt = float(t @ t)
        if math.isfinite(rr) and math.isfinite(tt):
            # Sums of squares are finite only if every element is: no NaN/Inf here.
            self._fold(r, t, e, rr, tt, first)
            return
        self._update_nonfinite(r, t, e, first)

    def _fold(self, r: np.ndarray, t: np.ndarray, e: np.ndarray, rr: float, tt: float,
              first: int) -> None:
        """Accumulate one chunk of all-finite values; ``e`` is scratch of the same length."""
        self._finite += len(r)
        self._rr += rr
        self._tt += tt
        self._rt += float(r @ t)
        np.subtract(t, r, out=e)
        self._ee += float(e @ e)
        np.abs(e, out=e)
        self._sum_abs += float(e.sum())
        self._max_abs = max(self._max_abs, float(e.max()))
        self._peak = max(self._peak, float(r.max()), -float(r.min()))
        self._tpeak = max(self._tpeak, float(t.max()), -float(t.min()))
        if first < len(e):
            self._samples.append(e[first::self._stride].astype(np.float32))

    def _update_nonfinite(self, r: np.ndarray, t: np.ndarray, e: np.ndarray,
                          first: int) -> None:
        r_nan, t_nan = np.isnan(r), np.isnan(t)
        r_inf, t_inf = np.isinf(r), np.isinf(t)
        self._ref_nan += int(np.count_nonzero(r_nan))
        self._ref_inf += int(np.count_nonzero(r_inf))
        self._test_nan += int(np.count_nonzero(t_nan))
        self._test_inf += int(np.count_nonzero(t_inf))
        both = ~(r_nan | r_inf | t_nan | t_inf)
        agree = (r_nan & t_nan) | ((r_inf | t_inf) & (r == t))
        self._mismatch += int(np.count_nonzero(~both & ~agree))
        # The |err| sample keeps the global stride; positions not both finite drop out.
        picked = np.arange(first, len(r), self._stride)
        picked = picked[both[picked]]
        rs, ts = r[both], t[both]
        m = len(rs)
        if m == 0:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            # first=m: _fold takes no sample here; the finite picks are added below.
            self._fold(rs, ts, np.empty(m), float(rs @ rs), float(ts @ ts), first=m)
        if len(picked):
            self._samples.append(np.abs(t[picked] - r[picked]).astype(np.float32))

    def result(self) -> OutputMetrics:
        if self._pos != self.total:
            raise ValueError(f"accumulated {self._pos} elements, expected {self.total}")
        n = self._finite
        reason = near_zero_reason(self._peak, self._tpeak, self.resolution,
                                  self._dtypes) if n else None
        near_zero = reason is not None
        meaningful = n > 0 and not near_zero
        cosine = snr = psnr = None
        if meaningful:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                if self._tt == 0.0:
                    cosine = 0.0
                else:
                    denom = math.sqrt(self._rr) * math.sqrt(self._tt)
                    cosine = max(-1.0, min(1.0, self._rt / denom)) if denom else 0.0
                if self._ee == 0.0:
                    snr = psnr = math.inf
                else:
                    snr = 10.0 * math.log10(self._rr / self._ee)
                    psnr = 20.0 * math.log10(self._peak) - 10.0 * math.log10(self._ee / n)
        sample = np.concatenate(self._samples) if self._samples else np.empty(0, np.float32)
        self._samples = []
        self._bufs = None
        quantiles: dict[str, float] = {}
        if len(sample):
            qs = np.quantile(sample, QUANTILES)
            quantiles = {_qname(q): float(v) for q, v in zip(QUANTILES, qs, strict=True)}
        return OutputMetrics(
            count=self.total, finite=n, cosine=cosine,
            max_abs=self._max_abs if n else None,
            mean_abs=self._sum_abs / n if n else None,
            snr=snr, psnr=psnr, ref_peak=self._peak, test_peak=self._tpeak,
            resolution=self.resolution,
            ref_nan=self._ref_nan, ref_inf=self._ref_inf,
            test_nan=self._test_nan, test_inf=self._test_inf,
            nonfinite_mismatch=self._mismatch, reference_near_zero=near_zero,
            near_zero_reason=reason or "",
            sample_size=len(sample), sampled=self._stride > 1,
            quantiles=quantiles, histogram=decade_histogram(sample),
        )


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
    nonzero = abs_err[abs_err > 0]
    if len(nonzero) == 0:
        return buckets
    np.log10(nonzero, out=nonzero)
    np.floor(nonzero, out=nonzero)
    exps = nonzero.astype(np.int32)
    del nonzero
    top = int(exps.max())
    bottom = top - decades + 1
    below = int(np.count_nonzero(exps < bottom))
    if below:
        buckets.append(HistogramBucket(0.0, 10.0 ** bottom, below))
    counts = np.bincount(exps[exps >= bottom] - bottom, minlength=decades)
    for i, c in enumerate(counts):
        if c:
            buckets.append(HistogramBucket(10.0 ** (bottom + i), 10.0 ** (bottom + i + 1),
                                           int(c)))
    return buckets


def compute_metrics(reference: Any, test: Any, *, chunk: int = DEFAULT_CHUNK,
                    sample_target: int = SAMPLE_TARGET, release_pages: bool = True,
                    resolution: float | None = None) -> OutputMetrics:
    """Metrics of ``test`` against ``reference`` (equally long; any shape, read flat).
    ``resolution``: the output's quantization step, when known."""
    ref, tst = _flat(reference), _flat(test)
    if len(ref) != len(tst):
        raise ValueError(f"reference has {len(ref)} elements, test {len(tst)}")
    acc = MetricsAccumulator(len(ref), sample_target=sample_target, resolution=resolution)
    for _start, (r, t) in iter_chunks([ref, tst], chunk=chunk, release_pages=release_pages):
        acc.update(r, t)
    return acc.result()
