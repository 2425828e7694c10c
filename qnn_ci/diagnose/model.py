"""The diagnosis result types every diagnosis path fills in (simulator/QDQ path,
board ``--debug`` path) and every shell reads (CLI text and JSON, JUnit
properties ``qnn.diagnosis.*``, the job summary, the pytest failure text).

No numpy here: these are plain values, JSON-able through ``to_dict``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# attribution values (stable, documented in docs/diagnosis.md)
QUANTIZATION = "quantization"   # the QDQ model on CPU is already as bad as the HTP
HTP = "htp"                     # the QDQ model on CPU is fine; the HTP is not
BOTH = "both"                   # quantization loses, and the HTP loses clearly more
NONE = "none"                   # nothing failed (or nothing measurable)
ATTRIBUTIONS = (QUANTIZATION, HTP, BOTH, NONE)


def _num(value: float | None) -> float | str | None:
    """JSON-safe float: NaN/inf as strings, rounded to 6 significant digits."""
    if value is None:
        return None
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    return float(f"{v:.6g}")


@dataclass
class LayerMetrics:
    """One intermediate tensor, reference (fp32) vs test (quantized / HTP), over
    the diagnosed samples (the worst sample's value for each metric)."""

    index: int                          # position in topological order (0 = first)
    tensor: str                         # ONNX tensor name
    node: str                           # producing node's name (or "op#index" if unnamed)
    op_type: str
    cosine: float | None = None
    snr_db: float | None = None
    max_abs: float | None = None
    channel_axis: int | None = None     # None: no channel axis (scalar / 1-D)
    worst_channel: int | None = None
    worst_channel_cosine: float | None = None
    crosses: bool = False               # crosses the export's bound
    jump: float | None = None           # how much the error grows at this node:
    #                                     worst input's cosine - this tensor's cosine
    note: str = ""                      # e.g. "not in the quantized model" / a fused node

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("cosine", "snr_db", "max_abs", "worst_channel_cosine", "jump"):
            d[k] = _num(d[k])
        return d


@dataclass
class FirstDivergence:
    """The first tensor whose metric crosses its bound: where it is, its metrics there."""

    tensor: str
    node: str
    op_type: str
    index: int
    metric: str                          # the metric that crossed, e.g. "cosine"
    value: float | None                  # its value there
    bound: float | None                  # the bound it crossed
    cosine: float | None = None
    worst_channel: int | None = None
    worst_channel_cosine: float | None = None
    snr_db: float | None = None
    max_abs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("value", "bound", "cosine", "worst_channel_cosine", "snr_db", "max_abs"):
            d[k] = _num(d[k])
        return d


# recipe verdicts (stable, documented in docs/diagnosis.md)
PASSES = "passes"                     # prepared for the SoC, within bounds on its simulator
FAILS_SIM = "fails on the simulator"  # prepared, measured there, out of bounds
UNVERIFIED = "not verified on the simulator"   # passes on CPU; no simulator run (budget)
FAILS_CPU = "fails on CPU"            # the CPU screen is already out of bounds
REJECTED = "rejected by the HTP"      # did not prepare for the SoC (never proposed)
NO_CHANGE = "no change from the baseline"      # the same quantization parameters
NOT_MEASURED = "not measured"         # not measurable here, not tried (budget), failed
SIMULATOR, CPU = "simulator", "cpu"   # measured_on
# cost classes, cheapest first: what a recipe costs on the device
COST_NONE, COST_16BIT, COST_FLOAT = "none", "16-bit", "float"
COSTS = {COST_NONE: "no run-time cost",
         COST_16BIT: "16-bit: more memory and latency",
         COST_FLOAT: "float layers: FP16, slower"}


@dataclass
class Recipe:
    """One remedy tried by the advisor: screened on CPU, prepared for the SoC, and
    (within the budget) measured on its simulator. ``passes`` only when measured on
    the simulator after it prepared there."""

    name: str                            # e.g. "per_channel"
    settings: dict[str, Any]             # manifest keys, dotted: {"quantization.per_channel": True}
    flags: list[str]                     # the converter flags it means
    worst: dict[str, float | None]       # headline worst values: the simulator's when
    #                                      measured there, else the CPU screen's
    passes: bool                         # within the export's bounds ON THE SIMULATOR
    baseline: dict[str, float | None] = field(default_factory=dict)  # the same metrics
    #                                      with the export's own settings, where ``worst`` is
    measured_on: str | None = None       # "simulator" | "cpu" | None (not measured)
    prepared: bool | None = None         # prepared for the SoC's HTP (None: not tried)
    cpu_worst: dict[str, float | None] = field(default_factory=dict)  # QDQ on CPU (screen)
    cpu_baseline: dict[str, float | None] = field(default_factory=dict)
    cpu_passes: bool | None = None       # the CPU screen within bounds (None: not screened)
    verdict: str = NOT_MEASURED          # one of the verdicts above
    rejection: str = ""                  # why the HTP refused it: "rejected by QCS6490
    #                                      HTP: QNN error 3110 on node 'conv_b' (Conv)"
    cost: str = COST_NONE                # cost class (COSTS)
    soc: str = ""                        # the SoC it was prepared / simulated for
    duration_s: float = 0.0
    note: str = ""                       # e.g. why a recipe was skipped
    files: dict[str, str] = field(default_factory=dict)   # e.g. an overrides file written
    yaml: str = ""                       # manifest YAML to paste

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("worst", "baseline", "cpu_worst", "cpu_baseline"):
            d[key] = {k: _num(v) for k, v in getattr(self, key).items()}
        d["duration_s"] = round(self.duration_s, 3)
        return d


@dataclass
class Diagnosis:
    """Where a numeric failure comes from: attribution, first divergence, layers, fixes."""

    attribution: str                                     # one of ATTRIBUTIONS
    detail: str = ""                                     # one line: the numbers behind it
    path: str = ""                                       # "qdq-cpu" | "sim-bisection" |
    #                                                      "board-debug" | "none"
    first_divergence: FirstDivergence | None = None
    layers: list[LayerMetrics] = field(default_factory=list)
    worst_jumps: list[LayerMetrics] = field(default_factory=list)
    recipes: list[Recipe] = field(default_factory=list)  # best first
    cost: dict[str, float] = field(default_factory=dict)  # seconds per phase, counts
    artefacts: dict[str, str] = field(default_factory=dict)  # name -> path (csv, json, png)
    notes: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)      # when no recipe passes: the best
    #                                                      tried and what is left to do
    bounds: dict[str, float] = field(default_factory=dict)  # what a tensor was held to
    #                                                      (cosine / snr / max_abs)

    def headline(self) -> str:
        """One line for the failure text: where the error enters and what fixes it."""
        parts = [f"diagnosis: {self.attribution} loss" if self.attribution != NONE
                 else "diagnosis: no loss found"]
        if self.detail:
            parts[0] += f" ({self.detail})"
        fd = self.first_divergence
        if fd is not None and self.attribution != NONE:   # nothing lost: nothing diverged
            parts.append(f"first divergence at {fd.tensor!r} ({fd.op_type} {fd.node!r}): "
                         f"{fd.metric} {_num(fd.value)} vs bound {_num(fd.bound)}"
                         + (f", worst channel {fd.worst_channel} cosine "
                            f"{_num(fd.worst_channel_cosine)}"
                            if fd.worst_channel is not None else ""))
        best = next((r for r in self.recipes if r.passes), None)
        if best is not None:
            parts.append(f"fix: {recipe_line(best)}")
        elif self.advice:
            parts.append(f"no fix: {self.advice[0]}")
        return "; ".join(parts)

    def properties(self) -> dict[str, Any]:
        """JUnit properties (the reporter adds the ``qnn.`` prefix)."""
        p: dict[str, Any] = {"diagnosis.attribution": self.attribution,
                             "diagnosis.path": self.path}
        fd = self.first_divergence
        if fd is not None:
            p |= {"diagnosis.first_divergence.tensor": fd.tensor,
                  "diagnosis.first_divergence.node": fd.node,
                  "diagnosis.first_divergence.op_type": fd.op_type,
                  "diagnosis.first_divergence.metric": fd.metric,
                  "diagnosis.first_divergence.value": _num(fd.value)}
        for i, r in enumerate(self.recipes[:5]):
            p[f"diagnosis.recipe.{i}"] = recipe_line(r)
        if self.advice:
            p["diagnosis.advice"] = " ".join(self.advice)
        for name, path in self.artefacts.items():
            p[f"diagnosis.artefact.{name}"] = path
        for name, value in self.cost.items():
            p[f"diagnosis.cost.{name}"] = _num(value)
        return p

    def to_dict(self) -> dict[str, Any]:
        return {"attribution": self.attribution, "detail": self.detail, "path": self.path,
                "first_divergence": (self.first_divergence.to_dict()
                                     if self.first_divergence else None),
                "layers": [m.to_dict() for m in self.layers],
                "worst_jumps": [m.to_dict() for m in self.worst_jumps],
                "recipes": [r.to_dict() for r in self.recipes],
                "advice": list(self.advice),
                "bounds": {k: _num(v) for k, v in self.bounds.items()},
                "cost": {k: _num(v) for k, v in self.cost.items()},
                "artefacts": dict(self.artefacts), "notes": list(self.notes)}


