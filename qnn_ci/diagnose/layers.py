"""Per-layer metrics: where does the error enter?

Pure functions over per-tensor arrays, shared by the simulator/QDQ path
(``qnn_ci.diagnose.sim``) and the board ``--debug`` path
(``qnn_ci.diagnose.board``). Stable API:

- ``TensorInfo(tensor, node, op_type, inputs, note)``: one float tensor of the
  reference graph, in topological order; ``inputs`` are the producing node's
  input tensor names (used to find the worst input for the jump).
- ``LayerAccumulator(order, layout=None)``: ``add(reference, test)`` once per
  sample with ``{tensor name: array}`` for that sample (tensors missing from
  either side are skipped for that sample), then ``report(bounds)`` ->
  ``LayerReport(layers, first, jumps)``. Only the per-tensor metrics are kept,
  never the arrays: feed samples one at a time to keep memory flat.
- ``layer_report(order, reference, test, bounds, layout=None)``: the same over
  ``{tensor: [array per sample]}`` mappings; returns ``(layers, first, jumps)``.
- ``bounds_for(thresholds, outputs)``: the bounds an intermediate tensor is held
  to, from the export's thresholds: scale-free ones only (cosine, SNR).

Metrics per tensor and sample (float64): cosine, SNR dB (signal = reference),
max_abs; the worst sample's value of each is kept. A reference that is all zero
has no cosine/SNR (None; not a divergence).

Channels: each tensor's worst channel (lowest per-channel cosine) is reported
too, because a collapsed channel hides in a tensor-wide metric when a few large
channels carry the energy. Channel axis by rank: 4-D NCHW -> axis 1, 3-D
[N, C, L] -> axis 1, 5-D NCDHW -> axis 1; with ``layout="channels_last"`` (an
NHWC model, e.g. the board's layout) -> the last axis; 1-D/2-D (e.g. [N, F]
logits) -> no channel axis. A channel needs at least 2 values; channels whose
reference RMS is within 4 16-bit steps (4 * 2^-16) of the largest channel RMS
from zero are skipped (their cosine would measure only activation rounding).

The first divergence is the first tensor (topological order) whose effective
cosine, the stricter of the tensor-wide and the worst-channel cosine, is below
the cosine bound (``metric`` says which of the two), or, when the bounds have
them, whose SNR is below / max_abs above its bound. Jumps: how much the
effective cosine drops from the node's worst input (the nearest measured
tensors upstream; a graph input counts as 1.0) to its output; the 5 largest
drops are the worst jumps.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qnn_ci.diagnose.model import FirstDivergence, LayerMetrics
from qnn_ci.tables import DEFAULT_COSINE

CHANNELS_FIRST = "channels_first"
CHANNELS_LAST = "channels_last"
NEAR_ZERO_CHANNEL = 4.0 * 2.0 ** -16
TOP_JUMPS = 5


@dataclass(frozen=True)
class TensorInfo:
    """One float tensor of the reference graph: the node, op type and inputs that make it."""

    tensor: str
    node: str
    op_type: str
    inputs: tuple[str, ...] = ()
    note: str = ""


@dataclass
class TensorStats:
    """One tensor, one sample."""

    cosine: float | None
    snr_db: float | None
    max_abs: float
    channel_axis: int | None = None
    worst_channel: int | None = None
    worst_channel_cosine: float | None = None


def channel_axis(shape: Sequence[int], layout: str | None = None) -> int | None:
    """The channel axis of a tensor of ``shape`` (see the module docstring)."""
    rank = len(shape)
    if rank < 3:
        return None
    axis = rank - 1 if layout == CHANNELS_LAST else 1
    channels = int(shape[axis])
    per_channel = math.prod(int(d) for d in shape) // max(1, channels)
    return axis if channels >= 2 and per_channel >= 2 else None


def tensor_stats(reference: Any, test: Any, layout: str | None = None) -> TensorStats:
    """Metrics of ``test`` against ``reference`` (same shape) for one sample.

    Cosine is computed from the error, ``1 - (Σe² - (‖r‖-‖t‖)²) / (2‖r‖‖t‖)``, so
    it stays exact for identical tensors and precise near 1 with the sums
    accumulated in the arrays' own float type (float32 for float32 tensors: the
    sums' rounding only scales the small terms)."""
    r, t = np.asarray(reference), np.asarray(test)
    if r.shape != t.shape:
        if r.size != t.size:
            raise ValueError(f"reference shape {r.shape} vs test shape {t.shape}")
        t = t.reshape(r.shape)
    if r.dtype.kind != "f" or r.dtype != t.dtype or r.dtype.itemsize < 4:
        r, t = r.astype(np.float64), t.astype(np.float64)
    axis = channel_axis(r.shape, layout)
    if axis is None:
        rows_r, rows_t = r.reshape(1, -1), t.reshape(1, -1)
    else:
        rows_r = np.moveaxis(r, axis, 0).reshape(r.shape[axis], -1)
        rows_t = np.moveaxis(t, axis, 0).reshape(r.shape[axis], -1)
    with np.errstate(over="ignore", invalid="ignore"):
        crr = _row_sums(rows_r, rows_r).astype(np.float64)
        ctt = _row_sums(rows_t, rows_t).astype(np.float64)
        if not (np.isfinite(crr).all() and np.isfinite(ctt).all()):
            return _nonfinite_stats(r, t, layout)
        rows_e = rows_t - rows_r
        cee = _row_sums(rows_e, rows_e).astype(np.float64)
    rr, tt, ee = float(crr.sum()), float(ctt.sum()), float(cee.sum())
    max_abs = float(np.max(np.abs(rows_e))) if rows_e.size else 0.0
    if max_abs == 0.0:
        ee, cee = 0.0, np.zeros_like(cee)
    if rr == 0.0:
        return TensorStats(None, None, max_abs)
    snr = math.inf if ee == 0.0 else 10.0 * math.log10(rr / ee)
    stats = TensorStats(_cos_from_error(rr, tt, ee), snr, max_abs)
    if axis is None:
        return stats
    stats.channel_axis = axis
    rms = np.sqrt(crr / rows_r.shape[1])
    keep = rms > NEAR_ZERO_CHANNEL * float(np.max(rms))
    if not keep.any():
        return stats
    a, b = np.sqrt(crr), np.sqrt(ctt)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where((a > 0) & (b > 0),
                       1.0 - (cee - (a - b) ** 2) / np.where(a * b > 0, 2.0 * a * b, 1.0), 0.0)
    cos = np.clip(cos, -1.0, 1.0)
    cos[~keep] = np.inf
    worst = int(np.argmin(cos))
    stats.worst_channel, stats.worst_channel_cosine = worst, float(cos[worst])
    return stats


