"""Compare two output sets sample by sample and judge them against thresholds."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qnn_ci.compare.metrics import DEFAULT_CHUNK, OutputMetrics, compute_metrics, json_float
from qnn_ci.compare.outputs import (
    ArraySource,
    OutputSet,
    match_names,
    pair_outputs,
    pair_samples,
)
from qnn_ci.compare.resolution import resolve_steps
from qnn_ci.compare.thresholds import MIN_METRICS, evaluate, failed_metrics, resolve_bounds
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.util.listing import cut_text

log = logging.getLogger(__name__)

HEADLINE_ORDER = ("cosine", "snr", "psnr", "max_abs", "mean_abs")
MORE_SHOWN = 3                 # failing outputs named after the headline one

Expected = Mapping[str, tuple[str | np.dtype | None, tuple[int, ...] | None]]


@dataclass
class SampleResult:
    """One output on one sample: its metrics, findings and the metrics out of bounds."""

    output: str
    sample: int
    metrics: OutputMetrics | None          # None: not compared (missing / short)
    findings: list[Finding] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)     # metrics out of bounds

    @property
    def verdict(self) -> str:
        errors = [f for f in self.findings if f.severity == Severity.ERROR]
        if not errors:
            return "ok"
        checks = list(self.failed)
        for f in errors:
            word = f.check.split(".", 1)[1]
            if f.check != "compare.threshold" and word not in checks:
                checks.append(word)
        return "FAIL " + ",".join(checks)

    def to_dict(self) -> dict[str, Any]:
        return {"sample": self.sample, "verdict": self.verdict,
                "metrics": self.metrics.to_dict() if self.metrics else None}


@dataclass
class OutputResult:
    """One output compared over every sample, with the bounds it was judged by."""

    name: str                              # the reference's key (or the expected name)
    test_key: str
    bounds: dict[str, float]
    samples: list[SampleResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "test_key": self.test_key, "bounds": self.bounds,
                "samples": [s.to_dict() for s in self.samples]}


@dataclass(frozen=True)
class Failure:
    """One output's metric that missed its bound, at its worst sample."""

    output: str
    metric: str
    value: float
    sample: int
    bound: float

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "metric": self.metric, "value": json_float(self.value),
                "sample": self.sample, "bound": json_float(self.bound)}


@dataclass
class Comparison:
    """Two output sets compared: the per-output results and every finding, in order."""

    reference: str
    test: str
    outputs: list[OutputResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)   # every finding, in order

    @property
    def passed(self) -> bool:
        return not any(f.severity == Severity.ERROR for f in self.findings)

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def worst(self, metric: str = "cosine", *, failing: bool = False
              ) -> tuple[float, str, int] | None:
        """(value, output, sample) of the worst ``metric`` over the outputs that have a
        bound for it (every output when none has); ``failing``: only the samples that
        missed that bound."""
        bounded = [o for o in self.outputs if metric in o.bounds]
        best: tuple[float, str, int] | None = None
        for out in bounded if (bounded or failing) else self.outputs:
            for s in out.samples:
                if failing and metric not in s.failed:
                    continue
                v = s.metrics.value(metric) if s.metrics else None
                if v is None:
                    continue
                if best is None or _worse(metric, v, best[0]):
                    best = (v, out.name, s.sample)
        return best

    def failing(self) -> list[Failure]:
        """Every (output, metric) that missed its bound, with its worst sample: worst
        first (metrics in HEADLINE_ORDER, then by value)."""
        found: dict[tuple[str, str], Failure] = {}
        for out in self.outputs:
            for s in out.samples:
                for metric in s.failed:
                    v = s.metrics.value(metric) if s.metrics else None
                    if v is None:
                        continue
                    cur = found.get((out.name, metric))
                    if cur is None or _worse(metric, v, cur.value):
                        found[(out.name, metric)] = Failure(out.name, metric, v, s.sample,
                                                            out.bounds[metric])
        return sorted(found.values(), key=_failure_rank)

    def summary_line(self) -> str:
        """``worst <metric> <value> (<output>, sample <n>)``: the worst output that FAILED
        its bound (``; +N more failing (...)`` when several did), else the worst output
        that has a bound; an output without a bound never headlines."""
        n_errors = len(self.errors())
        tail = f"; {n_errors} error{'s' if n_errors != 1 else ''}" if n_errors else ""
        failures = self.failing()
        if failures:
            top, rest = failures[0], failures[1:]
            head = f"worst {top.metric} {_show(top.metric, top.value)} ({top.output}, " \
                f"sample {top.sample})"
            if rest:
                head += f"; +{len(rest)} more failing (" + cut_text(
                    rest, MORE_SHOWN, render=lambda f: f"{f.output} {f.metric} "
                    f"{_show(f.metric, f.value)}") + ")"
            return head + tail
        for metric in HEADLINE_ORDER:
            if not any(metric in o.bounds for o in self.outputs):
                continue
            w = self.worst(metric)
            if w is not None:
                return f"worst {metric} {_show(metric, w[0])} ({w[1]}, sample {w[2]}){tail}"
        w = self.worst("cosine")                      # no bound at all: the usual metric
        if w is not None:
            return f"worst cosine {_show('cosine', w[0])} ({w[1]}, sample {w[2]}){tail}"
        return f"nothing compared{tail}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "passed": self.passed, "summary": self.summary_line(),
            "failing": [f.to_dict() for f in self.failing()],
            "reference": self.reference, "test": self.test,
            "outputs": [o.to_dict() for o in self.outputs],
            "findings": [f.to_dict() for f in self.findings],
        }
        for out in d["outputs"]:
            out["bounds"] = {k: json_float(v) for k, v in out["bounds"].items()}
        return d


