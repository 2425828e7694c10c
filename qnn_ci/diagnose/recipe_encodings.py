"""The per-layer recipes as an AIMET encodings overrides file (what the manifest's
``quantization.overrides`` takes and the converter takes as
``--quantization_overrides``).

- 16-bit weights: each focus layer's weights get a symmetric 16-bit encoding
  (``scale = max|w| / 32767``, AIMET's offset -32768; per output channel for a
  ``Conv`` when the export quantizes per channel). ``qnn_ci.sim.overrides`` turns
  it into a signed 16-bit override.
- float: each focus layer's outputs and parameters get a float (16-bit) encoding;
  the converter keeps those ops in FP16, ``qnn_ci.sim.quantize`` leaves the nodes
  producing them unquantized.

Names are the tensors of the model as ``quantize_for_htp`` quantizes it
(Constant nodes folded, BatchNormalization folded into the conv before it).
An export's own overrides file is merged: its entries are kept, in its own
layout (0.6.1 or 1.0.0), and an entry for the same tensor is replaced (said in
the note). A 2.0.0-layout file cannot carry these entries (its ``int16`` is signed
but carries no symmetry, and float entries need a scale): refused with a reason.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from qnn_ci.errors import UserError
from qnn_ci.sdk.encodings import ENCODINGS_CAP, ENCODINGS_HINT, read_encodings
from qnn_ci.tables import BIAS_INPUTS, WEIGHTED_OPS
from qnn_ci.util.safe_read import load_json, read_text

log = logging.getLogger(__name__)

_UNNAMED = re.compile(r"^(?P<op>[A-Za-z_][\w.]*)#(?P<index>\d+)$")
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
_BACK_STEPS = 2           # a weightless focus node (Relu, Add): look this far back
Q16 = 1 << 15


@dataclass
class LayerPlan:
    """The focus layers resolved against the model."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)   # name -> value
    weight_ops: dict[str, str] = field(default_factory=dict)       # name -> consumer op
    weight_nodes: dict[str, str] = field(default_factory=dict)     # name -> consumer node
    unknown: list[str] = field(default_factory=list)                # focus names not found

    @property
    def node_names(self) -> list[str]:
        return [n.name or f"{n.op_type}#{n.output[0]}" for n in self.nodes]


def resolve_focus(model: onnx.ModelProto, focus: Sequence[str]) -> LayerPlan:
    """Focus names -> nodes: a node name, an output tensor name, or ``Op#index``
    (an unnamed node: its index in the graph). Names found nowhere are listed."""
    nodes = list(model.graph.node)
    by_name = {n.name: n for n in nodes if n.name}
    by_output = {o: n for n in nodes for o in n.output}
    plan = LayerPlan()
    seen: set[int] = set()
    for name in focus:
        node = by_name.get(name) or by_output.get(name)
        match = _UNNAMED.match(name) if node is None else None
        if match is not None:
            index = int(match["index"])
            if index < len(nodes) and nodes[index].op_type == match["op"]:
                node = nodes[index]
        if node is None:
            plan.unknown.append(name)
            continue
        if id(node) not in seen:
            seen.add(id(node))
            plan.nodes.append(node)
    inits = {i.name: i for i in model.graph.initializer}
    for node in plan.nodes:
        for name, owner in _weights_of(node, by_output, inits):
            if name not in plan.weights:
                plan.weights[name] = numpy_helper.to_array(inits[name])
                plan.weight_ops[name] = owner.op_type
                plan.weight_nodes[name] = owner.name or f"{owner.op_type}#{owner.output[0]}"
    return plan


def _weights_of(node: onnx.NodeProto, by_output: dict[str, onnx.NodeProto],
                inits: dict[str, onnx.TensorProto]) -> list[tuple[str, onnx.NodeProto]]:
    """The float weight initializers of ``node`` when it is an op with weights
    (``WEIGHTED_OPS``; biases left out), or of the nearest producer with weights
    when it has none (a Relu after the conv), each with the node that has it."""
    current: onnx.NodeProto | None = node
    for _ in range(_BACK_STEPS + 1):
        if current is None:
            return []
        bias = BIAS_INPUTS.get(current.op_type)
        found = [(name, current) for i, name in enumerate(current.input)
                 if current.op_type in WEIGHTED_OPS and name in inits and i != bias
                 and inits[name].data_type in _FLOAT_TYPES
                 and len(inits[name].dims) >= 1 and _size(inits[name]) > 1]
        if found:
            return found
        data = [name for name in current.input if name and name not in inits]
        current = by_output.get(data[0]) if len(data) == 1 else None
    return []


def _size(t: onnx.TensorProto) -> int:
    return int(np.prod(t.dims)) if t.dims else 1