def _cos_from_error(rr: float, tt: float, ee: float) -> float:
    if rr == 0.0 or tt == 0.0:
        return 0.0
    a, b = math.sqrt(rr), math.sqrt(tt)
    return max(-1.0, min(1.0, 1.0 - (ee - (a - b) ** 2) / (2.0 * a * b)))


BATCH_ELEMENTS = 4 * 1024 * 1024     # elements per batch of tensors (bounded copies)


def _rows(a: np.ndarray, axis: int | None) -> np.ndarray:
    if axis is None:
        return a.reshape(1, -1)
    if math.prod(a.shape[:axis]) == 1:
        return a.reshape(a.shape[axis], -1)
    return np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)


_Layout = tuple[int | None, int, bool]     # channel axis, channels, axis must move first


@functools.lru_cache(maxsize=4096)
def _row_layout(shape: tuple[int, ...], layout: str | None) -> _Layout:
    """(channel axis, channels, whether the axis must move first) for ``shape``: the
    per-shape part of ``_rows``, worked out once per shape rather than per tensor."""
    axis = channel_axis(shape, layout)
    if axis is None:
        return None, 1, False
    return axis, int(shape[axis]), math.prod(shape[:axis]) != 1


def _row_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row dot products of two (rows, n) arrays in their own float type."""
    return _VECDOT(a, b) if _VECDOT is not None else np.einsum("ij,ij->i", a, b)


_VECDOT = getattr(np, "vecdot", None)     # numpy >= 2: a ufunc, BLAS-backed


class Workspace:
    """Buffers reused across calls of ``batch_stats`` (fresh 10-100 MB arrays per
    sample cost page faults that dominate the arithmetic)."""

    def __init__(self) -> None:
        self._bufs: list[np.ndarray] = []

    def get(self, size: int) -> tuple[np.ndarray, ...]:
        if not self._bufs or self._bufs[0].size < size:
            self._bufs = [np.empty(size, np.float32)]
        return tuple(buf[:size] for buf in self._bufs)


def batch_stats(pairs: Sequence[tuple[Any, Any]], layout: str | None = None, *,
                workspace: Workspace | None = None) -> list[TensorStats]:
    """``tensor_stats`` of many (reference, test) pairs at once: the same numbers
    (within float rounding), with a few numpy calls per tensor and the per-channel
    arithmetic vectorised over batches of ``BATCH_ELEMENTS``. Pairs with NaN/Inf,
    a shape mismatch, no elements or a non-float32 dtype take ``tensor_stats``."""
    out: list[TensorStats | None] = [None] * len(pairs)
    ws = workspace or Workspace()
    batch: list[tuple[int, np.ndarray, np.ndarray, _Layout]] = []
    size = 0
    for i, (ref, test) in enumerate(pairs):
        r, t = np.asarray(ref), np.asarray(test)
        if r.shape != t.shape or r.size == 0 or r.dtype != np.float32 or t.dtype != np.float32:
            out[i] = tensor_stats(r, t, layout)
            continue
        batch.append((i, r, t, _row_layout(r.shape, layout)))
        size += r.size
        if size >= BATCH_ELEMENTS:
            _batch(batch, out, layout, ws)
            batch, size = [], 0
    if batch:
        _batch(batch, out, layout, ws)
    return [s if s is not None else TensorStats(None, None, 0.0) for s in out]


def _batch(items: list[tuple[int, np.ndarray, np.ndarray, _Layout]],
           out: list[TensorStats | None], layout: str | None, ws: Workspace) -> None:
    """Per-channel sums with one float32 per-row dot product per sum and tensor (no copies: the
    error goes to a reused buffer), then the per-channel arithmetic vectorised
    over every channel of the batch."""
    crr_l, ctt_l, cee_l, maxabs_l, counts_l, length_l = [], [], [], [], [], []
    largest = max(r.size for _, r, _, _ in items)
    buf = ws.get(largest)[0]
    subtract, absolute = np.subtract, np.absolute
    with np.errstate(over="ignore", invalid="ignore"):
        for _, r, t, (axis, channels, move) in items:
            if move:
                rows_r, rows_t = _rows(r, axis), _rows(t, axis)
            else:
                rows_r, rows_t = r.reshape(channels, -1), t.reshape(channels, -1)
            e = buf[:rows_r.size].reshape(rows_r.shape)
            subtract(rows_t, rows_r, out=e)
            crr_l.append(_row_sums(rows_r, rows_r))
            ctt_l.append(_row_sums(rows_t, rows_t))
            cee_l.append(_row_sums(e, e))
            maxabs_l.append(absolute(e, out=e).max())    # e is scratch: one pass
            counts_l.append(channels)
            length_l.append(rows_r.shape[1])
    counts = np.array(counts_l)
    tstarts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    crr = np.concatenate(crr_l).astype(np.float64)
    ctt = np.concatenate(ctt_l).astype(np.float64)
    cee = np.concatenate(cee_l).astype(np.float64)
    rms = np.sqrt(crr / np.repeat(np.array(length_l, dtype=np.float64), counts))
    max_abs = np.array(maxabs_l, dtype=np.float64)
    rr, tt = np.add.reduceat(crr, tstarts), np.add.reduceat(ctt, tstarts)
    ee = np.add.reduceat(cee, tstarts)
    top_rms = np.maximum.reduceat(rms, tstarts)
    finite = np.isfinite(rr) & np.isfinite(tt)
    a, b = np.sqrt(crr), np.sqrt(ctt)
    with np.errstate(divide="ignore", invalid="ignore"):
        ccos = np.where((a > 0) & (b > 0),
                        1.0 - (cee - (a - b) ** 2) / np.where(a * b > 0, 2.0 * a * b, 1.0), 0.0)
    ccos = np.clip(ccos, -1.0, 1.0)
    keep = rms > NEAR_ZERO_CHANNEL * np.repeat(top_rms, counts)
    ccos[~keep] = np.inf
    # Python floats from here: one conversion per array, not one per element
    rr_f, tt_f, ee_f, ma_f = rr.tolist(), tt.tolist(), ee.tolist(), max_abs.tolist()
    finite_f, starts_f = finite.tolist(), tstarts.tolist()
    for k, (i, r, t, (axis, _, _)) in enumerate(items):
        if not finite_f[k]:
            out[i] = tensor_stats(r, t, layout)
            continue
        ma = ma_f[k]
        if rr_f[k] == 0.0:
            out[i] = TensorStats(None, None, ma)
            continue
        e = ee_f[k]
        snr = math.inf if e == 0.0 else 10.0 * math.log10(rr_f[k] / e)
        s = TensorStats(_cos_from_error(rr_f[k], tt_f[k], e), snr, ma)
        if axis is not None:
            s.channel_axis = axis
            seg = ccos[starts_f[k]:starts_f[k] + counts_l[k]]
            c = int(seg.argmin())
            worst = float(seg[c])
            if math.isfinite(worst):
                s.worst_channel, s.worst_channel_cosine = c, worst
        out[i] = s


def _nonfinite_stats(r: np.ndarray, t: np.ndarray, layout: str | None) -> TensorStats:
    """The sums did not stay finite. NaN/Inf at different positions -> NaN
    metrics (a divergence); at the same positions -> the metrics of the finite
    values; all finite (the squares overflowed) -> computed on the arrays scaled by
    their peak (cosine and SNR do not change with scale), max_abs unscaled."""
    fr, ft = np.isfinite(r), np.isfinite(t)
    if not np.array_equal(fr, ft):
        return TensorStats(math.nan, math.nan, math.inf)
    if not fr.all():
        return tensor_stats(np.where(fr, r, 0.0), np.where(ft, t, 0.0), layout)
    r64, t64 = r.astype(np.float64), t.astype(np.float64)
    peak = max(float(np.max(np.abs(r64))), float(np.max(np.abs(t64))))
    stats = tensor_stats(r64 / peak, t64 / peak, layout)
    with np.errstate(over="ignore"):
        stats.max_abs = float(np.max(np.abs(t64 - r64)))
    return stats


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return min(a, b)


def effective_cosine(m: LayerMetrics) -> float | None:
    """The stricter of the tensor-wide and the worst-channel cosine."""
    return _min(m.cosine, m.worst_channel_cosine)


@dataclass
class LayerReport:
    """Per-layer metrics: the first divergence, the worst jumps and what was not compared."""

    layers: list[LayerMetrics]
    first: FirstDivergence | None
    jumps: list[LayerMetrics]
    compared: int = 0                       # tensors with metrics
    missing: list[str] = field(default_factory=list)   # tensors never compared


class LayerAccumulator:
    """Worst-over-samples metrics per tensor, fed one sample at a time."""

    def __init__(self, order: Sequence[TensorInfo], *, layout: str | None = None) -> None:
        self.order = list(order)
        self.layout = layout
        self.samples = 0
        self._metrics: dict[str, LayerMetrics] = {
            info.tensor: LayerMetrics(i, info.tensor, info.node, info.op_type, note=info.note)
            for i, info in enumerate(self.order)}
        self._seen: set[str] = set()
        self._workspace = Workspace()

    def add(self, reference: Mapping[str, Any], test: Mapping[str, Any]) -> None:
        """One whole sample's tensors."""
        self.add_tensors(reference, test, sample=True)

    def add_tensors(self, reference: Mapping[str, Any], test: Mapping[str, Any], *,
                    sample: bool = False) -> None:
        """``add`` for part of one sample's tensors: a sample may come in several
        calls (the sweep's batches), each tensor at most once per sample; ``sample``
        True counts the sample (in one of its calls)."""
        if sample:
            self.samples += 1
        both = [i.tensor for i in self.order if i.tensor in reference and i.tensor in test]
        stats = batch_stats([(reference[t], test[t]) for t in both], self.layout,
                            workspace=self._workspace)
        for tensor, s in zip(both, stats, strict=True):
            self._fold(self._metrics[tensor], s)
            self._seen.add(tensor)

    def _fold(self, m: LayerMetrics, s: TensorStats) -> None:
        if m.tensor not in self._seen:
            m.cosine, m.snr_db, m.max_abs = s.cosine, s.snr_db, s.max_abs
            m.channel_axis = s.channel_axis
        else:
            if _lower(s.cosine, m.cosine):
                m.cosine = s.cosine
            if _lower(s.snr_db, m.snr_db):
                m.snr_db = s.snr_db
            if m.max_abs is None or not s.max_abs <= m.max_abs:
                m.max_abs = s.max_abs
        if s.worst_channel_cosine is not None and (
                m.worst_channel_cosine is None
                or _lower(s.worst_channel_cosine, m.worst_channel_cosine)):
            m.worst_channel, m.worst_channel_cosine = s.worst_channel, s.worst_channel_cosine

    def report(self, bounds: Mapping[str, float]) -> LayerReport:
        layers = [self._metrics[i.tensor] for i in self.order]
        first: FirstDivergence | None = None
        for m in layers:
            crossed = crossing(m, bounds) if m.tensor in self._seen else None
            m.crosses = crossed is not None
            if crossed is None:
                continue
            if first is None:
                metric, value, bound = crossed
                first = FirstDivergence(m.tensor, m.node, m.op_type, m.index, metric, value,
                                        bound, m.cosine, m.worst_channel,
                                        m.worst_channel_cosine, m.snr_db, m.max_abs)
        self._jumps(layers)
        jumps = sorted((m for m in layers if m.jump is not None and m.jump > 0),
                       key=lambda m: -(m.jump or 0.0))[:TOP_JUMPS]
        missing = [m.tensor for m in layers if m.tensor not in self._seen]
        return LayerReport(layers, first, jumps, len(layers) - len(missing), missing)

    def _jumps(self, layers: list[LayerMetrics]) -> None:
        producer = {i.tensor: i for i in self.order}
        by_name = {m.tensor: m for m in layers}
        for info in self.order:
            m = by_name[info.tensor]
            own = effective_cosine(m) if m.tensor in self._seen else None
            if own is None or math.isnan(own):
                continue
            worst_in = self._worst_input(info, producer, by_name)
            m.jump = worst_in - own

    def _worst_input(self, info: TensorInfo, producer: Mapping[str, TensorInfo],
                     by_name: Mapping[str, LayerMetrics]) -> float:
        """The lowest effective cosine among the nearest measured tensors upstream
        of ``info``'s node (1.0 when they are graph inputs or constants)."""
        worst = 1.0
        stack, visited = list(info.inputs), set()
        while stack:
            name = stack.pop()
            if name in visited or not name:
                continue
            visited.add(name)
            up = producer.get(name)
            if up is None:
                continue              # a graph input or an initializer: exact
            m = by_name[name]
            value = effective_cosine(m) if name in self._seen else None
            if value is not None and not math.isnan(value):
                worst = min(worst, value)
            elif name not in self._seen:
                stack.extend(up.inputs)   # not measured (fused away): look further up
        return worst


