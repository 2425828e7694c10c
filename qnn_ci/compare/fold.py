"""Folding blocks of (reference, test) into running float64 sums: the one pass
behind ``qnn_ci.compare.metrics``.

Two ways to fold a block, chosen by the caller:

- ``exact``: any dtype. The block is cast to float64 in cache-sized pieces, so
  every product is exact and every sum is a float64 sum. NaN/Inf are counted
  and the positions where either side is not finite are left out.
- ``float32``: two float32 blocks of ``BLOCK`` elements, folded where they lie
  (in the file's pages): ``e = t - r`` in one scratch buffer, BLAS dots on
  float32 rows of ``ROW`` elements for Σr², Σt² and Σe² (one ``np.vecdot`` call
  each per block), each row's float32 sum added up in float64. Σ|e|, max |e|
  and the peaks (max |r|, max |t|) come from numpy's OpenBLAS in one pass each
  (``qnn_ci.compare.blas``); without it, from ``|e|`` in place, a dot with ones
  and max/min reductions. Σrt is not a fourth dot: it is (Σr² + Σt² - Σe²) / 2,
  the form whose error shrinks with 1 - cosine. The test's peak is only looked
  for in a block where |r| + |e| could beat the peak so far. A block whose sums
  are not finite (NaN, Inf, float32 overflow) or so small that float32 squares
  may have underflowed is folded ``exact`` instead: the fast path decides
  nothing about NaN or tiny values.

A row's float32 sum carries float32 rounding (a few 1e-8 of it); over many rows
the float64 totals land within ~1e-9 of the exact pass's (cosine, SNR, PSNR,
mean |err| on 2 x 250 M random elements). ``max_abs`` is max |float32(t - r)|,
the exact |t - r| rounded to float32, and the |err| sample holds the same
float32 values on both passes.
"""

from __future__ import annotations

import math

import numpy as np

from qnn_ci.compare.blas import Kernels, kernels

BLOCK = 1 << 18             # float32 elements per block of the float32 pass (1 MiB per input)
# Elements per BLAS dot. OpenBLAS splits a dot of more than 10000 elements across
# threads, and on a busy machine the caller then waits for a core: one dot of 64 Ki
# elements took 6 us on an idle core and 125 us under load. A block is ROW-long rows.
ROW = 8192
EXACT_BLOCK = ROW           # elements per piece of the exact pass (three 64 KiB float64 buffers)
TINY = 2.0 ** -90           # a float32 sum of squares below this may have lost digits to underflow
SLACK = 1.0 + 2.0 ** -20    # a margin on |t| <= |r| + |e| for e's float32 rounding
F32 = np.dtype(np.float32)
_MAX, _MIN = np.maximum.reduce, np.minimum.reduce


