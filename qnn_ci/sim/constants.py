"""Weights held in ``Constant`` nodes -> initializers.

onnxruntime's QDQ quantizer only quantizes initializers: a Conv whose weight
comes from a ``Constant`` node (the PaddleOCR exports hold every weight that
way) stays float, and preparing for an HTP without FP16 then fails with an
NHWC layout message that names no cause. Folding them first fixes it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

_LIST_ATTRS = {"value_floats": np.float32, "value_ints": np.int64}
_SCALAR_ATTRS = {"value_float": np.float32, "value_int": np.int64}


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a Constant node produces, or None for kinds left alone
    (sparse and string constants)."""
    if len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
    elif attr.name in _SCALAR_ATTRS:
        value = attr.f if attr.name == "value_float" else attr.i
        tensor = numpy_helper.from_array(np.array(value, dtype=_SCALAR_ATTRS[attr.name]))
    elif attr.name in _LIST_ATTRS:
        values = list(attr.floats) if attr.name == "value_floats" else list(attr.ints)
        tensor = numpy_helper.from_array(np.array(values, dtype=_LIST_ATTRS[attr.name]))
    else:
        return None
    tensor.name = node.output[0]
    return tensor


def _fold_graph(graph: onnx.GraphProto) -> int:
    folded = 0
    outputs = {o.name for o in graph.output}
    remove: list[int] = []
    for index, node in enumerate(graph.node):
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                folded += _fold_graph(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                folded += sum(_fold_graph(g) for g in attr.graphs)
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") \
                or node.output[0] in outputs:
            continue
        tensor = _constant_tensor(node)
        if tensor is not None:
            graph.initializer.append(tensor)
            remove.append(index)
    for index in reversed(remove):
        del graph.node[index]
    return folded + len(remove)


def fold_constants(model: onnx.ModelProto) -> int:
    """Turn ``Constant`` nodes into initializers in place, in the main graph and
    every subgraph; returns how many were folded. A Constant that is itself a
    graph output is left as it is."""
    return _fold_graph(model.graph)
