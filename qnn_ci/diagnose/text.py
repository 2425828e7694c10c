"""The diagnosis as text lines for a terminal (``qnn-ci sim --diagnose``; any
shell that prints a ``Diagnosis``)."""

from __future__ import annotations

import math

from qnn_ci.diagnose.model import (
    NONE,
    Diagnosis,
    LayerMetrics,
    closest_to_bound,
    recipe_line,
)

SHOWN_RECIPES = 10


def _f(value: float | None, digits: int = 6) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


def _where(m: LayerMetrics) -> str:
    return f"{m.tensor!r} ({m.op_type} {m.node!r})"


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 10 else f"{value:.0f} s"


def _closest(d: Diagnosis) -> list[str]:
    near = closest_to_bound(d.layers, d.bounds)
    if near is None:
        return []
    m, metric, value, bound = near
    where = f"{m.tensor!r} ({m.op_type} {m.node!r}, tensor {m.index})"
    if value <= bound if metric == "max_abs" else value >= bound:
        return [f"  closest to its bound: {where}: {metric} {_f(value)} vs bound {_f(bound)}"]
    return [f"  smallest margin: {where}: {metric} {_f(value)} vs bound {_f(bound)}, past it "
            "inside the graph while the outputs stay within theirs"]


def text_lines(d: Diagnosis) -> list[str]:
    head = (f"diagnosis: {d.attribution} loss" if d.attribution != NONE
            else "diagnosis: no loss found")
    lines = [head + (f" ({d.detail})" if d.detail else "")]
    path = {"qdq-cpu": "fp32 vs the QDQ model on onnxruntime CPU, every layer",
            "sim-bisection": "the simulator vs the QDQ model on CPU, bisection",
            "board-debug": "the board's per-layer outputs (qnn-net-run --debug)"}.get(d.path)
    if path:
        lines.append(f"  compared: {path}")
    fd = d.first_divergence
    if d.attribution == NONE:
        # nothing lost: no "first divergence"; the tensor nearest its bound, if any
        lines += _closest(d)
    elif fd is not None:
        channel = (f", worst channel {fd.worst_channel} cosine {_f(fd.worst_channel_cosine)}"
                   if fd.worst_channel is not None else "")
        lines.append(f"  first divergence: {fd.tensor!r} ({fd.op_type} {fd.node!r}, tensor "
                     f"{fd.index}): {fd.metric} {_f(fd.value)} vs bound {_f(fd.bound)} "
                     f"(tensor cosine {_f(fd.cosine)}{channel})")
    elif d.layers:
        lines.append("  first divergence: none (no compared tensor crosses the bound)")
    if d.worst_jumps:
        lines.append("  worst jumps (cosine drop from the node's worst input):")
        for m in d.worst_jumps:
            lines.append(f"    {_where(m)}: drop {_f(m.jump, 4)} (cosine {_f(m.cosine)}, "
                         f"worst channel {_f(m.worst_channel_cosine)})")
    if d.recipes:
        lines.append("  recipes, best first:")
        for i, r in enumerate(d.recipes[:SHOWN_RECIPES], start=1):
            lines.append(f"    {i}. {recipe_line(r)}" + (f" ({r.note})" if r.note else ""))
        if len(d.recipes) > SHOWN_RECIPES:
            lines.append(f"    +{len(d.recipes) - SHOWN_RECIPES} more (see diagnosis.json)")
        best = next((r for r in d.recipes if r.passes), None)
        if best is not None:
            if best.yaml:
                lines.append("  manifest YAML to paste (best recipe):")
                lines += [f"    {y}" for y in best.yaml.rstrip("\n").splitlines()]
            if best.flags:
                lines.append(f"  converter flags: {' '.join(best.flags)}")
        elif d.advice:
            lines += [f"  {line}" for line in d.advice]
        else:
            lines.append("  no recipe tried passes on the simulator")
    for name, path_ in d.artefacts.items():
        lines.append(f"  {name}: {path_}")
    c = d.cost
    parts = []
    if "sweep_s" in c:
        per = (f", {_seconds(c['sweep_s_per_sample'])} per sample vs "
               f"{_seconds(c['fp32_plus_qdq_s_per_sample'])} for one fp32 + one QDQ inference"
               if "sweep_s_per_sample" in c and "fp32_plus_qdq_s_per_sample" in c else "")
        parts.append(f"sweep {_seconds(c['sweep_s'])}{per}")
    if "bisect_s" in c:
        parts.append(f"bisection {_seconds(c['bisect_s'])} "
                     f"({int(c.get('simulated_runs', 0))} simulated run(s))")
    if "advisor_s" in c:
        parts.append(f"advisor {_seconds(c['advisor_s'])}")
    if "total_s" in c:
        parts.append(f"total {_seconds(c['total_s'])}")
    if parts:
        lines.append("  cost: " + "; ".join(parts))
    lines += [f"  note: {n}" for n in d.notes]
    return lines
