"""Small real ONNX graphs for the diagnosis tests (helper B's advisor tests import
these too).

``collapse_model``: a conv net where ONE layer's per-tensor 8-bit weights
collapse. Conv ``conv_b`` has one output channel whose weights are ~1000x the
others', so a per-tensor 8-bit weight scale (step ~ 2000/255 x the small weights)
rounds every small channel's weights to 0; per-channel weights keep them. The
big channel feeds nothing downstream (``conv_c``'s weights for it are 0), so the
output ``logits`` depends only on the collapsed channels: with the default W8A16
per-tensor settings it fails cosine 0.99 (on the QDQ model on CPU and on the
simulator), with ``per_channel: true`` it passes.

    x[1,3,32,32] -> conv_a (8) -> relu_a -> conv_b (16, channel 0 huge) -> relu_b
      -> conv_c (8) -> relu_c -> gap -> flatten -> fc (Gemm) -> logits [1,10]

Tensor names: ``a``, ``a_relu``, ``b`` (conv_b's output: the first divergence),
``b_relu``, ``c``, ``c_relu``, ``pooled``, ``flat``, ``logits``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

COLLAPSE_INPUT = "x"
COLLAPSE_SHAPE = (1, 3, 32, 32)
COLLAPSE_LAYER = "b"            # conv_b's output tensor
COLLAPSE_NODE = "conv_b"
BIG = 1000.0                    # channel 0's weight magnitude relative to the others


def _save(graph: onnx.GraphProto, path: Path, opset: int = 17) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def collapse_model(path: Path, *, seed: int = 7) -> Path:
    """Write the collapse model (see the module docstring) to ``path``."""
    rng = np.random.default_rng(seed)

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    wa = w(8, 3, 3, 3, scale=0.3)
    wb = w(16, 8, 3, 3, scale=0.1)
    wb[0] *= BIG
    wc = w(8, 16, 3, 3, scale=0.1)
    wc[:, 0] = 0.0                           # the big channel feeds nothing downstream
    wf = w(10, 8, scale=0.5)
    inits = [numpy_helper.from_array(wa, "wa"),
             numpy_helper.from_array(np.zeros(8, np.float32), "ba"),
             numpy_helper.from_array(wb, "wb"),
             numpy_helper.from_array(np.zeros(16, np.float32), "bb"),
             numpy_helper.from_array(wc, "wc"),
             numpy_helper.from_array(np.zeros(8, np.float32), "bc"),
             numpy_helper.from_array(wf, "wf"),
             numpy_helper.from_array(np.zeros(10, np.float32), "bf")]
    pads = [1, 1, 1, 1]
    nodes = [
        helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="conv_a", pads=pads),
        helper.make_node("Relu", ["a"], ["a_relu"], name="relu_a"),
        helper.make_node("Conv", ["a_relu", "wb", "bb"], ["b"], name="conv_b", pads=pads),
        helper.make_node("Relu", ["b"], ["b_relu"], name="relu_b"),
        helper.make_node("Conv", ["b_relu", "wc", "bc"], ["c"], name="conv_c", pads=pads),
        helper.make_node("Relu", ["c"], ["c_relu"], name="relu_c"),
        helper.make_node("GlobalAveragePool", ["c_relu"], ["pooled"], name="gap"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "collapse",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(COLLAPSE_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    return _save(graph, path)


def collapse_samples(count: int, *, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Deterministic random inputs for the collapse model (seeded; use different
    seeds for calibration and held-out samples)."""
    rng = np.random.default_rng(seed)
    return [{COLLAPSE_INPUT: rng.standard_normal(COLLAPSE_SHAPE).astype(np.float32)}
            for _ in range(count)]


def bn_conv_model(path: Path, *, seed: int = 3) -> Path:
    """x[1,3,16,16] -> conv1 -> bn1 (BatchNormalization) -> relu1 -> conv2 -> y:
    quantized with ``fuse=False`` the BatchNormalization stays a node of its own."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3)
                                     .astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
             numpy_helper.from_array(rng.uniform(0.5, 2.0, 8).astype(np.float32), "bn_s"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, 8).astype(np.float32), "bn_b"),
             numpy_helper.from_array(rng.uniform(-0.2, 0.2, 8).astype(np.float32), "bn_m"),
             numpy_helper.from_array(rng.uniform(0.5, 2.0, 8).astype(np.float32), "bn_v"),
             numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.2)
                                     .astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros(4, np.float32), "b2")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"],
                         ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "bn_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    return _save(graph, path)