def closest_to_bound(layers: list[LayerMetrics], bounds: dict[str, float]
                     ) -> tuple[LayerMetrics, str, float, float] | None:
    """The compared tensor with the smallest margin to its bound: (tensor, metric,
    value, bound); the margin is negative for a tensor past its bound. Held to the
    first of cosine (the tensor's or its worst channel's, the lower), SNR and max_abs
    that has a bound and a finite value; None when none has."""
    for metric in ("cosine", "snr", "max_abs"):
        bound = bounds.get(metric)
        if bound is None:
            continue
        best: tuple[float, LayerMetrics, str, float] | None = None
        for m in layers:
            if metric == "cosine":
                pairs = [("cosine", m.cosine), ("worst_channel_cosine", m.worst_channel_cosine)]
            else:
                pairs = [("snr" if metric == "snr" else "max_abs",
                          m.snr_db if metric == "snr" else m.max_abs)]
            for name, value in pairs:
                if value is None or not math.isfinite(value):
                    continue
                margin = bound - value if metric == "max_abs" else value - bound
                if best is None or margin < best[0]:
                    best = (margin, m, name, value)
        if best is not None:
            return best[1], best[2], best[3], bound
    return None


def _values(worst: dict[str, float | None], before: dict[str, float | None]) -> str:
    return ", ".join(f"worst {m} " + (f"{_num(before[m])} → " if m in before else "")
                     + f"{_num(v)}" for m, v in worst.items())


