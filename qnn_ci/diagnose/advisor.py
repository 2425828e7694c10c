"""The recipe advisor: try the usual remedies for a failing numeric check within a
time budget, and judge each one where the check is judged -- prepared for the
export's SoC and measured on its simulator.

Each recipe of ``qnn_ci.diagnose.recipes.catalogue`` goes through the steps of
``qnn_ci.diagnose.recipe_measure``: quantized into ``out_dir/recipes/<name>/``;
"no change from the baseline" when its quantization parameters equal the
export's (no more time spent on it); prepared for the SoC as ``sim_npu`` does
("rejected by <SoC> HTP: QNN error … on node …" when it does not, never
proposed); screened on onnxruntime CPU over the held-out samples. Then the
prepared recipes that pass the screen are measured on the simulator, cheapest
cost class first (then by their CPU numbers), until one passes there. Only a
simulator measurement earns ``passes``; a recipe the budget left unmeasured there
is "not verified on the simulator". When no single recipe passes, the best few
pairs of different groups are tried the same way.

Budget: before a step starts, its cost is estimated as the mean of the same steps
done (the first always runs); a recipe that would overflow is "not tried: budget
(N s) spent". Progress: ``progress(line)`` and an INFO log line at every recipe's
start and end, with the elapsed time.

Order (``rank``): passing recipes, cheapest cost class first, then by margin;
then the unverified ones (same order); then those failing on the simulator, on
CPU (best number first); then rejected, unchanged and unmeasured ones.
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

from qnn_ci.compare.thresholds import MIN_METRICS
from qnn_ci.diagnose import recipe_measure as measure
from qnn_ci.diagnose.model import (
    CPU,
    FAILS_CPU,
    FAILS_SIM,
    NO_CHANGE,
    NOT_MEASURED,
    PASSES,
    REJECTED,
    SIMULATOR,
    UNVERIFIED,
    Recipe,
)
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
    cost_rank,
    flags_for,
    yaml_for,
)
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.errors import UserError
from qnn_ci.sim.quantize import QuantSettings
from qnn_ci.sim.samples import Feeds
from qnn_ci.tables import SocInfo, int16_weights_refusal

log = logging.getLogger(__name__)

SIM_CHECKS = 4              # recipes measured on the simulator at most
PAIRS = 3                   # combinations tried when no single recipe passes
_TIER = {PASSES: 0, UNVERIFIED: 1, FAILS_SIM: 2, FAILS_CPU: 3, REJECTED: 4, NO_CHANGE: 5}


def _budget_text(budget_s: float) -> str:
    return f"{budget_s:g}"


def _join(*parts: str) -> str:
    return "; ".join(x for x in parts if x)


class _Tried:
    """A candidate after its screen: the recipe and what it made."""

    def __init__(self, cand: Candidate, recipe: Recipe) -> None:
        self.cand, self.recipe = cand, recipe
        self.qdq: Path | None = None
        self.ctx: Path | None = None


class _Advisor:
    """State of one ``advise`` call: clock, budget, progress, reference outputs."""

    def __init__(self, *, float_model: Path, calibration: Sequence[Feeds],
                 held_out: Sequence[Feeds], base: QuantSettings, soc: SocInfo,
                 thresholds: Thresholds, baseline: dict[str, float | None],
                 cpu_baseline: dict[str, float | None], baseline_model: Path | None,
                 out_dir: Path, budget_s: float, simulate: bool,
                 progress: Callable[[str], None] | None) -> None:
        self.float_model, self.calibration, self.held_out = float_model, calibration, held_out
        self.base, self.soc, self.thresholds = base, soc, thresholds
        self.baseline, self.cpu_baseline = baseline, cpu_baseline
        self.simulate = simulate
        self.root = out_dir / "recipes"
        self.budget_s = max(0.0, float(budget_s))
        self.start = time.monotonic()
        self.progress = progress
        self.screen_costs: list[float] = []
        self.sim_costs: list[float] = []
        self.tried: list[_Tried] = []
        self.recipes: list[Recipe] = []
        self.base_params = (measure.parameters(baseline_model)
                            if baseline_model is not None and baseline_model.is_file() else {})
        self.ref_dir: Path | None = None
        self.expected: dict[str, tuple[str, tuple[int, ...]]] = {}

    # -- clock and progress ------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, line: str) -> None:
        text = f"advisor: {line} ({self.elapsed():.1f} s elapsed)"
        log.info("%s", text)
        if self.progress is not None:
            self.progress(text)

    def fits(self, costs: list[float]) -> bool:
        """Whether one more step costing the mean of ``costs`` fits the budget; the
        first always does."""
        if not costs:
            return True
        return self.elapsed() + sum(costs) / len(costs) <= self.budget_s

    # -- the steps ---------------------------------------------------------------
    def reference(self) -> None:
        from qnn_ci.sim.numerics import file_key, write_outputs
        from qnn_ci.sim.sessions import cpu_session, run_all

        shutil.rmtree(self.root / "reference", ignore_errors=True)
        ref, _ = run_all(cpu_session(self.float_model), self.held_out)
        self.expected = {file_key(k): (str(v.dtype), tuple(v.shape)) for k, v in ref[0].items()}
        self.ref_dir = write_outputs(self.root / "reference", ref)

    def recipe(self, cand: Candidate) -> Recipe:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in cand.settings.items()
                    if not (k == OVERRIDES and not v)}          # a layer file never written
        return Recipe(name=cand.name, settings=settings, flags=flags_for(settings), worst={},
                      passes=False, note=cand.note, files=dict(cand.files),
                      yaml=yaml_for(settings), cost=cand.cost, soc=self.soc.name)

    def listed(self, cand: Candidate, note: str | None = None) -> Recipe:
        r = self.recipe(cand)
        if note is not None:
            r.note = note
        self.recipes.append(r)
        return r

    def screen(self, cand: Candidate, index: str, layer_note: str = "") -> _Tried | None:
        """Quantize, compare parameters, prepare, screen on CPU (module docstring)."""
        if not self.fits(self.screen_costs):
            self.listed(cand, f"not tried: budget ({_budget_text(self.budget_s)} s) spent")
            self.say(f"{index} {cand.name}: skipped, budget spent")
            return None
        self.say(f"{index} {cand.name}: start")
        start = time.monotonic()
        r = self.recipe(cand)
        r.note = _join(layer_note, r.note)
        self.recipes.append(r)
        tried = _Tried(cand, r)
        folder = self.root / cand.name
        shutil.rmtree(folder, ignore_errors=True)
        try:
            self._screen(tried, folder)
        except Exception as exc:   # one recipe's failure (UserError too) is its result
            r.verdict, r.note = NOT_MEASURED, _join(r.note, f"failed: {measure.first_line(exc)}")
            log.debug("recipe %s failed", cand.name, exc_info=True)
        r.duration_s = time.monotonic() - start
        self.screen_costs.append(r.duration_s)
        self.say(f"{index} {cand.name}: {_outcome(r)} ({r.duration_s:.1f} s)")
        if r.verdict in (UNVERIFIED, FAILS_CPU):
            self.tried.append(tried)
        return tried

    def _screen(self, tried: _Tried, folder: Path) -> None:
        r, cand = tried.recipe, tried.cand
        settings = dataclasses.replace(self.base, **cand.quant_changes())
        q = measure.quantize(self.float_model, folder, self.calibration, settings)
        tried.qdq = q.model
        r.files["qdq_model"] = str(q.model)
        same = measure.same_parameters(q.model, self.base_params) if self.base_params else None
        if same is not None:
            r.verdict = NO_CHANGE
            r.note = _join(r.note, f"{NO_CHANGE}: its QDQ model has the same scales and zero "
                                   f"points as the export's on all {same} quantized tensors")
            return
        if self.simulate:
            report, why = measure.prepare(q.model, self.float_model, folder / "prepare",
                                          self.soc, self.calibration, settings)
            r.prepared = not why
            if why:
                known = (int16_weights_refusal(self.soc.htp_arch, settings.act_bitwidth)
                         if cand.kind == LAYERS_16BIT else None)
                r.verdict, r.rejection = REJECTED, why
                r.note = _join(known or "", r.note)
                r.files["prepare"] = str(folder / "prepare")
                return
            tried.ctx = report.prepare.ctx_model
        assert self.ref_dir is not None
        cmp = measure.screen(q.model, self.held_out, self.ref_dir, self.expected,
                             self.thresholds, folder)
        r.cpu_worst = measure.worst_values(cmp)
        r.cpu_baseline = {m: self.cpu_baseline[m] for m in r.cpu_worst if m in self.cpu_baseline}
        r.cpu_passes = bool(cmp.passed)
        r.worst, r.measured_on = dict(r.cpu_worst), CPU
        r.baseline = dict(r.cpu_baseline)
        r.verdict = UNVERIFIED if r.cpu_passes else FAILS_CPU

    def verify(self, tried: Sequence[_Tried], metric: str) -> bool:
        """Measure the prepared recipes that pass the CPU screen on the simulator,
        cheapest first, until one passes there. Returns whether one did."""
        todo = [t for t in tried if t.recipe.verdict == UNVERIFIED and t.ctx is not None]
        todo.sort(key=lambda t: (cost_rank(t.recipe.cost), _score(t.recipe.cpu_worst, metric),
                                 t.cand.name.count("+")))
        done = sum(1 for r in self.recipes if r.measured_on == SIMULATOR)
        for t in todo:
            r = t.recipe
            if done >= SIM_CHECKS:
                r.note = _join(r.note, f"{UNVERIFIED}: {SIM_CHECKS} recipes were measured there "
                                       "already")
                continue
            if self.elapsed() >= self.budget_s or not self.fits(self.sim_costs):
                r.note = _join(r.note, f"{UNVERIFIED}: budget ({_budget_text(self.budget_s)} "
                                       "s) spent")
                self.say(f"simulator {r.name}: skipped, budget spent")
                continue
            self.say(f"simulator {r.name}: start")
            start = time.monotonic()
            done += 1
            try:
                assert t.qdq is not None and t.ctx is not None
                numerics = measure.simulate(self.float_model, t.qdq, t.ctx, self.soc,
                                            self.held_out, self.thresholds,
                                            self.root / r.name / "sim")
            except Exception as exc:
                r.note = _join(r.note, f"simulator: failed ({measure.first_line(exc)})")
                log.debug("simulating recipe %s failed", r.name, exc_info=True)
                continue
            finally:
                spent = time.monotonic() - start
                self.sim_costs.append(spent)
                r.duration_s += spent
            r.worst = measure.worst_values(numerics.comparison)
            r.baseline = {m: self.baseline[m] for m in r.worst if m in self.baseline}
            r.measured_on = SIMULATOR
            r.passes = bool(numerics.comparison.passed)
            r.verdict = PASSES if r.passes else FAILS_SIM
            r.files["simulator"] = str(self.root / r.name / "sim")
            r.note = _join(r.note, f"simulator: {len(self.held_out)} held-out sample(s) on "
                                   f"{self.soc.name}")
            self.say(f"simulator {r.name}: {_outcome(r)}")
            if r.passes:
                for rest in todo:
                    if rest.recipe.verdict == UNVERIFIED and rest is not t:
                        rest.recipe.note = _join(rest.recipe.note, f"{UNVERIFIED}: "
                                                 f"{r.name} passed there first")
                return True
        return False


def _score(worst: dict[str, float | None], metric: str) -> float:
    """Sort key: lower is better."""
    v = worst.get(metric)
    if v is None:
        v = next((x for x in worst.values() if x is not None), None)
    if v is None or math.isnan(v):
        return math.inf
    return -v if metric in MIN_METRICS else v


def rank(recipes: list[Recipe], metric: str) -> list[Recipe]:
    """Best first (see the module docstring)."""
    def key(r: Recipe) -> tuple[int, float, float, int]:
        tier = _TIER.get(r.verdict, len(_TIER))
        parts = r.name.count("+")              # the simpler recipe first on a tie
        if tier <= _TIER[UNVERIFIED]:
            return (tier, cost_rank(r.cost), _score(r.worst, metric), parts)
        if tier <= _TIER[FAILS_CPU]:
            return (tier, _score(r.worst, metric), cost_rank(r.cost), parts)
        return (tier, 0.0, 0.0, 0)             # catalogue order

    return sorted(recipes, key=key)


def key_metric(baseline: dict[str, float | None], thresholds: Thresholds) -> str:
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


def _prepared_model(float_model: Path) -> onnx.ModelProto:
    """The float model as ``quantize_for_htp`` sees it (tensor names line up)."""
    from qnn_ci.sim.constants import fold_constants
    from qnn_ci.sim.fusion import fuse_batchnorm

    model = onnx.load(str(float_model))
    fold_constants(model)
    fuse_batchnorm(model)
    return model


def _layer_file(adv: _Advisor, cand: Candidate, plan: LayerPlan,
                model: onnx.ModelProto) -> str:
    """Write the per-layer recipe's overrides file; fill its settings. Returns a note."""
    base = adv.base
    if cand.kind == LAYERS_16BIT:
        acts: dict[str, list[dict[str, Any]]] = {}
        params = int16_weight_encodings(plan, per_channel=bool(base.per_channel))
        if not params:
            raise UserError("the focus layers have no weights to keep at 16 bits")
        owners = list(dict.fromkeys(plan.weight_nodes.get(n, n) for n in params))
        what = (f"weights of {', '.join(owners[:4])}"
                + (f" (+{len(owners) - 4} more)" if len(owners) > 4 else "") + " at 16 bits")
    else:
        acts, params = float_encodings(plan, model)
        what = f"{', '.join(plan.node_names[:4])} kept float (FP16 on the HTP)"
    path = adv.root / f"{cand.name}.encodings"
    merged = write_overrides(path, acts, params, base=base.overrides)
    cand.settings[OVERRIDES] = str(path)
    cand.files["overrides"] = str(path)
    fused = [n for n in params if n.endswith("_bnfused")]
    return _join(what, merged,
                 f"{len(fused)} weight name(s) are qnn-ci's BatchNormalization folds "
                 "(the converter names its folds differently)" if fused else "")