def _sym16(values: np.ndarray) -> dict[str, Any] | None:
    amax = float(np.max(np.abs(values))) if values.size else 0.0
    if not np.isfinite(amax) or amax <= 0.0:
        return None
    scale = amax / (Q16 - 1)
    return {"bitwidth": 16, "dtype": "int", "is_symmetric": "True",
            "min": -Q16 * scale, "max": (Q16 - 1) * scale, "offset": -Q16, "scale": scale}


def int16_weight_encodings(plan: LayerPlan, *, per_channel: bool) -> dict[str, list[dict]]:
    """0.6.1-style entries: weight name -> one symmetric 16-bit encoding (one per
    output channel for a Conv when ``per_channel``). All-zero weights are left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, value in plan.weights.items():
        v = np.asarray(value, dtype=np.float64)
        if per_channel and plan.weight_ops.get(name) == "Conv" and v.ndim >= 2:
            encs = [_sym16(v[c]) for c in range(v.shape[0])]
            if any(e is None for e in encs):          # a zero channel: per-tensor instead
                encs = [_sym16(v)]
        else:
            encs = [_sym16(v)]
        if all(e is not None for e in encs):
            out[name] = [e for e in encs if e is not None]
    return out


def float_encodings(plan: LayerPlan, model: onnx.ModelProto
                    ) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(activation entries, parameter entries) keeping the focus layers float 16."""
    inits = {i.name: i for i in model.graph.initializer}
    fp16 = {"bitwidth": 16, "dtype": "float"}
    acts = {o: [dict(fp16)] for n in plan.nodes for o in n.output if o}
    params = {name: [dict(fp16)] for n in plan.nodes for name in n.input
              if name in inits and inits[name].data_type in _FLOAT_TYPES}
    return acts, params


def _layout(raw: dict[str, Any]) -> str:
    acts, params = raw.get("activation_encodings"), raw.get("param_encodings")
    if "encodings" in raw and acts is None and params is None:
        return "2.0.0"
    if isinstance(acts, list) or isinstance(params, list):
        return "1.0.0"
    return "0.6.1"


def _to_100(name: str, encs: list[dict[str, Any]]) -> dict[str, Any]:
    first = encs[0]
    if first.get("dtype") == "float":
        return {"name": name, "dtype": "FLOAT", "enc_type": "PER_TENSOR",
                "bw": first["bitwidth"]}
    return {"name": name, "dtype": "INT",
            "enc_type": "PER_CHANNEL" if len(encs) > 1 else "PER_TENSOR",
            "bw": first["bitwidth"], "is_sym": first.get("is_symmetric") == "True",
            "scale": [e["scale"] for e in encs], "offset": [e["offset"] for e in encs]}


def write_overrides(dst: Path, acts: dict[str, list[dict]], params: dict[str, list[dict]],
                    *, base: Path | None = None) -> str:
    """Write ``acts``/``params`` (0.6.1-style entries) to ``dst``, merged into the
    export's own overrides file ``base`` when there is one. Returns a note saying
    what was merged ("" when nothing was). Raises UserError when ``base`` cannot be
    read or merged into (the reason names the file)."""
    note = ""
    if base is None:
        data: dict[str, Any] = {"version": "0.6.1", "activation_encodings": acts,
                                "param_encodings": params, "quantizer_args": {}}
    else:
        read_encodings(base)                       # malformed -> UserError naming it
        raw = load_json(read_text(base, cap=ENCODINGS_CAP, what="AIMET .encodings file",
                                  hint=ENCODINGS_HINT), base, hint=ENCODINGS_HINT)
        if not isinstance(raw, dict):
            raise UserError("expected a JSON object", file=base)
        layout = _layout(raw)
        if layout == "2.0.0":
            raise UserError("the 2.0.0 layout cannot carry the recipe's entries (symmetric "
                            "16-bit / float); write them into a 0.6.1 or 1.0.0 file",
                            file=base)
        data = dict(raw)
        replaced: list[str] = []
        for section, new in (("activation_encodings", acts), ("param_encodings", params)):
            old = data.get(section)
            if layout == "1.0.0":
                items = list(old) if isinstance(old, list) else []
                kept = [e for e in items if not (isinstance(e, dict) and e.get("name") in new)]
                replaced += [str(e.get("name")) for e in items
                             if isinstance(e, dict) and e.get("name") in new]
                data[section] = kept + [_to_100(n, e) for n, e in new.items()]
            else:
                items_d = dict(old) if isinstance(old, dict) else {}
                replaced += [n for n in new if n in items_d]
                data[section] = {**items_d, **new}
        kept_n = _count(raw) - len(replaced)
        note = (f"merged with the export's overrides {base.name} ({kept_n} of its entries "
                f"kept" + (f", {len(replaced)} replaced: {', '.join(replaced[:5])}"
                           if replaced else "") + ")")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(data, indent=1, default=_plain), encoding="utf-8")
    return note


def _count(raw: dict[str, Any]) -> int:
    n = 0
    for section in ("activation_encodings", "param_encodings"):
        v = raw.get(section)
        n += len(v) if isinstance(v, list | dict) else 0
    return n


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")