def _show(metric: str, value: float) -> str:
    return f"{value:.6f}" if metric == "cosine" else f"{value:.4g}"


def _failure_rank(f: Failure) -> tuple[int, int, float]:
    """Sort key, worst first: metric order, then NaN, then the value (a minimum
    metric's lowest, a maximum metric's highest first)."""
    order = HEADLINE_ORDER.index(f.metric) if f.metric in HEADLINE_ORDER else len(HEADLINE_ORDER)
    if math.isnan(f.value):
        return order, 0, 0.0
    return order, 1, f.value if f.metric in MIN_METRICS else -f.value


def _worse(metric: str, a: float, b: float) -> bool:
    if math.isnan(a):
        return not math.isnan(b)
    return a < b if metric in MIN_METRICS else a > b


def size_findings(label: str, output: str, ref: ArraySource, test: ArraySource,
                  shape: tuple[int, ...] | None) -> list[Finding]:
    """compare.missing / compare.short findings that stop a pair being compared."""
    out: list[Finding] = []
    for side, src in (("reference", ref), ("test", test)):
        if src.dtype is None:
            out.append(Finding("compare.missing", f"{label}: {src.path} is a native file of "
                               "unknown dtype and no float .raw sits beside it; give its "
                               "dtype (--dtype uint8, or the export's output dtype)",
                               subject=output))
        elif problem := src.size_problem():
            out.append(Finding("compare.short", f"{label}: {side} {problem}", subject=output))
    if out:
        return out
    if shape is not None:
        want = math.prod(shape)
        for side, src in (("reference", ref), ("test", test)):
            if src.count != want:
                word = "short" if src.count < want else "long"
                out.append(Finding("compare.short", f"{label}: {side} {src.path} has "
                                   f"{src.count} elements, expected {want} (shape "
                                   f"{list(shape)}): {word}", subject=output))
        return out
    if ref.count != test.count:
        shorter = "test" if test.count < ref.count else "reference"
        out.append(Finding("compare.short", f"{label}: {shorter} is shorter: test {test.path} "
                           f"has {test.count} elements, reference {ref.path} {ref.count}",
                           subject=output))
    return out


def _expected_by_key(expected: Expected | None, keys: list[str]) -> dict[str, tuple[Any, Any]]:
    """``expected`` re-keyed by file key; its names may be graph or sanitised names."""
    if not expected:
        return {}
    found = {name: name for name in expected if name in keys}
    rest = [k for k in keys if k not in found.values()]
    found |= match_names([n for n in expected if n not in found], rest)
    out = {}
    for name, key in found.items():
        dtype, shape = expected[name]
        out[key] = (dtype, tuple(shape) if shape is not None else None)
    for name in expected:
        if name not in found:
            log.info("expected output %r matches no compared output", name)
    return out


