"""Trends over the run history: per export x SoC x board x stage x metric, the last
values, and drifts that no single night's check sees. Only measurements are
trended (``qnn_ci.nightly.history.is_metric``): counters such as the regression
check's worse / improved, recorded by older versions, are left out.

The drift rule (docs/history.md): over the last ``WINDOW`` (7) values of a metric
whose better direction is known, the metric moved the worse way on at least
``MIN_WORSE_STEPS`` (5) of the night-to-night steps, and the first-to-last change
of that window is worse than the metric's tolerance (the regression check's
per-night tolerance, ``qnn_ci.nightly.regression.RULES``: absolute for cosine / SNR / nodes,
relative to the window's first value for max_abs, latency and library size). Each
night may stay inside the tolerance; the slide adds up past it. Metrics without a
known direction are shown, never flagged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from qnn_ci.nightly import regression
from qnn_ci.nightly.history import is_metric, parse_date

WINDOW = 7
MIN_WORSE_STEPS = 5


def metric_kind(metric: str) -> str:
    """``htp_vs_cpu.logits.cosine`` -> ``cosine``; ``latency.median_ms`` -> ``latency``
    (the regression check's kinds, ``qnn_ci.nightly.regression.kind``)."""
    return regression.kind(metric)


def rule_for(metric: str, overrides: Mapping[str, float] | None = None) -> regression.Rule | None:
    """The regression check's rule for ``metric`` (``qnn_ci.nightly.regression.RULES``): which
    way is better and the per-night tolerance, overridden by ``overrides`` (a kind such
    as ``cosine`` or one metric's full name -> tolerance, as ``regression.tolerances``)."""
    return regression.rule_for(metric, overrides or {})


def _allowed(rule: regression.Rule, start: float) -> float:
    return rule.tolerance * abs(start) if rule.relative else rule.tolerance


def _tolerance_text(rule: regression.Rule, allowed: float) -> str:
    """``0.001`` or, relative, ``10% = 0.585``."""
    return f"{rule.tolerance:.3g}" if not rule.relative else \
        f"{rule.tolerance * 100:.3g}% = {allowed:.3g}"


def drift(values: list[float], metric: str, rule: regression.Rule | None) -> str | None:
    """The one-line reason when the last ``WINDOW`` values slide past the tolerance."""
    if rule is None:
        return None
    window = values[-WINDOW:]
    steps = [b - a for a, b in pairwise(window)]
    direction = 1 if rule.higher_is_better else -1
    worse = sum(1 for d in steps if direction * d < 0)
    if worse < MIN_WORSE_STEPS:
        return None
    change = window[-1] - window[0]
    loss = -direction * change
    allowed = _allowed(rule, window[0])
    if not (math.isfinite(loss) and loss > allowed):
        return None
    return (f"{metric} got worse on {worse} of the last {len(steps)} nights: "
            f"{window[0]:.6g} → {window[-1]:.6g} ({change:+.3g}; more than the tolerance "
            f"{_tolerance_text(rule, allowed)})")


@dataclass
class Trend:
    """One metric's history for an export x SoC x board x stage, and its drift, if any."""

    export: str
    soc: str | None
    board: str | None
    stage: str
    metric: str
    points: list[tuple[str, str, float]] = field(default_factory=list)  # date, commit, value
    drift: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"export": self.export, "soc": self.soc, "board": self.board,
                "stage": self.stage, "metric": self.metric,
                "values": [{"date": d, "commit": c, "value": v} for d, c, v in self.points],
                "drift": self.drift}


def trends(records: Iterable[dict[str, Any]], *, last: int = WINDOW,
           exports: Iterable[str] | None = None,
           overrides: Mapping[str, float] | None = None,
           per_export: Mapping[str, Mapping[str, float]] | None = None) -> list[Trend]:
    """Per export x SoC x board x stage x metric, the last ``last`` values (oldest
    first) and the drift, if any, over the last ``WINDOW``. ``records`` as
    ``qnn_ci.nightly.history.read_history`` gives them, or records as written (ordered here by
    date, then given order). Tolerances: ``per_export`` (export -> the manifest's
    ``regression.tolerances``), then ``overrides`` on top, then the defaults."""
    wanted = set(exports) if exports else None
    ordered = sorted((r for r in records if wanted is None or r["export"] in wanted),
                     key=lambda r: r.get("_when") or parse_date(r["date"]))
    series: dict[tuple[str, str, str, str, str], list[tuple[str, str, float]]] = {}
    for r in ordered:
        for metric, value in r["metrics"].items():
            if not is_metric(metric, r["stage"]):   # counters a history may hold from
                continue                            # before they were left out
            key = (r["export"], r.get("soc") or "", r.get("board") or "", r["stage"], metric)
            series.setdefault(key, []).append((r["date"], r["commit"], value))
    stage_order: dict[str, int] = {}
    for key in series:               # stages in the order the runs reported them
        stage_order.setdefault(key[3], len(stage_order))
    out = []
    for key in sorted(series, key=lambda k: (k[:3], stage_order[k[3]], k[4])):
        points = series[key]
        export, soc, board, stage, metric = key
        tolerances = {**(per_export or {}).get(export, {}), **(overrides or {})}
        reason = drift([v for _, _, v in points], metric, rule_for(metric, tolerances))
        out.append(Trend(export, soc or None, board or None, stage, metric,
                         points[-last:] if last > 0 else [], reason))
    return out
