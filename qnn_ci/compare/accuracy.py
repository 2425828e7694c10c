"""onnxruntime's QNN EP oracle for a quantized HTP result.

Truth is the float model run on CPU; the quantized model runs on the CPU backend
and on the HTP. Rule, per output and sample, over the positions where the truth
is finite:

    |htp - truth| <= |cpu - truth| + tolerance * range      for EVERY element

with ``range = max(truth) - min(truth)`` of that sample (floored at ``MIN_SPAN``
= 1e-6, so a constant truth still gets an allowance) and ``tolerance = 0.004``
(0.4 %) by default. onnxruntime takes the range from the output's quantisation
parameters; the truth's own range is the closest thing available without them.
A non-finite HTP value where truth and CPU are finite breaks the rule; where the
CPU result is non-finite the HTP cannot be worse.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from qnn_ci.compare.compare import size_findings
from qnn_ci.compare.metrics import DEFAULT_CHUNK, iter_chunks
from qnn_ci.compare.outputs import OutputSet, pair_outputs, pair_samples
from qnn_ci.engine.results import Finding, Severity

log = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 0.004
MIN_SPAN = 1e-6


def _truth_range(truth: np.ndarray, chunk: int) -> tuple[float, float] | None:
    lo, hi = math.inf, -math.inf
    for _s, (t,) in iter_chunks([truth], chunk=chunk):
        t = t[np.isfinite(t)]
        if len(t):
            lo, hi = min(lo, float(t.min())), max(hi, float(t.max()))
    return (lo, hi) if lo <= hi else None


def _check_one(label: str, name: str, truth: np.ndarray, cpu: np.ndarray, htp: np.ndarray,
               tolerance: float, chunk: int) -> Finding:
    rng = _truth_range(truth, chunk)
    if rng is None:
        return Finding("compare.nan_inf", f"{label}: the truth has no finite value",
                       subject=name)
    span = max(rng[1] - rng[0], MIN_SPAN)
    allowed = tolerance * span
    violations = 0
    worst = (-math.inf, -1, 0.0, 0.0)       # excess, index, |htp err|, |cpu err|
    for start, (t, c, h) in iter_chunks([truth, cpu, htp], chunk=chunk):
        t64 = t.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            err_h = np.abs(h.astype(np.float64) - t64)
            err_c = np.abs(c.astype(np.float64) - t64)
            excess = err_h - err_c
            bad = np.isfinite(t64) & ((excess > allowed)
                                      | (~np.isfinite(err_h) & np.isfinite(err_c)))
            # For the report: non-finite HTP errors rank above any finite excess.
            rank = np.where(bad & ~np.isfinite(excess), np.inf, excess)
            rank = np.where(np.isfinite(t64), rank, -np.inf)
        violations += int(np.count_nonzero(bad))
        i = int(np.nanargmax(rank)) if np.any(~np.isnan(rank)) else -1
        if i >= 0 and rank[i] > worst[0]:
            worst = (float(rank[i]), start + i, float(err_h[i]), float(err_c[i]))
    excess, index, eh, ec = worst
    need = excess / span if math.isfinite(excess) else math.inf
    if violations:
        return Finding(
            "compare.accuracy",
            f"{label}: the HTP is less accurate than the CPU backend on {violations} of "
            f"{len(truth)} elements beyond {tolerance:.3%} of the truth's range "
            f"{span:.4g} (= {allowed:.4g}); worst at index {index}: |htp-truth| {eh:.4g} vs "
            f"|cpu-truth| {ec:.4g}; loosest passing tolerance: {_pct_up(need)}",
            subject=name)
    return Finding(
        "compare.accuracy",
        f"{label}: the HTP is at least as accurate as the CPU backend within "
        f"{tolerance:.3%} of range {span:.4g} (largest excess {max(excess, 0.0):.4g}, "
        f"{max(need, 0.0):.3%} of range)", Severity.INFO, subject=name)


def _pct_up(fraction: float) -> str:
    if not math.isfinite(fraction):
        return "none (non-finite HTP values)"
    return f"{math.ceil(fraction * 1e5) / 1e3:g}%"


def accuracy_rule(truth: OutputSet, cpu: OutputSet, htp: OutputSet,
                  tolerance: float = DEFAULT_TOLERANCE, *,
                  chunk: int = DEFAULT_CHUNK) -> list[Finding]:
    """Findings per output and sample: ERROR ``compare.accuracy`` when the HTP is
    less accurate than the CPU backend beyond the tolerance, INFO when it holds;
    ``compare.missing`` / ``compare.short`` / ``compare.nan_inf`` as in compare_sets."""
    findings: list[Finding] = list(truth.findings + cpu.findings + htp.findings)
    cpu_pairs, found = pair_outputs(truth, cpu, ref_label="truth", test_label="cpu")
    findings += found
    htp_pairs, found = pair_outputs(truth, htp, ref_label="truth", test_label="htp")
    findings += found
    cpu_samples, found = pair_samples(truth, cpu, ref_label="truth", test_label="cpu")
    findings += found
    htp_samples, found = pair_samples(truth, htp, ref_label="truth", test_label="htp")
    findings += found
    cpu_of, htp_of = dict(cpu_pairs), dict(htp_pairs)
    cpu_sample, htp_sample = dict(cpu_samples), dict(htp_samples)
    for name in truth.names():
        if name not in cpu_of or name not in htp_of:
            continue
        for s in truth.samples:
            if s not in cpu_sample or s not in htp_sample:
                continue
            label = f"{name} sample {s}"
            srcs = (truth.source(name, s), cpu.source(cpu_of[name], cpu_sample[s]),
                    htp.source(htp_of[name], htp_sample[s]))
            if any(x is None for x in srcs):
                missing = [w for w, x in zip(("truth", "cpu", "htp"), srcs, strict=True)
                           if x is None]
                findings.append(Finding("compare.missing", f"{label}: no file in "
                                        f"{', '.join(missing)}", subject=name))
                continue
            t, c, h = srcs
            assert t is not None and c is not None and h is not None
            problems = size_findings(label, name, t, c, None) + size_findings(
                label, name, t, h, None)
            if problems:
                findings += problems
                continue
            findings.append(_check_one(label, name, t.open(), c.open(), h.open(),
                                       tolerance, chunk))
    return findings

