"""Every tensor of an ONNX graph: its element type and static shape (from shape
inference, best effort), and how many bytes one such tensor takes."""

from __future__ import annotations

import logging

import onnx
from onnx import TensorProto

log = logging.getLogger(__name__)

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE,
               TensorProto.BFLOAT16)
Shape = tuple[int, ...]


def tensor_specs(model: onnx.ModelProto) -> dict[str, tuple[int, Shape | None]]:
    """Tensor name -> (ONNX element type, static shape or None), from shape
    inference (best effort) and the graph's own inputs, outputs and value_info."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as exc:            # a model shape inference cannot take
        log.debug("shape inference failed: %s", exc)
        inferred = model
    specs: dict[str, tuple[int, Shape | None]] = {}
    g = inferred.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            tt = vi.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else -1
                         for d in tt.shape.dim) if tt.HasField("shape") else None
            shape = dims if dims is not None and all(d >= 0 for d in dims) else None
            specs[vi.name] = (tt.elem_type, shape)
    for init in g.initializer:
        specs[init.name] = (init.data_type, tuple(init.dims))
    return specs


def tensor_bytes(spec: tuple[int, Shape | None] | None) -> int | None:
    """The bytes of one tensor of that (element type, shape); None when unknown."""
    if spec is None or spec[1] is None:
        return None
    try:
        size = onnx.helper.tensor_dtype_to_np_dtype(spec[0]).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    n = 1
    for d in spec[1]:
        n *= d
    return n * size
