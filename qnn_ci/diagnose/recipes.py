"""The recipe advisor's catalogue: which remedies exist for a failing numeric check
and what each one means as manifest keys, as ``QuantSettings`` for the simulator
path, and as ``qnn-onnx-converter`` flags.

Recipes (``catalogue``), each in a *group* of mutually exclusive choices:

- ``per_channel`` -- per-channel weights (``--use_per_channel_quantization``).
- ``act_bitwidth_16`` -- 16-bit activations, offered when the export uses 8.
- ``calibration_<method>`` -- every activation calibration method the converter
  offers (``--act_quantizer_calibration``: min-max, mse, percentile, entropy,
  sqnr) other than the export's own. Only min-max and percentile are measurable
  on the simulator path (``qnn_ci.sim.quantize``): onnxruntime has no mse or sqnr
  calibration, and its entropy calibrator, as ``quantize`` builds it, has as many
  histogram bins as quantized bins (128), so its KL search can only choose the
  full range: the ranges of min-max. Those three are listed as "not measurable on
  the simulator path" with the reason, never with a number.
- ``weights_16bit`` -- the focus layers' weights at 16 bits; ``float_layers`` --
  the focus layers kept float (FP16 on the HTP), only where the SoC's HTP has
  FP16 (``qnn_ci.tables``; never proposed on one without it, and the listing says
  why). Both are an AIMET encodings overrides file (``--quantization_overrides``,
  manifest ``quantization.overrides``) written by ``qnn_ci.diagnose.recipe_encodings``.

Each recipe has a *cost class*: what it costs on the device (``COSTS``): no
run-time cost (calibration method, per-channel weights), 16-bit (more memory and
latency on some layers or all), float layers (FP16, only where the SoC has it).
Passing recipes are ranked cheapest class first.

``combine`` joins two recipes of different groups (the advisor tries the best
few pairs). The flag spellings are the ones ``qnn_ci.sdk.converter_cmd`` passes for the
same manifest keys (the long, 2.25+ names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from qnn_ci.diagnose.model import COST_16BIT, COST_FLOAT, COST_NONE, COSTS
from qnn_ci.tables import SocInfo

# manifest key -> (QuantSettings field, converter flag); flags as converter_cmd spells them
PER_CHANNEL = "quantization.per_channel"
ACT_CALIBRATION = "quantization.act_calibration"
ACT_BITWIDTH = "quantization.act_bitwidth"
OVERRIDES = "quantization.overrides"
_FIELDS = {PER_CHANNEL: "per_channel", ACT_CALIBRATION: "act_calibration",
           ACT_BITWIDTH: "act_bitwidth", OVERRIDES: "overrides"}
_FLAGS = {PER_CHANNEL: "--use_per_channel_quantization",
          ACT_CALIBRATION: "--act_quantizer_calibration",
          ACT_BITWIDTH: "--act_bitwidth",
          OVERRIDES: "--quantization_overrides"}

# What the converter offers (--act_quantizer_calibration) and what onnxruntime can
# measure of it (qnn_ci.sim.quantize._CALIBRATION: MinMax, Entropy, Percentile).
CONVERTER_CALIBRATIONS = ("min-max", "mse", "percentile", "entropy", "sqnr")
MEASURABLE_CALIBRATIONS = frozenset({"min-max", "percentile"})
_NOT_MEASURABLE = {
    "entropy": "onnxruntime's entropy calibrator (as its quantize API builds it) has 128 "
               "histogram bins for 128 quantized bins, so its KL search can only choose "
               "the full range -- the ranges of min-max",
}

_COST_RANK = {c: i for i, c in enumerate(COSTS)}
_GROUP_COST = {"per_channel": COST_NONE, "calibration": COST_NONE,
               "act_bitwidth": COST_16BIT, "weights_16bit": COST_16BIT,
               "float_layers": COST_FLOAT}


def cost_rank(cost: str) -> int:
    return _COST_RANK.get(cost, len(_COST_RANK))

# kinds
SETTINGS, LAYERS_16BIT, LAYERS_FLOAT = "settings", "weights_16bit", "float_layers"


@dataclass
class Candidate:
    """One recipe before it is measured."""

    name: str
    group: str                          # recipes of one group exclude each other
    settings: dict[str, Any]            # dotted manifest keys (overrides: filled in later)
    kind: str = SETTINGS
    measurable: bool = True
    note: str = ""                      # why it is not measurable / not tried
    parts: tuple[str, ...] = ()         # a combination's recipe names
    files: dict[str, str] = field(default_factory=dict)

    @property
    def cost(self) -> str:
        """The cost class: the dearest of its parts'."""
        costs = [_GROUP_COST.get(self.kind if g == "overrides" else g, COST_NONE)
                 for g in self.group.split("+")]
        return max(costs, key=cost_rank)

    def quant_changes(self) -> dict[str, Any]:
        """``QuantSettings`` field -> value for ``dataclasses.replace``."""
        out: dict[str, Any] = {}
        for key, value in self.settings.items():
            if key in _FIELDS:
                out[_FIELDS[key]] = Path(value) if key == OVERRIDES else value
        return out


