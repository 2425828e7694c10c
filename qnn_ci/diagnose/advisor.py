"""The recipe advisor: try the usual remedies for a failing numeric check within a
time budget and report each one measured, best first.

Each recipe of ``qnn_ci.diagnose.recipes.catalogue`` is quantized with the
calibration samples (``quantize_for_htp``) into ``out_dir/recipes/<name>/``, the
QDQ model runs on onnxruntime CPU over the held-out samples and is compared with
the fp32 model under the export's thresholds (``qnn_ci.compare``): the worst value
of every bounded metric, and whether every output passes. Recipes onnxruntime
cannot reproduce (mse, sqnr calibration; float layers on a SoC without FP16) are
listed with the reason and no number. When no recipe passes and budget remains,
the best two recipes of different groups are tried together. With ``simulate``,
the best passing (else the best) recipe is measured again on the HTP simulator,
whose numbers then head the recipe (``measured_on="simulator"``, the CPU numbers in ``qdq_worst``).

Budget: before a recipe starts, its cost is estimated as the mean of those done
(the first is always allowed); a recipe that would overflow is not tried and is
listed with "not tried: budget (N s) spent". Progress: ``progress(line)`` and an
INFO log line at every recipe's start and end, with the elapsed time.

Ordering: passing recipes first, then by the baseline's failing metric (cosine,
snr: higher is better; max_abs, mean_abs: lower is better), then recipes without
a number.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import onnx

from qnn_ci.compare import compare_sets, load_output_set
from qnn_ci.compare.thresholds import MIN_METRICS
from qnn_ci.diagnose.model import Recipe
from qnn_ci.diagnose.recipe_encodings import (
    LayerPlan,
    float_encodings,
    int16_weight_encodings,
    resolve_focus,
    write_overrides,
)
from qnn_ci.diagnose.recipes import (
    LAYERS_16BIT,
    LAYERS_FLOAT,
    OVERRIDES,
    Candidate,
    catalogue,
    combine,
    flags_for,
    yaml_for,
)
from qnn_ci.errors import UserError
from qnn_ci.sim.quantize import QuantSettings
from qnn_ci.sim.samples import Feeds
from qnn_ci.spec import Thresholds
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)

SIM_SAMPLES = 2             # simulated inferences per re-measured recipe (slow)
SIM_RECIPES = 2             # recipes re-measured on the simulator at most
QDQ_CPU, SIMULATOR = "qdq-cpu", "simulator"


def _budget_text(budget_s: float) -> str:
    return f"{budget_s:g}"


class _Run:
    """State of one ``advise`` call: clock, budget, progress, the reference outputs."""

    def __init__(self, out_dir: Path, budget_s: float,
                 progress: Callable[[str], None] | None) -> None:
        self.root = out_dir / "recipes"
        self.budget_s = max(0.0, float(budget_s))
        self.start = time.monotonic()
        self.progress = progress
        self.costs: list[float] = []
        self.sim_costs: list[float] = []
        self.ref_dir: Path | None = None
        self.expected: dict[str, tuple[str, tuple[int, ...]]] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, line: str) -> None:
        text = f"advisor: {line} ({self.elapsed():.1f} s elapsed)"
        log.info("%s", text)
        if self.progress is not None:
            self.progress(text)

    def fits(self, costs: list[float] | None = None) -> bool:
        """Whether one more recipe (costing the mean of ``costs``, by default the
        recipes measured so far) fits the budget; the first always does."""
        costs = self.costs if costs is None else costs
        if not costs:
            return True
        estimate = sum(costs) / len(costs)
        return self.elapsed() + estimate <= self.budget_s


def _session(model: Path) -> Any:
    from qnn_ci.sim.numerics import cpu_session

    return cpu_session(model)


def _worst(comparison: Any) -> dict[str, float | None]:
    """The worst value of every metric that has a bound, over outputs that bound it."""
    worst: dict[str, float | None] = {}
    for out in comparison.outputs:
        for metric in out.bounds:
            for s in out.samples:
                v = s.metrics.value(metric) if s.metrics else None
                if v is None:
                    worst.setdefault(metric, None)
                    continue
                old = worst.get(metric)
                if old is None or _worse(metric, v, old):
                    worst[metric] = float(v)
    return worst


def _worse(metric: str, a: float, b: float) -> bool:
    if math.isnan(a):
        return not math.isnan(b)
    if math.isnan(b):
        return False
    return a < b if metric in MIN_METRICS else a > b


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _measure(run: _Run, cand: Candidate, float_model: Path, calibration: Sequence[Feeds],
             held_out: Sequence[Feeds], base: QuantSettings, thresholds: Thresholds
             ) -> tuple[Recipe, Path | None]:
    """Quantize with ``cand`` and compare the QDQ model on CPU with fp32."""
    from qnn_ci.sim.numerics import output_steps, run_all, write_outputs
    from qnn_ci.sim.quantize import quantize_for_htp

    folder = run.root / cand.name
    shutil.rmtree(folder, ignore_errors=True)
    start = time.monotonic()
    recipe = _recipe(cand)
    try:
        settings = dataclasses.replace(base, **cand.quant_changes())
        result = quantize_for_htp(float_model, folder / "model.qdq.onnx", calibration, settings,
                                  log_path=folder / "quantize.log")
        outputs, _ = run_all(_session(result.model), held_out)
        test_dir = write_outputs(folder / "qdq_cpu", outputs)
        assert run.ref_dir is not None
        comparison = compare_sets(load_output_set(run.ref_dir), load_output_set(test_dir),
                                  thresholds, expected=run.expected,
                                  quant_steps=output_steps(result.model))
    except Exception as exc:   # one recipe's failure (UserError too) is its result
        recipe.note = f"failed: {_first_line(exc)}"
        recipe.duration_s = time.monotonic() - start
        log.debug("recipe %s failed", cand.name, exc_info=True)
        return recipe, None
    recipe.worst = _worst(comparison)
    recipe.passes = bool(comparison.passed)
    recipe.files["qdq_model"] = str(result.model)
    recipe.duration_s = time.monotonic() - start
    return recipe, result.model


def _recipe(cand: Candidate) -> Recipe:
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in cand.settings.items()
                if not (k == OVERRIDES and not v)}          # a layer file never written
    return Recipe(name=cand.name, settings=settings, flags=flags_for(settings), worst={},
                  passes=False, note=cand.note, files=dict(cand.files), yaml=yaml_for(settings))


def _prepared_model(float_model: Path) -> onnx.ModelProto:
    """The float model as ``quantize_for_htp`` sees it (tensor names line up)."""
    from qnn_ci.sim.constants import fold_constants
    from qnn_ci.sim.fusion import fuse_batchnorm

    model = onnx.load(str(float_model))
    fold_constants(model)
    fuse_batchnorm(model)
    return model


def _layer_file(run: _Run, cand: Candidate, plan: LayerPlan, model: onnx.ModelProto,
                base: QuantSettings) -> str:
    """Write the per-layer recipe's overrides file; fill its settings. Returns a note."""
    if cand.kind == LAYERS_16BIT:
        acts: dict[str, list[dict[str, Any]]] = {}
        params = int16_weight_encodings(plan, per_channel=bool(base.per_channel))
        if not params:
            raise UserError("the focus layers have no weights to keep at 16 bits")
        what = f"weights of {', '.join(plan.node_names[:4])} at 16 bits"
    else:
        acts, params = float_encodings(plan, model)
        what = f"{', '.join(plan.node_names[:4])} kept float (FP16 on the HTP)"
    path = run.root / f"{cand.name}.encodings"
    merged = write_overrides(path, acts, params, base=base.overrides)
    cand.settings[OVERRIDES] = str(path)
    cand.files["overrides"] = str(path)
    fused = [n for n in params if n.endswith("_bnfused")]
    notes = [what, merged,
             f"{len(fused)} weight name(s) are qnn-ci's BatchNormalization folds "
             "(the converter names its folds differently)" if fused else ""]
    return "; ".join(n for n in notes if n)


