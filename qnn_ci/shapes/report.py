"""What the static-shape stage found: per-dim classification, the graph inputs
and outputs before and after pinning, the interior tensors still dynamic or
unshaped, the shapes filled from onnxruntime, and the equivalence checks.

``ShapeReport.to_dict()`` is the documented ``qnn-ci shapes --json`` object
(see docs/shapes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import helper

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.util.listing import cut_text

# Dim kinds.
STATIC = "static"        # dim_value >= 0
SYMBOLIC = "symbolic"    # dim_param, including the literal string "?"
UNKNOWN = "unknown"      # neither dim_value nor dim_param
MINUS_ONE = "minus_one"  # a literal negative dim_value (exporters write -1)

LOOSE_SHOWN = 5          # dynamic inputs/outputs named in the summary line


@dataclass(frozen=True)
class DimInfo:
    """One dim of a tensor shape: its kind (static, -1, symbolic, unknown), value or name."""

    kind: str
    value: int | None = None     # the dim_value (static or minus_one)
    param: str | None = None     # the dim_param (symbolic)

    @classmethod
    def from_proto(cls, dim: onnx.TensorShapeProto.Dimension) -> DimInfo:
        which = dim.WhichOneof("value")
        if which == "dim_value":
            v = int(dim.dim_value)
            return cls(STATIC if v >= 0 else MINUS_ONE, value=v)
        if which == "dim_param":
            return cls(SYMBOLIC, param=dim.dim_param)
        return cls(UNKNOWN)

    @property
    def static(self) -> bool:
        return self.kind == STATIC

    def __str__(self) -> str:
        if self.kind in (STATIC, MINUS_ONE):
            return str(self.value)
        if self.kind == SYMBOLIC:
            return repr(self.param)
        return "?"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "param": self.param}


def dims_of(vi: onnx.ValueInfoProto) -> list[DimInfo] | None:
    """The dims of a tensor's type, or None when it has no shape (or is no tensor)."""
    if vi.type.WhichOneof("value") != "tensor_type":
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [DimInfo.from_proto(d) for d in tt.shape.dim]


def dtype_name(elem_type: int) -> str:
    """numpy dtype name of an ONNX element type ("?" when undefined or unmappable)."""
    if not elem_type:
        return "?"
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, ValueError, TypeError):
        pass
    try:
        return helper.tensor_dtype_to_string(elem_type)
    except (KeyError, ValueError, TypeError):
        return f"unknown element type {elem_type}"


def format_dims(dims: list[DimInfo] | None) -> str:
    return "(no shape)" if dims is None else "[" + ", ".join(str(d) for d in dims) + "]"


def is_static(dims: list[DimInfo] | None) -> bool:
    return dims is not None and all(d.static for d in dims)