def _calibration(name: str | None) -> str:
    text = (name or "min-max").strip().lower()
    return "min-max" if text == "minmax" else text


def catalogue(base: Any, soc: SocInfo, *, has_focus: bool) -> list[Candidate]:
    """The recipes worth trying from ``base`` (a ``QuantSettings``) on ``soc``, in
    the order they are tried (cheapest, most often right first). ``has_focus``:
    whether the diagnosis named layers (the per-layer recipes need them)."""
    out: list[Candidate] = []
    if not base.per_channel:
        out.append(Candidate("per_channel", "per_channel", {PER_CHANNEL: True}))
    if base.act_bitwidth == 8:
        out.append(Candidate("act_bitwidth_16", "act_bitwidth", {ACT_BITWIDTH: 16}))
    current = _calibration(base.act_calibration)
    for method in CONVERTER_CALIBRATIONS:
        if method == current:
            continue
        measurable = method in MEASURABLE_CALIBRATIONS
        out.append(Candidate(
            f"calibration_{method}", "calibration", {ACT_CALIBRATION: method},
            measurable=measurable,
            note="" if measurable else
            f"not measurable on the simulator path: "
            f"{_NOT_MEASURABLE.get(method, f'onnxruntime has no {method} calibration')}; "
            "try it with the converter"))
    if has_focus:
        out.append(Candidate(LAYERS_16BIT, "overrides", {OVERRIDES: ""}, kind=LAYERS_16BIT))
        if soc.fp16:
            out.append(Candidate(LAYERS_FLOAT, "overrides", {OVERRIDES: ""}, kind=LAYERS_FLOAT))
        else:
            out.append(Candidate(
                LAYERS_FLOAT, "overrides", {}, kind=LAYERS_FLOAT, measurable=False,
                note=f"not tried: {soc.name} (HTP {soc.arch_name}) has no FP16, so layers "
                     "kept float would become FP16 ops it cannot run"))
    return out


def combine(a: Candidate, b: Candidate) -> Candidate | None:
    """``a`` and ``b`` together, or None when they exclude each other."""
    if a.group == b.group or not (a.measurable and b.measurable):
        return None
    groups = {*a.group.split("+"), *b.group.split("+")}
    if len(groups) < len(a.group.split("+")) + len(b.group.split("+")):
        return None
    kind = a.kind if a.kind != SETTINGS else b.kind
    return Candidate(f"{a.name}+{b.name}", "+".join(sorted(groups)),
                     {**a.settings, **b.settings}, kind=kind,
                     parts=(*(a.parts or (a.name,)), *(b.parts or (b.name,))),
                     files={**a.files, **b.files})


def flags_for(settings: Mapping[str, Any]) -> list[str]:
    """The converter flags the manifest keys ``settings`` mean."""
    out: list[str] = []
    for key, value in settings.items():
        flag = _FLAGS.get(key)
        if flag is None:
            continue
        if isinstance(value, bool):
            if value:
                out.append(flag)
        else:
            out += [flag, str(value)]
    return out


def yaml_for(settings: Mapping[str, Any]) -> str:
    """The manifest YAML to paste: ``quantization:\\n  per_channel: true\\n``."""
    nested: dict[str, Any] = {}
    for key, value in settings.items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = str(value) if isinstance(value, Path) else value
    return yaml.safe_dump(nested, sort_keys=False, default_flow_style=False) if nested else ""