def _key_metric(baseline: dict[str, float | None], thresholds: Thresholds) -> str:
    """The metric the recipes are ranked by: the baseline's failing one."""
    bounds: dict[str, list[float]] = {}
    for per in (thresholds.default, *thresholds.per_output.values()):
        for m, b in per.items():
            bounds.setdefault(m, []).append(b)
    for m, v in baseline.items():
        if v is None or m not in bounds:
            continue
        if any(not (v >= b if m in MIN_METRICS else v <= b) for b in bounds[m]):
            return m
    return next(iter(baseline), None) or next(iter(thresholds.default), "cosine")


def _rank(recipes: list[Recipe], metric: str) -> list[Recipe]:
    def key(r: Recipe) -> tuple[int, int, float, int, str]:
        v = r.worst.get(metric)
        if v is None:
            v = next((x for x in r.worst.values() if x is not None), None)
        parts = r.name.count("+")              # the simpler recipe first on a tie
        if v is None or math.isnan(v):
            return (1, 1, 0.0, parts, r.name)
        score = -v if metric in MIN_METRICS else v
        return (0 if r.passes else 1, 0, score, parts, r.name)

    return sorted(recipes, key=key)


def _simulate(run: _Run, recipe: Recipe, qdq_model: Path, float_model: Path, soc: SocInfo,
              held_out: Sequence[Feeds], thresholds: Thresholds, settings: QuantSettings
              ) -> None:
    """Measure ``recipe`` again on the HTP simulator (its QDQ model as it is)."""
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.numerics import simulate_and_compare
    from qnn_ci.sim.quantize import QuantizeResult

    folder = run.root / recipe.name / "sim"
    made = QuantizeResult(qdq_model, 0, 0)

    def reuse(*_: Any) -> QuantizeResult:
        return made

    samples = list(held_out[:SIM_SAMPLES])
    start = time.monotonic()
    try:
        report = check_htp(float_model, folder, soc, samples, settings, quantizer=reuse)
        prep = report.prepare
        if prep is None or not prep.prepared or prep.ctx_model is None:
            why = prep.error if prep is not None and prep.error else report.summary_line()
            recipe.passes = False              # the numbers are the CPU's; the HTP refuses it
            recipe.note = _join(recipe.note, f"simulator: {soc.name} did not prepare it "
                                             f"({_first_line(RuntimeError(why))})")
            return
        numerics = simulate_and_compare(float_model, qdq_model, prep.ctx_model, soc, samples,
                                        thresholds, folder / "numerics")
    except Exception as exc:
        recipe.note = _join(recipe.note, f"simulator: failed ({_first_line(exc)})")
        log.debug("simulating recipe %s failed", recipe.name, exc_info=True)
        return
    finally:
        recipe.duration_s += time.monotonic() - start
    recipe.qdq_worst = dict(recipe.worst)
    recipe.worst = _worst(numerics.comparison)
    recipe.passes = bool(numerics.comparison.passed)
    recipe.measured_on = SIMULATOR
    recipe.files["simulator"] = str(folder)
    recipe.note = _join(recipe.note, f"simulator: {len(samples)} held-out sample(s) on "
                                     f"{soc.name}")