def recipe_line(r: Recipe) -> str:
    """One line: the settings, the numbers and where they were measured, the verdict
    and the cost class, e.g. ``per_channel: true → worst cosine -0.31 → 0.999 on the
    QCS6490 simulator (QDQ on CPU 0.0 → 0.999) — passes [no run-time cost]``."""
    keys = ", ".join(f"{k.split('.')[-1]}: {_yaml_scalar(v)}" for k, v in r.settings.items())
    head = keys or r.name
    cost = f" [{COSTS.get(r.cost, r.cost)}]"
    where = f"{r.soc} " if r.soc else ""
    if r.measured_on == SIMULATOR and r.worst:
        cpu = f" (QDQ on CPU {_values(r.cpu_worst, r.cpu_baseline)})" if r.cpu_worst else ""
        return (f"{head} → {_values(r.worst, r.baseline)} on the {where}simulator{cpu} — "
                f"{r.verdict}{cost}")
    if r.cpu_worst or r.worst:            # (a record without cpu_worst: its worst is CPU's)
        values = (_values(r.cpu_worst, r.cpu_baseline) if r.cpu_worst
                  else _values(r.worst, r.baseline))
        return f"{head} → QDQ on CPU {values} — {r.verdict}{cost}"
    if r.verdict == REJECTED:
        return f"{head} → {r.rejection or r.verdict}"
    if r.verdict == NO_CHANGE:
        return f"{head} → {r.verdict}"
    return f"{head} → not measured"


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
