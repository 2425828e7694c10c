"""BatchNormalization folded into the Conv / ConvTranspose that feeds it.

Quantized as a node of its own (per-tensor scale/bias/mean/var), an unfused
BatchNormalization was seen to compute wrong results on the HTP simulator
(the PP-OCR classifier: cosine 0.17 against fp32, while the same QDQ model on
onnxruntime CPU gave 1.0). The QNN converter folds it into the convolution;
so does this, before quantizing, in plain onnx (onnxruntime's own optimizer is
not used: it also rewrites FP16 Casts for the CPU EP, which would hide the FP16
problems the HTP check is there to find).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return a.f if a.type == onnx.AttributeProto.FLOAT else a.i
    return default


def fuse_batchnorm(model: onnx.ModelProto) -> int:
    """Fold every inference-mode BatchNormalization whose input is a Conv (or
    ConvTranspose with group 1) output used by nothing else, with constant
    weights and BN parameters, into that convolution. In place, main graph;
    returns how many were folded."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    uses = Counter(i for n in graph.node for i in n.input)
    uses.update(o.name for o in graph.output)
    fused: list[onnx.NodeProto] = []
    dropped: set[str] = set()
    for bn in graph.node:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") \
                or len(bn.output) != 1 or _attr(bn, "training_mode", 0):
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type not in ("Conv", "ConvTranspose") or \
                uses[bn.input[0]] != 1 or len(conv.input) < 2:
            continue
        axis = 0 if conv.op_type == "Conv" else 1
        if axis == 1 and _attr(conv, "group", 1) != 1:
            continue
        names = [conv.input[1], *(conv.input[2:3]), *bn.input[1:5]]
        if any(n not in inits or uses[n] != 1 for n in names):
            continue
        w = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
        channels = w.shape[axis]
        scale, beta, mean, var = (numpy_helper.to_array(inits[n]).astype(np.float64)
                                  for n in bn.input[1:5])
        if any(p.shape != (channels,) for p in (scale, beta, mean, var)):
            continue
        bias = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) \
            if len(conv.input) > 2 and conv.input[2] else np.zeros(channels)
        factor = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
        shape = [1] * w.ndim
        shape[axis] = channels
        dtype = numpy_helper.to_array(inits[conv.input[1]]).dtype
        w_name, b_name = f"{conv.input[1]}_bnfused", f"{conv.name or bn.name}_bias_bnfused"
        graph.initializer.append(numpy_helper.from_array(
            (w * factor.reshape(shape)).astype(dtype), w_name))
        graph.initializer.append(numpy_helper.from_array(
            ((bias - mean) * factor + beta).astype(dtype), b_name))
        dropped.update(names)
        dropped.add(conv.output[0])
        del conv.input[1:]
        conv.input.extend([w_name, b_name])
        conv.output[0] = bn.output[0]
        fused.append(bn)
    for bn in fused:
        graph.node.remove(bn)
    if fused:
        for field in (graph.initializer, graph.value_info):
            keep = [t for t in field if t.name not in dropped]
            del field[:]
            field.extend(keep)
    return len(fused)