def _lower(a: float | None, b: float | None) -> bool:
    """``a`` is worse (lower) than ``b`` for a higher-is-better metric."""
    if a is None:
        return False
    if b is None or math.isnan(a):
        return True
    return not math.isnan(b) and a < b


def crossing(m: LayerMetrics, bounds: Mapping[str, float]
              ) -> tuple[str, float | None, float] | None:
    """(metric, value, bound) of the first bound this tensor crosses."""
    cos_bound = bounds.get("cosine")
    if cos_bound is not None:
        tensor_wide, channel = m.cosine, m.worst_channel_cosine
        pairs = [("cosine", tensor_wide), ("worst_channel_cosine", channel)]
        low = [(k, v) for k, v in pairs if v is not None and (math.isnan(v) or v < cos_bound)]
        if low:
            metric, value = min(low, key=lambda kv: -math.inf if math.isnan(kv[1]) else kv[1])
            return metric, value, cos_bound
    snr_bound = bounds.get("snr")
    if snr_bound is not None and m.snr_db is not None and (
            math.isnan(m.snr_db) or m.snr_db < snr_bound):
        return "snr", m.snr_db, snr_bound
    abs_bound = bounds.get("max_abs")
    if abs_bound is not None and m.max_abs is not None and not m.max_abs <= abs_bound:
        return "max_abs", m.max_abs, abs_bound
    return None