def _join(a: str, b: str) -> str:
    return "; ".join(x for x in (a, b) if x)


def advise(*, float_model: Path, calibration: Sequence[Feeds], held_out: Sequence[Feeds],
           base: QuantSettings, soc: SocInfo, thresholds: Thresholds, focus_nodes: Sequence[str],
           baseline: dict[str, float | None], out_dir: Path, budget_s: float, simulate: bool,
           progress: Callable[[str], None] | None = None) -> list[Recipe]:
    """Try the remedies (see the module docstring) and return them measured, best
    first. ``base`` is the export's ``QuantSettings``; ``baseline`` the worst metric
    values with it (shown as "before" on every recipe); ``focus_nodes`` the nodes
    (names, output tensors or ``Op#index``) of the first divergence and the worst
    jumps. Files go below ``out_dir/recipes/``. Never raises for a recipe that
    fails: its note says why."""
    run = _Run(Path(out_dir), budget_s, progress)
    if not calibration:
        run.say("nothing to try: no calibration samples")
        return []
    samples = list(held_out) or list(calibration)
    model = _prepared_model(float_model)
    plan = resolve_focus(model, focus_nodes)
    if plan.unknown:
        log.info("advisor: focus name(s) not in the model: %s", ", ".join(plan.unknown[:5]))
    cands = catalogue(base, soc, has_focus=bool(plan.nodes))
    run.say(f"{sum(c.measurable for c in cands)} recipe(s) to try within "
            f"{_budget_text(run.budget_s)} s on {len(samples)} held-out sample(s)")
    _reference(run, float_model, samples)
    recipes: list[Recipe] = []
    models: dict[str, Path] = {}
    measured: dict[str, Candidate] = {}

    def attempt(cand: Candidate, index: str) -> None:
        if not cand.measurable:
            recipes.append(_recipe(cand))
            return
        if not run.fits():
            r = _recipe(cand)
            r.note = f"not tried: budget ({_budget_text(run.budget_s)} s) spent"
            recipes.append(r)
            run.say(f"{index} {cand.name}: skipped, budget spent")
            return
        run.say(f"{index} {cand.name}: start")
        start = time.monotonic()
        note = ""
        if cand.kind in (LAYERS_16BIT, LAYERS_FLOAT) and not cand.parts:
            try:
                note = _layer_file(run, cand, plan, model, base)
            except UserError as exc:
                r = _recipe(cand)
                r.note = f"not tried: {_first_line(exc)}"
                recipes.append(r)
                run.say(f"{index} {cand.name}: not tried ({r.note})")
                return
        recipe, qdq = _measure(run, cand, float_model, calibration, samples, base, thresholds)
        recipe.note = _join(note, recipe.note) if note else recipe.note
        recipe.baseline = {m: baseline[m] for m in recipe.worst if m in baseline}
        run.costs.append(time.monotonic() - start)
        recipes.append(recipe)
        if qdq is not None:
            models[recipe.name] = qdq
            measured[recipe.name] = cand
        run.say(f"{index} {cand.name}: {_outcome(recipe)} ({recipe.duration_s:.1f} s)")

    todo = [c for c in cands if c.measurable]
    for cand in cands:
        attempt(cand, f"[{todo.index(cand) + 1}/{len(todo)}]" if cand in todo else "[-]")
    metric = _key_metric(baseline, thresholds)
    ranked = _rank(recipes, metric)
    pair = None if any(r.passes for r in ranked) else _best_pair(ranked, measured)
    if pair is not None:
        attempt(pair, "[+]")
        ranked = _rank(recipes, metric)
    if simulate:
        _resimulate(run, ranked, models, float_model, soc, samples, thresholds, base)
        ranked = _rank(recipes, metric)
    run.say(f"done: {sum(bool(r.worst) for r in ranked)} measured, "
            f"{sum(r.passes for r in ranked)} passing")
    return ranked


