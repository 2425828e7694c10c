"""Graph inputs and outputs of an ONNX model: names, numpy dtypes, dims.

``load_model`` is the one way a user's model is read: a missing, non-regular,
oversized, truncated or corrupt file, a name that is not UTF-8 (protobuf hands
such strings over as ``bytes``) and a graph input/output of an unknown element
type are each one line, ``cannot read ONNX model <path>: <why>``."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from qnn_ci.errors import UserError
from qnn_ci.model.tensors import Dim, ModelSignature, TensorIO
from qnn_ci.util.safe_read import MiB, read_bytes

__all__ = ["Dim", "ModelSignature", "TensorIO", "graph_inputs", "graph_outputs", "load_model",
           "model_signature", "np_dtype", "np_dtype_name"]

MODEL_CAP = 2048 * MiB   # protobuf's limit for one message
MODEL_HINT = "an .onnx file holds at most 2 GiB; bigger models keep weights in external data"
ELEM_TYPES = frozenset(onnx.TensorProto.DataType.values())


def _attr_tensors(attr: onnx.AttributeProto) -> Iterator[onnx.TensorProto]:
    if attr.HasField("t"):
        yield attr.t
    yield from attr.tensors
    for sp in (*([attr.sparse_tensor] if attr.HasField("sparse_tensor") else []),
               *attr.sparse_tensors):
        yield sp.values
        yield sp.indices
    if attr.HasField("g"):
        yield from iter_tensors(attr.g)
    for g in attr.graphs:
        yield from iter_tensors(g)


def iter_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of a graph and its subgraphs (initializers, sparse
    initializers, tensor attributes such as Constant values)."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        for attr in node.attribute:
            yield from _attr_tensors(attr)


def is_external(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL


def external_info(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def external_files(model: onnx.ModelProto) -> set[str]:
    """Relative locations of the external data files the model refers to."""
    return {external_info(t).get("location", "") for t in iter_tensors(model.graph)
            if is_external(t)}


def np_dtype_name(elem_type: int) -> str:
    """numpy dtype name of an ONNX element type, "?" when undefined or unmappable."""
    if not elem_type:
        return "?"
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, ValueError, TypeError):
        return "?"


def _io(vi: onnx.ValueInfoProto) -> TensorIO:
    tt = vi.type.tensor_type
    dtype = np_dtype_name(tt.elem_type)
    if not tt.HasField("shape"):
        return TensorIO(vi.name, dtype, None)
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return TensorIO(vi.name, dtype, tuple(dims))


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def _unreadable(path: Path, why: str) -> UserError:
    return UserError(f"cannot read ONNX model {path}: {why}")


def _graphs(graph: onnx.GraphProto, where: str) -> Iterator[tuple[str, onnx.GraphProto]]:
    yield where, graph
    for k, node in enumerate(graph.node):
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g, f"{where}, node {k} attribute")
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub, f"{where}, node {k} attribute")


def _strings(model: onnx.ModelProto) -> Iterator[tuple[str, Any]]:
    """(what, value) for every name-like string qnn-ci reads from a model."""
    for op in model.opset_import:
        yield "an opset_import domain", op.domain
    for where, g in _graphs(model.graph, "the main graph"):
        yield f"the name of {where}", g.name
        for kind, vis in (("an input", g.input), ("an output", g.output),
                          ("a value_info", g.value_info)):
            for vi in vis:
                yield f"{kind} name in {where}", vi.name
                if vi.type.HasField("tensor_type"):
                    for d in vi.type.tensor_type.shape.dim:
                        yield (f"a dim_param of {kind.split()[1]} {vi.name!r} in {where}",
                               d.dim_param)
        for t in g.initializer:
            yield f"an initializer name in {where}", t.name
            for e in t.external_data:
                yield f"external_data of initializer {t.name!r}", e.key
                yield f"external_data of initializer {t.name!r}", e.value
        for sp in g.sparse_initializer:
            yield f"a sparse initializer name in {where}", sp.values.name
        for k, node in enumerate(g.node):
            yield f"the name of node {k} in {where}", node.name
            yield f"the op_type of node {k} in {where}", node.op_type
            yield f"the domain of node {k} in {where}", node.domain
            for name in (*node.input, *node.output):
                yield f"an input/output name of node {k} in {where}", name
            for attr in node.attribute:
                yield f"an attribute name of node {k} in {where}", attr.name


def check_model(model: onnx.ModelProto, path: Path) -> None:
    """UserError unless every name is UTF-8 and every graph input/output has a
    known element type (what the rest of qnn-ci can then rely on)."""
    for what, value in _strings(model):
        if isinstance(value, bytes):
            shown = repr(value)[:80]
            raise _unreadable(path, f"{what} is not valid UTF-8 ({shown}); ONNX names are "
                              "UTF-8 strings: fix the exporter or rename it")
    for kind, vis in (("graph input", model.graph.input), ("graph output", model.graph.output)):
        for vi in vis:
            if not vi.type.HasField("tensor_type"):
                continue
            elem = vi.type.tensor_type.elem_type
            if elem not in ELEM_TYPES:
                raise _unreadable(path, f"{kind} {vi.name!r} has unknown element type {elem} "
                                  "(not an ONNX TensorProto data type)")


def load_model(path: Path, *, external_data: bool = False) -> onnx.ModelProto:
    """A user's ONNX model; UserError (one line) for anything that is not a readable
    model (see the module doc). Non-regular files are refused before opening."""
    path = Path(path)
    data = read_bytes(path, cap=MODEL_CAP, what="ONNX model", hint=MODEL_HINT,
                      missing="model not found")
    fmt = onnx.serialization.registry.get_format_from_file_extension(path.suffix)
    try:                              # the format from the extension, as onnx.load does
        model = onnx.load_model_from_string(data, format=fmt or "protobuf")
    except Exception as exc:          # DecodeError, and whatever a corrupt file triggers
        raise _unreadable(path, _first_line(exc)) from None
    del data
    check_model(model, path)
    if external_data:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as exc:
            raise _unreadable(path, f"external data: {_first_line(exc)}") from None
    return model


def graph_inputs(model: onnx.ModelProto) -> list[TensorIO]:
    inits = {i.name for i in model.graph.initializer}
    return [_io(v) for v in model.graph.input if v.name not in inits]


def graph_outputs(model: onnx.ModelProto) -> list[TensorIO]:
    return [_io(v) for v in model.graph.output]


def np_dtype(name: str) -> np.dtype:
    return np.dtype(name)


@cache
def _signature(path: Path, mtime: float) -> ModelSignature:
    model = load_model(path)
    inits = {i.name for i in model.graph.initializer}
    inputs: dict[str, tuple[tuple[int | None, ...] | None, str]] = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                     for d in tt.shape.dim) if tt.HasField("shape") else None
        inputs[inp.name] = (dims, np_dtype_name(tt.elem_type))
    return ModelSignature(inputs, tuple(o.name for o in model.graph.output),
                          tuple(sorted(external_files(model))))


def model_signature(path: Path) -> ModelSignature:
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        raise UserError("model not found", file=path) from None
    except (OSError, ValueError) as exc:
        raise _unreadable(path, str(getattr(exc, "strerror", None) or exc)) from None
    return _signature(path, mtime)