def advise(*, float_model: Path, calibration: Sequence[Feeds], held_out: Sequence[Feeds],
           base: QuantSettings, soc: SocInfo, thresholds: Thresholds, focus_nodes: Sequence[str],
           baseline: dict[str, float | None], out_dir: Path, budget_s: float,
           simulate: bool = True, cpu_baseline: dict[str, float | None] | None = None,
           baseline_model: Path | None = None,
           progress: Callable[[str], None] | None = None) -> list[Recipe]:
    """Try the remedies (see the module docstring) and return them, best first.

    ``base`` is the export's ``QuantSettings``; ``baseline`` the worst metric values
    of the check with it on the simulator, ``cpu_baseline`` those of its QDQ model on
    CPU (each shown as "before" beside the recipe's number measured the same way);
    ``baseline_model`` the export's QDQ model (a recipe quantizing exactly like it is
    "no change"); ``focus_nodes`` the nodes (names, output tensors or ``Op#index``)
    of the first divergence and the worst jumps. ``simulate`` False: no prepare and
    no simulator run (nothing can pass). Files go below ``out_dir/recipes/``. Never
    raises for a recipe that fails: its note says why."""
    adv = _Advisor(float_model=float_model, calibration=calibration,
                   held_out=list(held_out) or list(calibration), base=base, soc=soc,
                   thresholds=thresholds, baseline=baseline,
                   cpu_baseline=cpu_baseline if cpu_baseline is not None else baseline,
                   baseline_model=baseline_model, out_dir=Path(out_dir), budget_s=budget_s,
                   simulate=simulate, progress=progress)
    if not calibration:
        adv.say("nothing to try: no calibration samples")
        return []
    model = _prepared_model(float_model)
    plan = resolve_focus(model, focus_nodes)
    if plan.unknown:
        log.info("advisor: focus name(s) not in the model: %s", ", ".join(plan.unknown[:5]))
    cands = catalogue(base, soc, has_focus=bool(plan.nodes))
    todo = [c for c in cands if c.measurable]
    adv.say(f"{len(todo)} recipe(s) to try within {_budget_text(adv.budget_s)} s on "
            f"{len(adv.held_out)} held-out sample(s)"
            + (f", judged on the {soc.name} simulator" if simulate else ", CPU screen only"))
    adv.reference()
    for cand in cands:
        if not cand.measurable:
            adv.listed(cand)
            continue
        index = f"[{todo.index(cand) + 1}/{len(todo)}]"
        note = ""
        if cand.kind in (LAYERS_16BIT, LAYERS_FLOAT) and not cand.parts:
            try:
                note = _layer_file(adv, cand, plan, model)
            except UserError as exc:
                r = adv.listed(cand, f"not tried: {measure.first_line(exc)}")
                adv.say(f"{index} {cand.name}: not tried ({r.note})")
                continue
        adv.screen(cand, index, note)
    metric = key_metric(adv.cpu_baseline or baseline, thresholds)
    passed = simulate and adv.verify(adv.tried, metric)
    # pairs when nothing single passes where it is judged (on CPU alone: the screen)
    if not passed and (simulate or not any(r.cpu_passes for r in adv.recipes)):
        _pairs(adv, metric)
    if not simulate:
        for r in adv.recipes:
            if r.verdict == UNVERIFIED:
                r.note = _join(r.note, f"{UNVERIFIED}: the advisor was asked for a CPU screen")
    ranked = rank(adv.recipes, key_metric(baseline, thresholds))
    adv.say(f"done: {sum(r.measured_on == SIMULATOR for r in ranked)} measured on the "
            f"{soc.name} simulator, {sum(r.passes for r in ranked)} passing there")
    return ranked