class Folder:
    """The running sums of one output, and the scratch buffers that fold blocks into them.

    ``stride``: every ``stride``-th |err| (by absolute position) is kept for the
    quantiles and the histogram.
    """

    def __init__(self, stride: int) -> None:
        self.stride = stride
        self.finite = 0
        self.rr = self.tt = self.rt = self.ee = self.sum_abs = 0.0
        self.max_abs = 0.0
        self.peak = 0.0
        self.tpeak = 0.0
        self.ref_nan = self.ref_inf = self.test_nan = self.test_inf = 0
        self.mismatch = 0
        self.samples: list[np.ndarray] = []
        self._f64: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._e32: np.ndarray | None = None
        self._ones: np.ndarray | None = None
        self._sums: np.ndarray | None = None
        self._kernels: Kernels | None = kernels()

    # --- the float32 pass ------------------------------------------------------------

    def float32(self, x: np.ndarray, y: np.ndarray, pos: int) -> None:
        """Fold float32 ``x`` (reference) and ``y`` (test), equally long, starting at
        absolute position ``pos``; blocks longer than ``BLOCK`` are split."""
        with np.errstate(over="ignore", invalid="ignore"):   # such blocks go exact
            for s in range(0, len(x), BLOCK):
                self._block32(x[s:s + BLOCK], y[s:s + BLOCK], pos + s)

    def _scratch32(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._e32 is None or self._ones is None or self._sums is None:
            self._e32 = np.empty((3, BLOCK), F32)   # e, and a padded copy of each side
            self._ones = np.ones(ROW, F32)
            self._sums = np.empty((4, BLOCK // ROW), F32)
        return self._e32, self._ones, self._sums

    def _block32(self, x: np.ndarray, y: np.ndarray, pos: int) -> None:
        k = len(x)
        scratch, ones, sums = self._scratch32()
        rows = -(-k // ROW)
        if k % ROW:                        # the last block: zeros after it change no sum
            xp, yp = scratch[1, :rows * ROW], scratch[2, :rows * ROW]
            xp[k:] = 0.0
            yp[k:] = 0.0
            xp[:k] = x
            yp[:k] = y
            x, y = xp, yp
        xr, yr = x.reshape(rows, ROW), y.reshape(rows, ROW)
        er = scratch[0, :rows * ROW].reshape(rows, ROW)
        out = sums[:, :rows]
        np.subtract(yr, xr, out=er)
        _row_dots(xr, xr, out[0])
        _row_dots(yr, yr, out[1])
        _row_dots(er, er, out[2])
        rr, tt, ee = out[:3].sum(axis=1, dtype=np.float64).tolist()
        blas = self._kernels if x.flags.c_contiguous and y.flags.c_contiguous else None
        if blas is not None:                        # one pass each, e left signed
            e = scratch[0, :rows * ROW]
            sa, me, px = blas.asum(e), blas.amax(e), blas.amax(x)
        else:
            np.abs(er, out=er)
            _row_dots(er, ones, out[3])             # Σ|e| per row (ones broadcast)
            sa = float(out[3].sum(dtype=np.float64))
            me = float(_MAX(er, axis=None))
            px = max(float(_MAX(x)), -float(_MIN(x)))
        if not rr + tt + ee + sa < math.inf:        # NaN, Inf or float32 overflow
            self.exact(x[:k], y[:k], pos)
            return
        py = -1.0                                   # not looked at: cannot raise the peak
        if tt < TINY or (px + me) * SLACK > self.tpeak:
            py = blas.amax(y) if blas is not None else max(float(_MAX(y)), -float(_MIN(y)))
        if (rr < TINY and px > 0) or (tt < TINY and py > 0) or (ee < TINY and me > 0):
            self.exact(x[:k], y[:k], pos)           # squares may have underflowed
            return
        self.finite += k
        self.rr += rr
        self.tt += tt
        self.rt += 0.5 * (rr + tt - ee)
        self.ee += ee
        self.sum_abs += sa
        self.max_abs = max(self.max_abs, me)
        self.peak = max(self.peak, px)
        self.tpeak = max(self.tpeak, py)
        first = (-pos) % self.stride
        if first < k:
            self.samples.append(np.abs(scratch[0, first:k:self.stride]))

    # --- the exact pass ----------------------------------------------------------------

    def _buffers(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._f64 is None:
            self._f64 = (np.empty(EXACT_BLOCK), np.empty(EXACT_BLOCK), np.empty(EXACT_BLOCK))
        r, t, e = self._f64
        return r[:n], t[:n], e[:n]

    def exact(self, ref: np.ndarray, test: np.ndarray, pos: int) -> None:
        """Fold ``ref`` and ``test`` (any numeric dtype, equally long) in float64,
        starting at absolute position ``pos``."""
        for s in range(0, len(ref), EXACT_BLOCK):
            stop = min(len(ref), s + EXACT_BLOCK)
            r, t, e = self._buffers(stop - s)
            np.copyto(r, ref[s:stop], casting="unsafe")
            np.copyto(t, test[s:stop], casting="unsafe")
            first = (-(pos + s)) % self.stride
            rr = float(r @ r)
            tt = float(t @ t)
            if math.isfinite(rr) and math.isfinite(tt):
                # Sums of squares are finite only if every element is: no NaN/Inf here.
                self._fold64(r, t, e, rr, tt, first)
            else:
                self._nonfinite(r, t, first)

    def _fold64(self, r: np.ndarray, t: np.ndarray, e: np.ndarray, rr: float, tt: float,
                first: int) -> None:
        """Accumulate float64 values that are all finite; ``e`` is scratch of their length."""
        self.finite += len(r)
        self.rr += rr
        self.tt += tt
        self.rt += float(r @ t)
        np.subtract(t, r, out=e)
        self.ee += float(e @ e)
        np.abs(e, out=e)
        self.sum_abs += float(e.sum())
        self.max_abs = max(self.max_abs, float(e.max()))
        self.peak = max(self.peak, float(r.max()), -float(r.min()))
        self.tpeak = max(self.tpeak, float(t.max()), -float(t.min()))
        if first < len(e):
            self.samples.append(e[first::self.stride].astype(np.float32))

    def _nonfinite(self, r: np.ndarray, t: np.ndarray, first: int) -> None:
        r_nan, t_nan = np.isnan(r), np.isnan(t)
        r_inf, t_inf = np.isinf(r), np.isinf(t)
        self.ref_nan += int(np.count_nonzero(r_nan))
        self.ref_inf += int(np.count_nonzero(r_inf))
        self.test_nan += int(np.count_nonzero(t_nan))
        self.test_inf += int(np.count_nonzero(t_inf))
        both = ~(r_nan | r_inf | t_nan | t_inf)
        agree = (r_nan & t_nan) | ((r_inf | t_inf) & (r == t))
        self.mismatch += int(np.count_nonzero(~both & ~agree))
        # The |err| sample keeps the global stride; positions not both finite drop out.
        picked = np.arange(first, len(r), self.stride)
        picked = picked[both[picked]]
        rs, ts = r[both], t[both]
        m = len(rs)
        if m == 0:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            # first=m: _fold64 takes no sample here; the finite picks are added below.
            self._fold64(rs, ts, np.empty(m), float(rs @ rs), float(ts @ ts), first=m)
        if len(picked):
            self.samples.append(np.abs(t[picked] - r[picked]).astype(np.float32))

    def take_sample(self) -> np.ndarray:
        """The |err| sample in position order (emptied: the buffers go with it)."""
        sample = np.concatenate(self.samples) if self.samples else np.empty(0, np.float32)
        self.samples = []
        self._f64 = self._e32 = self._ones = self._sums = None
        return sample


def _matmul_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[i] = a[i] . b[i]`` (``b`` one row: the same for every i) for numpy
    without ``np.vecdot`` (< 2.0)."""
    np.matmul(a[:, None, :], b[..., :, None], out=out.reshape(-1, 1, 1))


def _vecdot_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[i] = a[i] . b[i]`` (``b`` one row: the same for every i): one BLAS
    dot per row, one Python call. (A gemv would be one BLAS call, but OpenBLAS
    runs a gemv of this size on several threads.)"""
    np.vecdot(a, b, out=out)


_row_dots = _vecdot_rows if hasattr(np, "vecdot") else _matmul_rows
