"""Per-output thresholds: ``[OUTPUT:]METRIC=VALUE`` and judging metrics against them.

cosine, snr, psnr are minimums (higher is better); max_abs, mean_abs are maximums.
A failure says which output and sample, the value, the bound, the loosest bound
that would have passed every sample of that output, and how the error is spread.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from qnn_ci.compare.metrics import OutputMetrics
from qnn_ci.compare.outputs import match_names
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError

MIN_METRICS = ("cosine", "snr", "psnr")
MAX_METRICS = ("max_abs", "mean_abs")
METRICS = MIN_METRICS + MAX_METRICS
RELATIVE_METRICS = MIN_METRICS            # meaningless when the reference is ~zero
UNITS = {"snr": " dB", "psnr": " dB"}


@dataclass(frozen=True)
class ThresholdSetting:
    """One ``[OUTPUT:]METRIC=VALUE`` threshold (output None: every output)."""

    output: str | None      # None: every output
    metric: str
    value: float


def _syntax(token: str, why: str, *, usage: bool = True) -> UserError:
    tail = f"; write [OUTPUT:]METRIC=VALUE, METRIC one of {', '.join(METRICS)}" if usage else ""
    return UserError(f"bad threshold {token!r}: {why}{tail}", key="--threshold")


def check_bound(metric: str, value: float, *, where: str) -> None:
    """A UserError when ``metric`` is unknown or ``value`` is out of its range."""
    if metric not in METRICS:
        close = difflib.get_close_matches(metric, METRICS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"unknown metric {metric!r}{hint}; known: {', '.join(METRICS)}",
                        key=where)
    if not math.isfinite(value):
        raise UserError(f"{metric} bound must be a finite number, got {value}", key=where)
    if metric == "cosine" and not -1.0 <= value <= 1.0:
        raise UserError(f"cosine bound must be between -1 and 1, got {value}", key=where)
    if metric in MAX_METRICS and value < 0:
        raise UserError(f"{metric} bound must be >= 0, got {value}", key=where)


def parse_threshold(token: str) -> ThresholdSetting:
    """``cosine=0.999`` or ``logits:max_abs=0.05``. The output name is everything
    before the LAST ``:`` so names such as ``output:0`` work (``output:0:snr=30``)."""
    head, eq, value_text = token.partition("=")
    if not eq or not value_text.strip():
        raise _syntax(token, "no '=VALUE'")
    output, colon, metric = head.rpartition(":")
    metric = metric.strip().lower()
    output = output.strip() if colon else ""
    if colon and not output:
        raise _syntax(token, "empty output name before ':'")
    if not metric:
        raise _syntax(token, "no metric name")
    try:
        value = float(value_text)
    except ValueError:
        raise _syntax(token, f"{value_text.strip()!r} is not a number") from None
    try:
        check_bound(metric, value, where="--threshold")
    except UserError as exc:
        raise _syntax(token, exc.message, usage=False) from None
    return ThresholdSetting(output or None, metric, value)


def apply_thresholds(tokens: Iterable[str], base: Thresholds | None = None) -> Thresholds:
    """``base`` (default: qnn_ci.engine.spec defaults, cosine >= 0.99) overridden by tokens."""
    base = base or Thresholds()
    default = dict(base.default)
    per_output = {k: dict(v) for k, v in base.per_output.items()}
    for token in tokens:
        s = parse_threshold(token)
        if s.output is None:
            default[s.metric] = s.value
        else:
            per_output.setdefault(s.output, {})[s.metric] = s.value
    return Thresholds(default=default, per_output=per_output)


def resolve_bounds(thresholds: Thresholds, outputs: Sequence[str]) -> dict[str, dict[str, float]]:
    """Bounds per output name. A per-output key may be the graph name or the
    converter's sanitised file name; a key that matches no output is a UserError."""
    for metric, value in thresholds.default.items():
        check_bound(metric, value, where="thresholds")
    bounds = {name: dict(thresholds.default) for name in outputs}
    for key, per in thresholds.per_output.items():
        for metric, value in per.items():
            check_bound(metric, value, where=f"thresholds: {key}")
        target = key if key in bounds else match_names([key], outputs).get(key)
        if target is None:
            raise UserError(f"a threshold names output {key!r}, which is not among the "
                            f"outputs: {', '.join(outputs) or '(none)'}", key="thresholds")
        bounds[target].update(per)
    return bounds