def _pairs(adv: _Advisor, metric: str) -> bool:
    """Try up to ``PAIRS`` combinations of the best screened recipes of different
    groups; returns whether one passes on the simulator."""
    usable = sorted(adv.tried, key=lambda t: _score(t.recipe.cpu_worst, metric))
    names = {r.name for r in adv.recipes}
    pairs: list[Candidate] = []
    for i, a in enumerate(usable):
        for b in usable[i + 1:]:
            pair = combine(a.cand, b.cand)
            if pair is not None and pair.name not in names and len(pairs) < PAIRS:
                pairs.append(pair)
    for n, pair in enumerate(pairs, start=1):
        tried = adv.screen(pair, f"[+{n}/{len(pairs)}]")
        if tried is not None and adv.simulate and adv.verify([tried], metric):
            return True
    return False


def _outcome(r: Recipe) -> str:
    if r.verdict == REJECTED:
        return r.rejection
    if r.verdict in (NO_CHANGE, NOT_MEASURED) or not r.worst:
        return r.note or r.verdict
    values = ", ".join(f"worst {m} {v:.6g}" if v is not None else f"worst {m} -"
                       for m, v in r.worst.items())
    where = f"on the {r.soc} simulator" if r.measured_on == SIMULATOR else "QDQ on CPU"
    prepared = f"prepared for {r.soc}; " if r.prepared else ""
    return f"{prepared}{where} {values} — {r.verdict}"


def nothing_passes(recipes: Sequence[Recipe], soc: SocInfo) -> list[str]:
    """What to say when no recipe passes on the simulator: the best one tried and
    what is left to do (empty when one passes)."""
    if any(r.passes for r in recipes):
        return []
    measured = [r for r in recipes if r.worst]
    lines = [f"nothing tried passes on {soc.name}"]
    if measured:
        best = measured[0]
        where = (f"on the {soc.name} simulator" if best.measured_on == SIMULATOR
                 else "QDQ on CPU, not verified on the simulator")
        values = ", ".join(f"worst {m} {v:.6g}" if v is not None else f"worst {m} -"
                           for m, v in best.worst.items())
        lines[0] += f"; best: {best.name} ({values}, {where})"
    lines += [
        "left to try: AIMET encodings for this graph (quantization-aware calibration or "
        "AdaRound, exported as .encodings: quantization.overrides with the calibration "
        "input list)",
        "or suspect the graph: when the failures look unrelated to the quantization "
        "settings (nothing moves the worst layer, rejections on other nodes), rewrite the "
        "graph for the HTP and check the rewrite against the framework export with "
        "`original:` (the matches_original stage)",
    ]
    return lines
