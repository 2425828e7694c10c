"""Compare what a run measured with its baseline (``qnn_ci.nightly.baselines``), metric by
metric, with a tolerance per kind of metric (overridable per export in the manifest:
``regression.tolerances``). Worse beyond the tolerance is a failure line such as

    logits cosine 0.99912 → 0.99620 (baseline from 3f2c1ab, 2026-11-28; tolerance 0.001)

better beyond it is reported as an improvement (update the baseline). The rules are
documented in docs/baselines.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from qnn_ci.nightly.baselines import COMPARISONS, LIBRARY, NODES, Entry


@dataclass(frozen=True)
class Rule:
    """How a metric kind is judged against its baseline: which way is better, the tolerance."""

    higher_is_better: bool
    tolerance: float
    relative: bool            # tolerance as a fraction of the baseline value


# kind -> default rule. A metric's kind is its last dotted part (cosine, snr, max_abs),
# "latency" for latency.*_ms, or the metric's own name (nodes_on_htp, library_bytes).
RULES: dict[str, Rule] = {
    "cosine": Rule(True, 0.001, False),
    "snr": Rule(True, 1.0, False),                 # dB
    "max_abs": Rule(False, 0.25, True),
    "latency": Rule(False, 0.10, True),            # boards are noisy
    NODES: Rule(True, 0.0, False),                 # any node leaving the HTP
    LIBRARY: Rule(False, 0.10, True),
}
_TITLES = {"htp_vs_cpu": "HTP vs CPU ", "cpu_vs_fp32": "CPU vs fp32 ",
           "htp_vs_fp32": "HTP vs fp32 ", "sim_vs_fp32": "",
           "context_vs_cpu": "context binary vs CPU ",
           "context_vs_fp32": "context binary vs fp32 "}


def kind(metric: str) -> str:
    if metric.startswith("latency."):
        return "latency"
    if metric in RULES:
        return metric
    return metric.rsplit(".", 1)[-1]


def check_tolerances(tolerances: Mapping[str, float]) -> str | None:
    """The first key of ``regression.tolerances`` that names no metric, with a hint;
    None when all do. A key is a kind (cosine, snr, max_abs, latency, nodes_on_htp,
    library_bytes) or one metric of the baseline (e.g. sim_vs_fp32.logits.cosine)."""
    for key in tolerances:
        if key in RULES or (key.partition(".")[0] in COMPARISONS and kind(key) in RULES) \
                or (key.startswith("latency.") and key.endswith("_ms")):
            continue
        close = difflib.get_close_matches(key, list(RULES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (f"unknown metric {key!r}{hint}; allowed: {', '.join(RULES)} or one "
                "metric of the baseline such as sim_vs_fp32.<output>.cosine")
    return None


def rule_for(metric: str, tolerances: Mapping[str, float]) -> Rule | None:
    base = RULES.get(kind(metric))
    if base is None:
        return None
    tol = tolerances.get(metric, tolerances.get(kind(metric), base.tolerance))
    return Rule(base.higher_is_better, float(tol), base.relative)


def title(metric: str) -> str:
    """How a metric is named in a line: ``logits cosine``, ``HTP vs CPU logits snr``,
    ``latency median_ms``, ``nodes_on_htp``."""
    head, _, rest = metric.partition(".")
    if head in _TITLES and "." in rest:
        output, m = rest.rsplit(".", 1)
        return f"{_TITLES[head]}{output} {m}"
    if head == "latency":
        return f"latency {rest}"
    return metric


def fmt(metric: str, value: float) -> str:
    k = kind(metric)
    if isinstance(value, int) or (k in (NODES, LIBRARY) and float(value).is_integer()):
        return str(int(value))
    if k == "cosine":
        return f"{value:.5f}"
    if k in ("snr", "latency"):
        return f"{value:.2f}"
    return f"{value:.4g}"


def fmt_tolerance(rule: Rule) -> str:
    return f"{rule.tolerance * 100:g}%" if rule.relative else f"{rule.tolerance:g}"


@dataclass
class Outcome:
    """One scope's comparison: lines for the worse and the improved metrics, and the
    metrics only one side has."""

    worse: list[str] = field(default_factory=list)
    improved: list[str] = field(default_factory=list)
    compared: int = 0
    not_measured: list[str] = field(default_factory=list)    # in the baseline only
    new: list[str] = field(default_factory=list)             # in this run only


def compare(now: Mapping[str, float], baseline: Entry,
            tolerances: Mapping[str, float]) -> Outcome:
    out = Outcome()
    origin = f"baseline from {baseline.commit[:7] or 'unknown'}" + (
        f", {baseline.date}" if baseline.date else "")
    for metric in sorted(now):
        if metric not in baseline.metrics:
            out.new.append(metric)
            continue
        rule = rule_for(metric, tolerances)
        if rule is None:
            continue
        old, new = float(baseline.metrics[metric]), float(now[metric])
        out.compared += 1
        margin = rule.tolerance * abs(old) if rule.relative else rule.tolerance
        margin += 1e-12 * max(1.0, abs(old))       # float noise is never a change
        delta = new - old if rule.higher_is_better else old - new    # > 0: better
        if delta >= -margin and delta <= margin:
            continue
        line = (f"{title(metric)} {fmt(metric, baseline.metrics[metric])} → "
                f"{fmt(metric, now[metric])} ({origin}; tolerance {fmt_tolerance(rule)})")
        (out.worse if delta < 0 else out.improved).append(line)
    out.not_measured = sorted(set(baseline.metrics) - set(now))
    return out
