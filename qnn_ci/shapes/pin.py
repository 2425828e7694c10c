"""Pin graph-input dims, drop stale shape annotations, run onnx shape inference
with data propagation, and list every tensor (main graph and subgraphs) by how
much of its shape is known.

Pinning only the graph edges is not enough: the converter needs every interior
tensor static. This module says which are not.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import shape_inference

from qnn_ci.errors import UserError
from qnn_ci.shapes.report import (
    DimInfo,
    InteriorTensor,
    TensorCounts,
    dims_of,
    format_dims,
    is_static,
)

log = logging.getLogger(__name__)

MAIN = "main"
MAX_DIM = (1 << 63) - 1   # dim_value is an int64


def node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


def iter_graphs(graph: onnx.GraphProto, path: str = MAIN
                ) -> Iterator[tuple[str, onnx.GraphProto]]:
    """The graph and every subgraph below it (If branches, Loop/Scan bodies), with
    a path such as ``main/If_0.then_branch``."""
    yield path, graph
    for idx, node in enumerate(graph.node):
        for attr in node.attribute:
            where = f"{path}/{node_label(node, idx)}.{attr.name}"
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(attr.g, where)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for k, sub in enumerate(attr.graphs):
                    yield from iter_graphs(sub, f"{where}[{k}]")


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (IR < 4 lists weights as inputs)."""
    inits = {i.name for i in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


# ---------------------------------------------------------------- validation

def _did_you_mean(name: str, known: list[str]) -> str:
    lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_dims(model: onnx.ModelProto, dims: dict[str, tuple[int, ...]], *,
                  file: str | Path | None = None, line: int | None = None,
                  key_format: str = "--dim {name}") -> None:
    """Raise ``UserError`` (one line, carrying ``key_format.format(name=...)`` as the
    key) when ``dims`` names an input the model lacks, has a non-integer or
    non-positive dim, disagrees with the input's rank, or changes a dim the model
    already fixes."""
    inputs = {v.name: v for v in real_inputs(model)}
    for name, shape in dims.items():
        key = key_format.format(name=name)
        if name not in inputs:
            hint = _did_you_mean(name, list(inputs))
            raise UserError(f"the model has no input {name!r}{hint}; its inputs: "
                            f"{', '.join(inputs) or '(none)'}", file=file, line=line, key=key)
        if not isinstance(shape, tuple | list):
            raise UserError(f"dims must be a list of integers, got {shape!r}",
                            file=file, line=line, key=key)
        for d in shape:
            if not _is_int(d):
                raise UserError(f"dim {d!r} is not an integer; give whole numbers like 1,3,224",
                                file=file, line=line, key=key)
            if d <= 0:
                raise UserError(f"dim {d} must be a positive integer", file=file, line=line,
                                key=key)
            if d > MAX_DIM:
                raise UserError(f"dim {d} is larger than ONNX allows (2^63 - 1)", file=file,
                                line=line, key=key)
        declared = dims_of(inputs[name])
        if declared is None:
            continue            # rank unknown: any rank pins it
        if len(declared) != len(shape):
            raise UserError(f"{len(shape)} dims {list(shape)} but input {name!r} has rank "
                            f"{len(declared)} {format_dims(declared)}; give {len(declared)}",
                            file=file, line=line, key=key)
        for i, (have, want) in enumerate(zip(declared, shape, strict=True)):
            if have.static and have.value != want:
                raise UserError(f"dim {i} of input {name!r} is fixed at {have.value} in the "
                                f"model, got {want}", file=file, line=line, key=key)


def dim_suggestion(vi: onnx.ValueInfoProto) -> str:
    """``x=<d0>,3,<d2>`` — what a ``--dim`` for this input looks like."""
    dims = dims_of(vi)
    if dims is None:
        return f"{vi.name}=<d0>,<d1>,..."
    return vi.name + "=" + ",".join(str(d.value) if d.static else f"<d{i}>"
                                    for i, d in enumerate(dims))


# ---------------------------------------------------------------- rewriting

def pin_inputs(model: onnx.ModelProto, dims: dict[str, tuple[int, ...]]) -> None:
    """Write ``dims`` into the graph inputs' types (in place)."""
    for vi in real_inputs(model):
        if vi.name not in dims:
            continue
        shape = vi.type.tensor_type.shape
        want = dims[vi.name]
        if len(shape.dim) != len(want):
            del shape.dim[:]
            for _ in want:
                shape.dim.add()
        for d, value in zip(shape.dim, want, strict=True):
            d.Clear()
            d.dim_value = int(value)
        log.debug("pinned %s to %s", vi.name, list(want))


def drop_stale_shapes(model: onnx.ModelProto) -> int:
    """Remove every ``value_info`` (main graph and subgraphs) and clear the non-static
    dims of graph outputs, so no shape from before pinning survives inference.
    Returns how many ``value_info`` entries were dropped."""
    dropped = 0
    for _path, graph in iter_graphs(model.graph):
        dropped += len(graph.value_info)
        del graph.value_info[:]
        for out in graph.output:
            dims = out.type.tensor_type.shape.dim if out.type.HasField("tensor_type") else []
            for d in dims:
                if not (d.HasField("dim_value") and d.dim_value >= 0):
                    d.Clear()
    if dropped:
        log.info("dropped %d stale value_info entries", dropped)
    return dropped


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def infer(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """onnx shape inference with data propagation. A strict pass first to learn the
    first error (returned as a warning), then the lenient pass that is used."""
    warnings: list[str] = []
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                            data_prop=True), warnings
    except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError
        warnings.append(_first_line(exc))
        log.info("strict shape inference: %s", warnings[-1])
    try:
        return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True), warnings
    except Exception as exc:
        warnings.append(_first_line(exc))
        log.warning("shape inference failed: %s", warnings[-1])
        return model, warnings


# ---------------------------------------------------------------- listing

@dataclass
class TensorListing:
    """Every tensor some node produces, by how much of its shape is known."""

    static: list[InteriorTensor] = field(default_factory=list)
    dynamic: list[InteriorTensor] = field(default_factory=list)
    unshaped: list[InteriorTensor] = field(default_factory=list)

    def counts(self) -> TensorCounts:
        s, d, u = len(self.static), len(self.dynamic), len(self.unshaped)
        return TensorCounts(tensors=s + d + u, static=s, dynamic=d, unshaped=u)


def list_tensors(model: onnx.ModelProto) -> TensorListing:
    """Every node output in the main graph and in all subgraphs, sorted by whether
    its shape is static, dynamic (some dim not a value) or absent."""
    listing = TensorListing()
    for path, graph in iter_graphs(model.graph):
        known: dict[str, onnx.ValueInfoProto] = {}
        for vi in (*graph.value_info, *graph.output):
            known[vi.name] = vi
        for idx, node in enumerate(graph.node):
            for out in node.output:
                if not out:
                    continue                       # an omitted optional output
                vi = known.get(out)
                dims: list[DimInfo] | None = dims_of(vi) if vi is not None else None
                t = InteriorTensor(out, path, node_label(node, idx), node.op_type, dims)
                if dims is None:
                    listing.unshaped.append(t)
                elif is_static(dims):
                    listing.static.append(t)
                else:
                    listing.dynamic.append(t)
    return listing
