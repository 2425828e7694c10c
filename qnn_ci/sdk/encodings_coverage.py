"""How an AIMET ``.encodings`` file covers an ONNX model: which float tensors
(activations, parameters) it names, which it leaves to the converter's calibration
from ``--input_list``, and names it has that the model does not (the converter
ignores those silently)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from qnn_ci.sdk.encodings import Encodings

log = logging.getLogger(__name__)

_FLOAT_ELEM_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                     onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


@dataclass
class ModelTensors:
    """What an ONNX model offers to quantize, in graph order."""

    activations: list[str]             # float graph inputs and node outputs
    params: list[str]                  # float initializers and Constant-node outputs
    known: set[str]                    # every tensor name in the model (subgraphs too)
    untyped: list[str]                 # node outputs whose element type is unknown


def _walk(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _walk(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _walk(g)


def model_tensors(model: onnx.ModelProto) -> ModelTensors:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:          # a model inference cannot type is still read
        log.info("shape inference failed (%s); using declared types only", exc)
        inferred = model
    elem: dict[str, int] = {}
    for g in _walk(inferred.graph):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                elem[vi.name] = vi.type.tensor_type.elem_type
        for init in g.initializer:
            elem[init.name] = init.data_type
    acts: list[str] = []
    params: list[str] = []
    untyped: list[str] = []
    known: set[str] = set()
    for g in _walk(model.graph):
        inits = {i.name for i in g.initializer}
        for init in g.initializer:
            known.add(init.name)
            if init.data_type in _FLOAT_ELEM_TYPES:
                params.append(init.name)
        for vi in g.input:
            known.add(vi.name)
            if vi.name not in inits and elem.get(vi.name) in _FLOAT_ELEM_TYPES:
                acts.append(vi.name)
        for vi in g.output:
            known.add(vi.name)
        for node in g.node:
            for out in node.output:
                if not out:
                    continue
                known.add(out)
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    value = next((a for a in node.attribute if a.name == "value"), None)
                    if (value is not None and value.t.data_type in _FLOAT_ELEM_TYPES) or \
                            any(a.name in ("value_float", "value_floats")
                                for a in node.attribute):
                        params.append(out)
                    continue
                t = elem.get(out)
                if t is None:
                    untyped.append(out)
                elif t in _FLOAT_ELEM_TYPES:
                    acts.append(out)
    return ModelTensors(list(dict.fromkeys(acts)), list(dict.fromkeys(params)), known,
                        list(dict.fromkeys(untyped)))


def _sanitise(name: str) -> str:
    return re.sub(r"\W+", "_", name)


@dataclass
class Coverage:
    """How an encodings file covers a model: unknown names, uncovered tensors, counts."""

    unknown: list[str]                 # names in the file the model does not have
    uncovered: list[str]               # quantizable tensors the file leaves to --input_list
    counts: dict[str, int]
    derived: dict[str, str] = field(default_factory=dict)   # no encoding needed -> role
    file_activations: list[str] = field(default_factory=list)   # known names, by role
    file_params: list[str] = field(default_factory=list)
    uncovered_activations: list[str] = field(default_factory=list)
    uncovered_params: list[str] = field(default_factory=list)
    sanitised: dict[str, str] = field(default_factory=dict)     # unknown -> model name

    @property
    def none_match(self) -> bool:
        return bool(self.unknown) and self.counts.get("known", 0) == 0

    def derived_counts(self) -> dict[str, int]:
        """role -> how many tensors without encodings the converter derives that way."""
        from qnn_ci.sdk.encoding_roles import ROLES

        return {r: n for r in ROLES if (n := sum(1 for v in self.derived.values() if v == r))}

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "unknown": list(self.unknown),
                "derived": self.derived_counts(), "derived_tensors": dict(self.derived),
                "uncovered_activations": list(self.uncovered_activations),
                "uncovered_params": list(self.uncovered_params),
                "sanitised_names": dict(self.sanitised)}


def coverage(enc: Encodings, model: onnx.ModelProto) -> Coverage:
    """Which file names the model lacks, and which quantizable tensors the file
    does not cover. Activations/params of a 2.0.0 file are sorted by the model.
    Tensors without encodings that the converter derives (``encoding_roles``) are
    in ``derived``; ``uncovered*`` hold only those left to ``--input_list``."""
    from qnn_ci.sdk.encoding_roles import derived_roles

    mt = model_tensors(model)
    param_set = set(mt.params)
    names = enc.names()
    unknown = sorted(n for n in names if n not in mt.known)
    by_sanitised = {_sanitise(k): k for k in mt.known}
    sanitised = {u: by_sanitised[u] for u in unknown
                 if u in by_sanitised and by_sanitised[u] != u}
    file_acts = [n for n in enc.activations if n in mt.known]
    file_params = [n for n in enc.params if n in mt.known]
    for n in enc.unclassified:
        if n in mt.known:
            (file_params if n in param_set else file_acts).append(n)
    missing_acts = [n for n in mt.activations if n not in names]
    missing_params = [n for n in mt.params if n not in names]
    derived = derived_roles(model, missing_acts + missing_params)
    unc_acts = [n for n in missing_acts if n not in derived]
    unc_params = [n for n in missing_params if n not in derived]
    counts = {
        "file_entries": len(names), "known": len(names) - len(unknown),
        "unknown": len(unknown),
        "model_activations": len(mt.activations), "model_params": len(mt.params),
        "covered_activations": len(mt.activations) - len(missing_acts),
        "covered_params": len(mt.params) - len(missing_params),
        "derived_activations": len(missing_acts) - len(unc_acts),
        "derived_params": len(missing_params) - len(unc_params),
        "uncovered_activations": len(unc_acts), "uncovered_params": len(unc_params),
        "untyped": len(mt.untyped),
    }
    return Coverage(unknown=unknown, uncovered=unc_acts + unc_params, counts=counts,
                    derived=derived,
                    file_activations=file_acts, file_params=file_params,
                    uncovered_activations=unc_acts, uncovered_params=unc_params,
                    sanitised=sanitised)


def load_model(path: Path) -> onnx.ModelProto:
    """An ONNX model for coverage checks (graph only, external data not loaded);
    ``qnn_ci.model.onnx_io.load_model``: one line for any file that is not a readable model."""
    from qnn_ci.model.onnx_io import load_model as load_onnx

    return load_onnx(Path(path))


def bitwidth_mismatches(enc: Encodings, cov: Coverage, *, act_bitwidth: int,
                        weights_bitwidth: int, bias_bitwidth: int) -> list[tuple[str, str]]:
    """(tensor, text) for INT encodings whose bitwidth differs from what the
    export asks: activations must use ``act_bitwidth``, parameters
    ``weights_bitwidth`` (or ``bias_bitwidth`` for biases)."""
    by_name = enc.by_name()
    out: list[tuple[str, str]] = []
    for role, names, allowed in (("activation", cov.file_activations, {act_bitwidth}),
                                 ("parameter", cov.file_params,
                                  {weights_bitwidth, bias_bitwidth})):
        for n in names:
            bws = {e.bitwidth for e in by_name.get(n, []) if e.dtype == "int"}
            bad = sorted(b for b in bws if b is not None and b not in allowed)
            if bad:
                want = " or ".join(str(b) for b in sorted(allowed))
                out.append((n, f"{role} {n}: encodings bitwidth {bad[0]}, export asks {want}"))
    return out


def float_entries(enc: Encodings) -> list[tuple[str, int | None]]:
    """(name, bitwidth) of float encodings; a 16-bit float one asks for FP16."""
    return [(n, encs[0].bitwidth) for n, encs in enc.entries()
            if encs and encs[0].dtype == "float"]
