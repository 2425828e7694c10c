"""Graph inputs and outputs of an ONNX model: names, numpy dtypes, dims."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from qnn_ci.errors import UserError

Dim = int | str | None   # int: static (may be -1), str: dim_param, None: unknown


@dataclass(frozen=True)
class TensorIO:
    name: str
    dtype: str                     # numpy dtype name, "?" when undefined
    dims: tuple[Dim, ...] | None   # None: no shape at all

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        if self.dims is None or not all(isinstance(d, int) and d > 0 for d in self.dims):
            return None
        return tuple(int(d) for d in self.dims)  # type: ignore[arg-type]


def _io(vi: onnx.ValueInfoProto) -> TensorIO:
    tt = vi.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "?"
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


def load_model(path: Path, *, external_data: bool = False) -> onnx.ModelProto:
    try:
        return onnx.load(str(path), load_external_data=external_data)
    except FileNotFoundError:
        raise UserError("model not found", file=path) from None
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"cannot read ONNX model: {first}", file=path) from None


def graph_inputs(model: onnx.ModelProto) -> list[TensorIO]:
    inits = {i.name for i in model.graph.initializer}
    return [_io(v) for v in model.graph.input if v.name not in inits]


def graph_outputs(model: onnx.ModelProto) -> list[TensorIO]:
    return [_io(v) for v in model.graph.output]


def np_dtype(name: str) -> np.dtype:
    return np.dtype(name)


@dataclass(frozen=True)
class ModelSignature:
    """A model's graph inputs {name: (dims, dtype)} (dims: int, or None when not a
    fixed value) and output names, read without its weights."""

    inputs: dict[str, tuple[tuple[int | None, ...] | None, str]]
    outputs: tuple[str, ...]
    external_data: tuple[str, ...] = ()      # external weight files, relative to the model


@cache
def _signature(path: Path, mtime: float) -> ModelSignature:
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs: dict[str, tuple[tuple[int | None, ...] | None, str]] = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                     for d in tt.shape.dim) if tt.HasField("shape") else None
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "?"
        inputs[inp.name] = (dims, dtype)
    from qnn_ci.shapes.modelio import external_files  # the shapes package imports us

    return ModelSignature(inputs, tuple(o.name for o in model.graph.output),
                          tuple(sorted(external_files(model))))


def model_signature(path: Path) -> ModelSignature:
    return _signature(path, path.stat().st_mtime)