def _round_bound(value: float, metric: str, digits: int = 6) -> str:
    """``value`` to ``digits`` significant digits, rounded so it still passes
    (down for a minimum, up for a maximum)."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    exp = math.floor(math.log10(abs(value))) - digits + 1
    rounding = ROUND_FLOOR if metric in MIN_METRICS else ROUND_CEILING
    q = Decimal(value).quantize(Decimal(1).scaleb(exp), rounding=rounding)
    return f"{float(q):.{digits}g}"


def loosest_passing(metric: str, values: Iterable[float | None]) -> float | None:
    """The tightest bound every sample meets: the worst observed value."""
    seen = [v for v in values if v is not None]
    if not seen:
        return None
    if any(math.isnan(v) for v in seen):
        return math.nan
    return min(seen) if metric in MIN_METRICS else max(seen)


def _fmt(metric: str, value: float) -> str:
    if metric == "cosine":
        return f"{value:.6f}"
    if metric in UNITS:
        return f"{value:.2f}{UNITS[metric]}"
    return f"{value:.4g}"


def error_distribution(m: OutputMetrics) -> str:
    """``|err| p50 1.2e-03 p99 4.5e-02 max 0.31; [1e-3,1e-2) 55% [1e-2,1e-1) 4.9%``."""
    if not m.sample_size:
        return "no finite values to describe"
    parts = [f"{k} {v:.3g}" for k, v in m.quantiles.items() if k in ("p50", "p99")]
    if m.max_abs is not None:
        parts.append(f"max {m.max_abs:.3g}")
    hist = []
    for b in m.histogram:
        share = 100.0 * b.count / m.sample_size
        label = "0" if b.high == 0 else (f"<{b.high:.0e}" if b.low == 0
                                         else f"[{b.low:.0e},{b.high:.0e})")
        hist.append(f"{label} {share:.3g}%")
    sampled = f" (of {m.sample_size} sampled)" if m.sampled else ""
    return f"|err| {' '.join(parts)}; {' '.join(hist)}{sampled}"


def failed_metrics(metrics: OutputMetrics, bounds: Mapping[str, float]) -> list[str]:
    """The bounded metrics this sample misses (NaN misses every bound)."""
    failed = []
    for metric, bound in bounds.items():
        value = metrics.value(metric)
        if value is None:
            continue
        if not (value >= bound if metric in MIN_METRICS else value <= bound):
            failed.append(metric)
    return failed


def evaluate(output: str, sample: int, metrics: OutputMetrics, bounds: Mapping[str, float],
             *, across: Sequence[OutputMetrics] | None = None) -> list[Finding]:
    """Findings for one sample of one output. ``across``: every sample's metrics
    of this output, for the loosest-passing numbers (default: this sample only)."""
    label = f"{output} sample {sample}"
    pool = list(across) if across else [metrics]
    findings = _nonfinite(label, output, metrics)
    relative = [m for m in RELATIVE_METRICS if m in bounds]
    if metrics.reference_near_zero and relative:
        absolute = [m for m in MAX_METRICS if m in bounds]
        judged = (f"judged by {' and '.join(absolute)} only" if absolute else
                  f"set an absolute bound (e.g. --threshold {output}:max_abs=1e-3) or use "
                  "an input that drives this output")
        findings.append(Finding(
            "compare.reference_near_zero",
            f"{label}: the reference is {metrics.near_zero_reason}, so "
            f"{', '.join(relative)} would only measure noise and "
            f"{'were' if len(relative) > 1 else 'was'} not checked; {judged}",
            Severity.WARNING if absolute else Severity.ERROR, subject=output))
    for metric in failed_metrics(metrics, bounds):
        value, bound = metrics.value(metric), bounds[metric]
        assert value is not None
        word = "below the minimum" if metric in MIN_METRICS else "above the maximum"
        loosest = loosest_passing(metric, (p.value(metric) for p in pool))
        if loosest is None or math.isnan(loosest):
            hint = "no bound passes (a sample gave nan)"
        else:
            n = len(pool)
            hint = (f"loosest passing bound: {metric}={_round_bound(loosest, metric, 7)}"
                    + (f" (worst of {n} samples)" if n > 1 else ""))
        findings.append(Finding(
            "compare.threshold",
            f"{label}: {metric} {_fmt(metric, value)} is {word} {_fmt(metric, bound)}; "
            f"{hint}; {error_distribution(metrics)}",
            subject=output))
    return findings


def _nonfinite(label: str, output: str, m: OutputMetrics) -> list[Finding]:
    if not m.nonfinite:
        return []
    counts = (f"test {m.test_nan} NaN / {m.test_inf} Inf, reference {m.ref_nan} NaN / "
              f"{m.ref_inf} Inf")
    if m.finite == 0:
        return [Finding("compare.nan_inf",
                        f"{label}: no position is finite on both sides ({counts}); "
                        "nothing could be compared", subject=output)]
    if m.nonfinite_mismatch:
        return [Finding("compare.nan_inf",
                        f"{label}: {m.nonfinite_mismatch} of {m.count} positions disagree on "
                        f"NaN/Inf ({counts}); metrics cover the {m.finite} finite pairs",
                        subject=output)]
    return [Finding("compare.nan_inf",
                    f"{label}: both sides have the same NaN/Inf at the same positions "
                    f"({counts}); metrics cover the {m.finite} finite pairs",
                    Severity.WARNING, subject=output)]