def _reference(run: _Run, float_model: Path, samples: Sequence[Feeds]) -> None:
    from qnn_ci.sim.numerics import file_key, run_all, write_outputs

    shutil.rmtree(run.root / "reference", ignore_errors=True)
    ref, _ = run_all(_session(float_model), samples)
    run.expected = {file_key(k): (str(v.dtype), tuple(v.shape)) for k, v in ref[0].items()}
    run.ref_dir = write_outputs(run.root / "reference", ref)


def _best_pair(ranked: list[Recipe], measured: dict[str, Candidate]) -> Candidate | None:
    """The best two measured recipes of different groups, combined (None if none)."""
    usable = [measured[r.name] for r in ranked if r.name in measured and r.worst]
    if len(usable) < 2:
        return None
    first = usable[0]
    for other in usable[1:]:
        pair = combine(first, other)
        if pair is not None:
            return pair
    return None


def _resimulate(run: _Run, ranked: list[Recipe], models: dict[str, Path], float_model: Path,
                soc: SocInfo, samples: Sequence[Feeds], thresholds: Thresholds,
                base: QuantSettings) -> None:
    """Measure the passing recipes on the simulator, best first, until one passes
    there (at most ``SIM_RECIPES``); with none passing, the best one."""
    targets = [r for r in ranked if r.passes and r.name in models] or \
        [r for r in ranked if r.name in models][:1]
    for target in targets[:SIM_RECIPES]:
        if not run.fits(run.sim_costs) or run.elapsed() >= run.budget_s:
            target.note = _join(target.note, "not re-measured on the simulator: budget "
                                             f"({_budget_text(run.budget_s)} s) spent")
            run.say(f"simulator {target.name}: skipped, budget spent")
            return
        run.say(f"simulator {target.name}: start")
        start = time.monotonic()
        _simulate(run, target, models[target.name], float_model, soc, samples, thresholds, base)
        run.sim_costs.append(time.monotonic() - start)
        run.say(f"simulator {target.name}: {_outcome(target)}")
        if target.passes:
            return


def _outcome(r: Recipe) -> str:
    if not r.worst:
        return r.note or "no number"
    values = ", ".join(f"worst {m} {v:.6g}" if v is not None else f"worst {m} -"
                       for m, v in r.worst.items())
    return f"{values} — {'passes' if r.passes else 'still fails'}"
