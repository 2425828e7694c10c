"""Diagnose a numeric check on the simulator path: attribution, first diverging
layer, recipes, artefacts, cost. Called by the ``sim_numerics`` stage and by
``qnn-ci sim --diagnose``.

1. Attribution from the comparisons ``NumericsResult`` already holds (simulator
   vs fp32, QDQ on CPU vs fp32): ``qnn_ci.diagnose.attribution``.
2. Where the error enters:
   - quantization / both / none (on demand): the per-layer sweep, fp32 vs the
     QDQ model on onnxruntime CPU with every intermediate exposed, over the
     held-out samples (``qnn_ci.diagnose.sweep``); path ``qdq-cpu``;
   - htp: bisection with a few simulated runs of the QDQ model with chosen
     tensors exposed, against the QDQ model on CPU (``bisect_htp``); path
     ``sim-bisection``; it may use up to half of ``budget_s``.
3. Recipes (when ``advisor`` and something failed): ``qnn_ci.diagnose.advisor``
   with the remaining budget: each one prepared for the SoC and, best first,
   measured on its simulator (only that earns "passes").
4. Artefacts in ``out_dir``: layers.csv, diagnosis.json, layers.png.

Cost (``Diagnosis.cost``): ``sweep_s``, ``bisect_s``, ``advisor_s``,
``simulated_runs``, ``total_s`` and the reference
``fp32_plus_qdq_s_per_sample`` (one fp32 + one QDQ inference on CPU, sessions
already built) next to ``sweep_s_per_sample`` (both exposed models' inferences
and the metrics, per sample) and ``sweep_setup_s`` (exposing the tensors and
building the two sessions, once).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from qnn_ci.diagnose.artefacts import write_artefacts
from qnn_ci.diagnose.attribution import attribute
from qnn_ci.diagnose.layers import bounds_for
from qnn_ci.diagnose.model import HTP, NONE, Diagnosis
from qnn_ci.errors import UserError
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)

Feeds = dict[str, Any]
MIN_METRICS = ("cosine", "snr", "psnr")


def _failing_outputs(comparison: Any) -> list[str]:
    return [o.name for o in comparison.outputs if any(s.failed for s in o.samples)]


def worst_bounded(comparison: Any) -> dict[str, float | None]:
    """The worst value of each bounded metric over the outputs bounded by it."""
    out: dict[str, float | None] = {}
    for o in comparison.outputs:
        for metric in o.bounds:
            values = [s.metrics.value(metric) for s in o.samples if s.metrics is not None]
            seen = [float(v) for v in values if v is not None]
            if not seen:
                out.setdefault(metric, None)
                continue
            if any(math.isnan(v) for v in seen):
                out[metric] = math.nan
                continue
            w = min(seen) if metric in MIN_METRICS else max(seen)
            prev = out.get(metric)
            if prev is None or (w < prev if metric in MIN_METRICS else w > prev):
                out[metric] = w
    return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _reference_cost(float_model: Path, qdq_model: Path, sample: Feeds) -> float:
    """Seconds of one fp32 + one QDQ inference on onnxruntime CPU (sessions built,
    one warm-up run each)."""
    from qnn_ci.diagnose.intermediates import cpu_session

    total = 0.0
    for path in (float_model, qdq_model):
        sess = cpu_session(path)
        names = [o.name for o in sess.get_outputs()]
        sess.run(names, sample)
        start = time.monotonic()
        sess.run(names, sample)
        total += time.monotonic() - start
    return total


def diagnose_sim(*, float_model: Path, qdq_model: Path, ctx_model: Path | None, soc: SocInfo,
                 numerics: Any | None, calibration: Sequence[Feeds],
                 held_out: Sequence[Feeds], settings: Any, thresholds: Any, out_dir: Path,
                 budget_s: float, advisor: bool = True,
                 progress: Callable[[str], None] | None = None) -> Diagnosis:
    """Diagnose (see the module docstring). ``float_model``: the export's fp32
    model (static shapes) that ``qdq_model`` was quantized from; ``numerics``: the
    ``qnn_ci.sim.numerics.NumericsResult`` of the check (None: no attribution).
    ``ctx_model`` is the prepared model the check ran (kept for the record; the
    bisection prepares its own copies)."""
    start = time.monotonic()

    def say(line: str) -> None:
        log.info("diagnosis: %s", line)
        if progress is not None:
            progress(line)

    out_dir.mkdir(parents=True, exist_ok=True)
    diag = Diagnosis(NONE)
    if numerics is None:
        diag.detail = "no numeric check to attribute"
    else:
        diag.attribution, diag.detail = attribute(numerics.comparison, numerics.qdq_cpu)
    say(f"attribution: {diag.attribution} ({diag.detail})")
    from qnn_ci.diagnose.sweep import float_model_of

    folded = float_model_of(qdq_model)
    if folded is None:
        folded = float_model
        diag.notes.append(f"no {qdq_model.name.removesuffix('.onnx')}.float.onnx beside the "
                          "QDQ model: compared with the export's model (tensor names of "
                          "folded Constants / fused BatchNormalization will not line up)")
    failing = _failing_outputs(numerics.comparison) if numerics is not None else []
    outputs = failing or ([o.name for o in numerics.comparison.outputs] if numerics else [])
    bounds = bounds_for(thresholds, outputs)
    diag.bounds = dict(bounds)
    samples = list(held_out)
    if diag.attribution == HTP:
        _bisect(diag, folded, qdq_model, soc, samples, bounds, out_dir, budget_s, say)
    else:
        _sweep(diag, folded, qdq_model, samples, bounds, out_dir, say)
    if samples and "sweep_s" in diag.cost:
        try:
            diag.cost["fp32_plus_qdq_s_per_sample"] = _reference_cost(folded, qdq_model,
                                                                      samples[0])
        except Exception as exc:       # only a yardstick: never fail the diagnosis on it
            log.debug("reference cost not measured: %s", exc)
    if advisor and diag.attribution != NONE:
        remaining = max(0.0, budget_s - (time.monotonic() - start))
        _advise(diag, float_model, qdq_model, calibration, samples, settings, soc, thresholds,
                numerics, out_dir, remaining, say)
    elif advisor:
        diag.notes.append("recipe advisor not run: nothing failed")
    diag.cost["total_s"] = time.monotonic() - start
    write_artefacts(diag, out_dir, bounds.get("cosine"))
    say(f"done in {diag.cost['total_s']:.1f} s; artefacts in {out_dir}")
    return diag


def _sweep(diag: Diagnosis, folded: Path, qdq_model: Path, samples: Sequence[Feeds],
           bounds: dict[str, float], out_dir: Path, say: Callable[[str], None]) -> None:
    from qnn_ci.diagnose.sweep import sweep_qdq_cpu

    if not samples:
        diag.notes.append("per-layer sweep not run: no held-out samples")
        return
    say(f"per-layer sweep: fp32 vs the QDQ model on CPU, {len(samples)} sample(s)")
    try:
        res = sweep_qdq_cpu(folded, qdq_model, samples, bounds, out_dir / "work",
                            progress=say)
    except UserError:
        raise
    except Exception as exc:           # onnxruntime refusing an exposed model, ...
        log.debug("per-layer sweep failed", exc_info=True)
        diag.notes.append(f"per-layer sweep failed: {_first_line(exc)}")
        return
    diag.path = "qdq-cpu"
    diag.layers, diag.first_divergence = res.report.layers, res.report.first
    diag.worst_jumps = res.report.jumps
    diag.cost["sweep_s"] = res.seconds
    diag.cost["sweep_setup_s"] = res.setup_s
    diag.cost["sweep_s_per_sample"] = res.run_s / max(1, res.samples)
    diag.cost["tensors_compared"] = float(res.report.compared)
    if res.names.missing:
        diag.notes.append(f"{len(res.names.missing)} float tensor(s) are not in the quantized "
                          "model (fused by the quantizer) and were not compared")
    say(f"per-layer sweep: {res.report.compared} tensor(s) compared in {res.seconds:.1f} s"
        + (f"; first divergence {res.report.first.tensor!r}" if res.report.first else
           "; no tensor crosses the bound"))


def _bisect(diag: Diagnosis, folded: Path, qdq_model: Path, soc: SocInfo,
            samples: Sequence[Feeds], bounds: dict[str, float], out_dir: Path,
            budget_s: float, say: Callable[[str], None]) -> None:
    from qnn_ci.diagnose.bisect_htp import bisect_htp

    if not samples:
        diag.notes.append("bisection not run: no held-out samples")
        return
    say("bisection: simulator vs the QDQ model on CPU, 1 sample")
    try:
        res = bisect_htp(float_model=folded, qdq_model=qdq_model, soc=soc, sample=samples[0],
                         bounds=bounds, work_dir=out_dir / "bisect", budget_s=budget_s / 2,
                         progress=say)
    except UserError:
        raise
    except Exception as exc:           # a simulator failure must not hide the verdict
        log.debug("bisection failed", exc_info=True)
        diag.notes.append(f"bisection failed: {_first_line(exc)}")
        return
    diag.path = "sim-bisection"
    diag.layers, diag.first_divergence, diag.worst_jumps = res.layers, res.first, res.jumps
    diag.notes += res.notes
    diag.cost["bisect_s"] = res.seconds
    diag.cost["simulated_runs"] = float(res.runs)
    say(f"bisection: {res.runs} simulated run(s) in {res.seconds:.1f} s"
        + (f"; first departure {res.first.tensor!r}" if res.first else ""))


def _advise(diag: Diagnosis, float_model: Path, qdq_model: Path,
            calibration: Sequence[Feeds], held_out: Sequence[Feeds], settings: Any,
            soc: SocInfo, thresholds: Any, numerics: Any, out_dir: Path, budget_s: float,
            say: Callable[[str], None]) -> None:
    try:
        from qnn_ci.diagnose.advisor import advise, nothing_passes
    except ImportError as exc:
        diag.notes.append(f"recipe advisor not available: {exc}")
        return
    baseline = worst_bounded(numerics.comparison)
    cpu_baseline = (worst_bounded(numerics.qdq_cpu) if numerics.qdq_cpu is not None
                    else baseline)
    focus = [diag.first_divergence.node] if diag.first_divergence is not None else []
    top = max((m.jump or 0.0 for m in diag.worst_jumps), default=0.0)
    for m in diag.worst_jumps:         # the jumps that matter: >= 10 % of the largest
        if (m.jump or 0.0) >= 0.1 * top and m.node not in focus:
            focus.append(m.node)
    start = time.monotonic()
    say(f"recipe advisor: budget {budget_s:.0f} s, focus {', '.join(focus) or '-'}")
    try:
        diag.recipes = advise(float_model=float_model, calibration=calibration,
                              held_out=held_out, base=settings, soc=soc, thresholds=thresholds,
                              focus_nodes=focus, baseline=baseline, cpu_baseline=cpu_baseline,
                              baseline_model=qdq_model, out_dir=out_dir, budget_s=budget_s,
                              progress=say)
        diag.advice = nothing_passes(diag.recipes, soc)
    except Exception as exc:           # the advisor must not hide the diagnosis
        log.debug("recipe advisor failed", exc_info=True)
        text = exc.oneline() if isinstance(exc, UserError) else str(exc)
        diag.notes.append(f"recipe advisor failed: {(text.strip().splitlines() or [''])[0]}")
    diag.cost["advisor_s"] = time.monotonic() - start
    diag.cost["recipes"] = float(len(diag.recipes))
