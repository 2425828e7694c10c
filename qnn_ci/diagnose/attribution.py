"""Attribution: is a failing numeric check quantization loss, HTP loss, or both?

``attribute(target, reference)`` takes two comparisons against the same fp32
outputs:

- ``target``: the run that was judged and failed: the HTP (the simulator on the
  simulator path, the board's HTP backend on the board path);
- ``reference``: the same quantized graph run where only quantization can lose:
  the QDQ model on onnxruntime CPU (simulator path), or the board's CPU backend
  running the converter's quantized graph (board path; helper code passes its own
  ``labels``). ``None``: nothing to attribute with.

Only (output, metric) pairs that FAIL their bound on the target side count;
outputs without a bound never do. For each, the error size is compared
(cosine: ``1 - c``; SNR/PSNR: noise power ``10^(-dB/10)``; max_abs/mean_abs: the
value itself), worst sample on each side:

- the reference also fails that bound, or its error is within ``CLEARLY_WORSE``
  (2x) of the target's -> quantization (the quantized graph is already about as
  bad; what the HTP adds is small);
- the reference passes and the target's error is more than 2x the reference's ->
  htp;
- the reference fails AND the target's error is more than 2x the reference's ->
  both.

Several failing pairs with different verdicts -> both. Nothing failed a bound
-> none.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from qnn_ci.diagnose.model import BOTH, HTP, NONE, QUANTIZATION

CLEARLY_WORSE = 2.0          # the target's error must exceed the reference's by this factor
MIN_METRICS = ("cosine", "snr", "psnr")


@dataclass(frozen=True)
class Labels:
    """How the two sides are named in the detail line."""

    target: str = "simulator"
    reference: str = "QDQ on CPU"


SIM_LABELS = Labels()
BOARD_LABELS = Labels("HTP backend", "CPU backend")


@dataclass(frozen=True)
class _Failure:
    """One output's metric that failed its bound: target and reference values, the verdict."""

    output: str
    metric: str
    target: float
    reference: float | None
    reference_fails: bool
    verdict: str


def error_size(metric: str, value: float) -> float:
    """How big the error a metric value means is (larger = worse), comparable
    between two values of the same metric."""
    if math.isnan(value):
        return math.inf
    if metric == "cosine":
        return 1.0 - value
    if metric in ("snr", "psnr"):
        return 10.0 ** min(300.0, -value / 10.0)     # inf dB -> 0.0, -inf dB -> 1e300
    return abs(value)


def _passes(metric: str, value: float, bound: float) -> bool:
    if math.isnan(value):
        return False
    return value >= bound if metric in MIN_METRICS else value <= bound


def _worst(comp: Any, output: str, metric: str) -> float | None:
    """The worst value of ``metric`` for ``output`` over the compared samples."""
    values = [s.metrics.value(metric) for o in comp.outputs if o.name == output
              for s in o.samples if s.metrics is not None]
    seen = [float(v) for v in values if v is not None]
    if not seen:
        return None
    if any(math.isnan(v) for v in seen):
        return math.nan
    return min(seen) if metric in MIN_METRICS else max(seen)


def _failing(comp: Any) -> Iterator[tuple[str, str, float, float]]:
    """(output, metric, worst value, bound) for each bound the comparison misses."""
    for out in comp.outputs:
        failed = {m for s in out.samples for m in s.failed}
        for metric in sorted(failed):
            bound = out.bounds.get(metric)
            value = _worst(comp, out.name, metric)
            if bound is not None and value is not None:
                yield out.name, metric, value, float(bound)


def _verdict(metric: str, target: float, reference: float | None, bound: float
             ) -> tuple[bool, str]:
    if reference is None:
        return False, HTP
    ref_fails = not _passes(metric, reference, bound)
    t_err, r_err = error_size(metric, target), error_size(metric, reference)
    clearly_worse = t_err > CLEARLY_WORSE * r_err
    if not ref_fails:
        return False, HTP if clearly_worse else QUANTIZATION
    return True, BOTH if clearly_worse else QUANTIZATION


def _fmt(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.6f}" if metric == "cosine" else f"{value:.4g}"


def attribute(target: Any, reference: Any | None, thresholds: Any = None, *,
              labels: Labels = SIM_LABELS) -> tuple[str, str]:
    """(attribution, one-line detail with the numbers), see the module docstring.

    ``target`` / ``reference``: ``qnn_ci.compare.Comparison`` of the HTP run and
    of the quantized-graph reference run, both against the same fp32 outputs
    (simulator path: ``NumericsResult.comparison`` and ``.qdq_cpu``; board path:
    HTP backend vs fp32 and CPU backend vs fp32). ``thresholds`` is accepted for
    symmetry; the bounds applied are the ones recorded in ``target``.
    """
    del thresholds  # the bounds each output was judged by are in the comparison
    if reference is None:
        return NONE, (f"no {labels.reference} comparison to attribute the loss with")
    failures: list[_Failure] = []
    for output, metric, value, bound in _failing(target):
        ref_value = _worst(reference, output, metric)
        ref_fails, verdict = _verdict(metric, value, ref_value, bound)
        failures.append(_Failure(output, metric, value, ref_value, ref_fails, verdict))
    if not failures:
        why = "nothing failed its bound" if target.passed else \
            "the failure is not a metric bound (see the comparison's findings)"
        return NONE, why
    verdicts = {f.verdict for f in failures}
    attribution = verdicts.pop() if len(verdicts) == 1 else BOTH
    worst = max(failures, key=lambda f: error_size(f.metric, f.target))
    detail = (f"{labels.reference} worst {worst.metric} {_fmt(worst.metric, worst.reference)}"
              f" vs {labels.target} {_fmt(worst.metric, worst.target)} on {worst.output!r}")
    if len(failures) > 1:
        detail += f"; +{len(failures) - 1} more failing"
    return attribution, detail