@dataclass
class TensorShapeInfo:
    """A graph input or output: its dims as given in the model and after pinning."""

    name: str
    dtype: str
    dims: list[DimInfo] | None                 # as given in the original model
    pinned: list[DimInfo] | None = None        # in the pinned (and converted) model

    @property
    def static(self) -> bool:
        return is_static(self.pinned)

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The pinned static shape, or None while any dim is not static."""
        if not self.static or self.pinned is None:
            return None
        return tuple(int(d.value or 0) for d in self.pinned)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "dtype": self.dtype,
            "dims": None if self.dims is None else [d.to_dict() for d in self.dims],
            "pinned": None if self.pinned is None else [d.to_dict() for d in self.pinned],
            "shape": None if self.shape is None else list(self.shape),
            "static": self.static,
        }


@dataclass(frozen=True)
class InteriorTensor:
    """A tensor some node produces, in the main graph or a subgraph."""

    name: str
    graph: str                  # "main", or "main/<node>.<attribute>" for subgraphs
    producer: str               # the producing node's name ("<op>#<index>" if unnamed)
    op_type: str
    dims: list[DimInfo] | None = None

    @property
    def in_subgraph(self) -> bool:
        return self.graph != "main"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "graph": self.graph, "producer": self.producer,
                "op_type": self.op_type,
                "dims": None if self.dims is None else [str(d) for d in self.dims]}


@dataclass(frozen=True)
class FilledTensor:
    """A tensor whose static shape came from an onnxruntime run."""

    name: str
    graph: str
    producer: str
    op_type: str
    shape: tuple[int, ...]
    was: str                    # "dynamic" or "unshaped" after onnx shape inference

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "graph": self.graph, "producer": self.producer,
                "op_type": self.op_type, "shape": list(self.shape), "was": self.was}


@dataclass(frozen=True)
class EquivalenceCheck:
    """The pinned (or opset-converted) model against the original on the same feeds."""

    model: str                          # "pinned" or "opset <N>"
    equivalent: bool | None             # None: could not be checked
    reason: str | None = None           # why not equivalent / not checked
    max_abs_diff: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "equivalent": self.equivalent, "reason": self.reason,
                "max_abs_diff": dict(self.max_abs_diff)}


@dataclass
class TensorCounts:
    """How many produced tensors there are, and how many are static, dynamic, unshaped."""

    tensors: int = 0
    static: int = 0
    dynamic: int = 0
    unshaped: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"tensors": self.tensors, "static": self.static, "dynamic": self.dynamic,
                "unshaped": self.unshaped}


@dataclass
class ShapeReport:
    """What the static-shape stage found for one model (``qnn-ci shapes --json``)."""

    model: str
    inputs: list[TensorShapeInfo] = field(default_factory=list)
    outputs: list[TensorShapeInfo] = field(default_factory=list)
    dynamic_tensors: list[InteriorTensor] = field(default_factory=list)
    unshaped_tensors: list[InteriorTensor] = field(default_factory=list)
    filled_tensors: list[FilledTensor] = field(default_factory=list)
    fill_skipped: list[tuple[str, str]] = field(default_factory=list)   # (tensor, reason)
    counts: TensorCounts = field(default_factory=TensorCounts)          # final model
    inferred: TensorCounts = field(default_factory=TensorCounts)        # onnx inference only
    dropped_value_info: int = 0
    inference_warnings: list[str] = field(default_factory=list)
    equivalence: list[EquivalenceCheck] = field(default_factory=list)
    opset_from: int | None = None
    opset_to: int | None = None
    output_model: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def static(self) -> bool:
        return (all(i.static for i in self.inputs) and all(o.static for o in self.outputs)
                and not self.dynamic_tensors and not self.unshaped_tensors)

    @property
    def equivalent(self) -> bool | None:
        if not self.equivalence:
            return None
        values = [c.equivalent for c in self.equivalence]
        if any(v is False for v in values):
            return False
        if any(v is None for v in values):
            return None
        return True

    @property
    def ok(self) -> bool:
        return self.static and self.equivalent is True

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def summary(self) -> str:
        """One line, e.g. ``static: 566 tensors, 5 filled from onnxruntime, equivalent``."""
        c = self.counts
        if self.static:
            head = f"static: {c.tensors} tensors"
        else:
            head = f"not static: {c.dynamic} dynamic and {c.unshaped} unshaped of {c.tensors} " \
                   "tensors"
            loose = [i.name for i in (*self.inputs, *self.outputs) if not i.static]
            if loose:
                head += f" (dynamic inputs/outputs: {cut_text(loose, LOOSE_SHOWN)})"
        eq = self.equivalent
        tail = "equivalent" if eq else ("NOT equivalent" if eq is False
                                        else "equivalence not checked")
        return f"{head}, {len(self.filled_tensors)} filled from onnxruntime, {tail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "inputs": [i.to_dict() for i in self.inputs],
            "outputs": [o.to_dict() for o in self.outputs],
            "dynamic_tensors": [t.to_dict() for t in self.dynamic_tensors],
            "unshaped_tensors": [t.to_dict() for t in self.unshaped_tensors],
            "filled_tensors": [t.to_dict() for t in self.filled_tensors],
            "fill_skipped": [{"name": n, "reason": r} for n, r in self.fill_skipped],
            "counts": self.counts.to_dict(),
            "inferred_counts": self.inferred.to_dict(),
            "dropped_value_info": self.dropped_value_info,
            "inference_warnings": list(self.inference_warnings),
            "equivalence": [c.to_dict() for c in self.equivalence],
            "opset": None if self.opset_to is None else {"from": self.opset_from,
                                                          "to": self.opset_to},
            "static": self.static,
            "equivalent": self.equivalent,
            "output_model": self.output_model,
            "findings": [f.to_dict() for f in self.findings],
            "summary": self.summary(),
        }