def layer_report(order: Sequence[TensorInfo], reference: Mapping[str, Sequence[Any]],
                 test: Mapping[str, Sequence[Any]], bounds: Mapping[str, float], *,
                 layout: str | None = None
                 ) -> tuple[list[LayerMetrics], FirstDivergence | None, list[LayerMetrics]]:
    """Per-layer metrics over ``{tensor: [array per sample]}`` (see the module
    docstring): (layers in ``order``, the first divergence, the worst jumps)."""
    acc = LayerAccumulator(order, layout=layout)
    count = max((len(v) for v in reference.values()), default=0)
    for n in range(count):
        acc.add({k: v[n] for k, v in reference.items() if n < len(v)},
                {k: v[n] for k, v in test.items() if n < len(v)})
    rep = acc.report(bounds)
    return rep.layers, rep.first, rep.jumps


def bounds_for(thresholds: Any, outputs: Sequence[str]) -> dict[str, float]:
    """The bounds an intermediate tensor is held to: scale-free ones only. The
    strictest cosine bound of ``outputs`` (the failing outputs, or every output;
    the worst-channel cosine is held to it too), and an SNR bound only when every
    one of ``outputs`` has one (the strictest). An output's absolute bounds
    (max_abs, mean_abs) are never applied to an interior tensor: they are in the
    output's units, and an interior tensor's values may be 100x larger. No cosine
    bound anywhere: the default (``qnn_ci.tables.DEFAULT_COSINE``)."""

    per = [thresholds.for_output(o) for o in outputs] or [dict(thresholds.default)]
    cosines = [b["cosine"] for b in per if "cosine" in b]
    bounds = {"cosine": max(cosines) if cosines else DEFAULT_COSINE}
    if all("snr" in b for b in per):
        bounds["snr"] = max(b["snr"] for b in per)
    return bounds