def compare_sets(reference: OutputSet, test: OutputSet, thresholds: Thresholds | None = None,
                 *, expected: Expected | None = None,
                 quant_steps: Mapping[str, float] | None = None,
                 chunk: int = DEFAULT_CHUNK) -> Comparison:
    """Compare every output of ``test`` with ``reference``, sample by sample.

    ``expected``: output name -> (dtype, shape): the dtype applies to ``.raw``
    files (``.npy`` carry their own), the shape's element count is checked.
    ``quant_steps``: output name -> its quantization step (scale), ``""`` for
    every output; it sets when a reference counts as near zero
    (``qnn_ci.compare.resolution``). Raises UserError when a per-output
    threshold or step names no output.
    """
    thresholds = thresholds or Thresholds()
    comp = Comparison(str(reference.root), str(test.root))
    comp.findings += reference.findings + test.findings
    pairs, found = pair_outputs(reference, test)
    comp.findings += found
    samples, found = pair_samples(reference, test)
    comp.findings += found
    bounds = resolve_bounds(thresholds, [r for r, _ in pairs])
    steps = resolve_steps(quant_steps, [r for r, _ in pairs])
    wanted = _expected_by_key(expected, [r for r, _ in pairs])
    for rkey, tkey in pairs:
        result = OutputResult(rkey, tkey, bounds[rkey])
        comp.outputs.append(result)
        dtype, shape = wanted.get(rkey, (None, None))
        for rs, ts in samples:
            result.samples.append(_compare_one(reference, test, rkey, tkey, rs, ts,
                                               dtype, shape, chunk, steps.get(rkey)))
        compared = [s.metrics for s in result.samples if s.metrics is not None]
        for s in result.samples:
            if s.metrics is not None:
                s.findings += evaluate(rkey, s.sample, s.metrics, result.bounds,
                                       across=compared)
                s.failed = failed_metrics(s.metrics, result.bounds)
            comp.findings += s.findings
    log.info("compare %s vs %s: %s", reference.root, test.root, comp.summary_line())
    return comp


def _compare_one(reference: OutputSet, test: OutputSet, rkey: str, tkey: str, rs: int,
                 ts: int, dtype: Any, shape: tuple[int, ...] | None,
                 chunk: int, step: float | None) -> SampleResult:
    label = f"{rkey} sample {rs}"
    result = SampleResult(rkey, rs, None)
    rsrc, tsrc = reference.source(rkey, rs), test.source(tkey, ts)
    if rsrc is None or tsrc is None:
        side, root = ("reference", reference.root) if rsrc is None else ("test", test.root)
        result.findings.append(Finding("compare.missing", f"{label}: {side} {root} has no "
                                       f"file for it in sample {rs if rsrc is None else ts}",
                                       subject=rkey))
        return result
    rsrc, tsrc = rsrc.with_dtype(dtype), tsrc.with_dtype(dtype)
    result.findings += size_findings(label, rkey, rsrc, tsrc, shape)
    if result.findings:
        return result
    result.metrics = compute_metrics(rsrc.open(), tsrc.open(), chunk=chunk, resolution=step)
    return result


def metric_properties(comp: Comparison, prefix: str,
                      metrics: tuple[str, ...] = ("cosine", "max_abs", "snr"),
                      thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Report properties: per output, the worst value over samples
    (``<prefix>.<output>.<metric>``), how many samples had a near-zero reference
    (``<prefix>.<output>.near_zero_samples``, only when some did: their relative
    metrics are not computed) and, with ``thresholds``, each bound that applied
    (``<prefix>.<output>.<metric>.min`` / ``.max``)."""
    props: dict[str, Any] = {}
    for out in comp.outputs:
        near = sum(1 for s in out.samples if s.metrics and s.metrics.reference_near_zero)
        if near:
            props[f"{prefix}.{out.name}.near_zero_samples"] = near
        for metric in metrics:
            values = [s.metrics.value(metric) for s in out.samples if s.metrics]
            values = [v for v in values if v is not None and not math.isnan(v)]
            if values:
                worst = max(values) if metric in ("max_abs", "mean_abs") else min(values)
                props[f"{prefix}.{out.name}.{metric}"] = (
                    round(worst, 6) if math.isfinite(worst) else str(worst))
        if thresholds is not None:
            for metric, bound in thresholds.for_output(out.name).items():
                side = "max" if metric in ("max_abs", "mean_abs") else "min"
                props[f"{prefix}.{out.name}.{metric}.{side}"] = bound
    return props
