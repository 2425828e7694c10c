"""Why a tensor without an AIMET encoding needs none: the converter derives it.

Real AIMET exports (``../shared/reference/real-outputs/aimet/``) leave many
tensors out on purpose, and the converter fills them in without calibration:

- ``data_movement``: outputs of Reshape, Split, MaxPool, Concat, ... take the
  encoding of their input (``qnn_ci.tables.ENCODING_FROM_INPUT_OPS``);
- ``fused``: an output that disappears into a fused op: the op before a Relu or
  Clip the converter squashes into it, a Conv/MatMul output whose bias Add is
  folded in, a Conv output a BatchNorm is folded into, a constant folded away;
- ``bias``: biases (Conv/Gemm input 2, the static addend of a MatMul/Conv bias
  Add), quantized from the input and weight scales;
- ``batchnorm``: BatchNormalization scale/B/mean/var, folded into the convolution.

Every other tensor without an encoding really takes its range from the
``--input_list`` calibration.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from qnn_ci.tables import (
    BATCHNORM_PARAM_INPUTS,
    BIAS_ADD_PRODUCERS,
    BIAS_INPUTS,
    ENCODING_FROM_INPUT_OPS,
    SQUASHED_ACTIVATION_OPS,
)

ROLES = ("data_movement", "fused", "bias", "batchnorm")
ROLE_TEXT = {
    "data_movement": "data-movement outputs (encoding taken from their input)",
    "fused": "outputs fused away (Relu squashed, bias Add or BatchNorm folded, constants "
             "folded)",
    "bias": "biases (quantized from the input and weight scales)",
    "batchnorm": "BatchNorm parameters (folded into the convolution)",
}
def derived_text(counts: dict[str, int]) -> str:
    """``3 data-movement outputs (...), 105 BatchNorm parameters (...)``."""
    return ", ".join(f"{n} {ROLE_TEXT[r]}" for r, n in counts.items() if n)


MAX_HOPS = 4           # a bias reaches its Add through at most a few Reshape/Unsqueeze


class _Graph:
    def __init__(self, graph: onnx.GraphProto) -> None:
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for node in graph.node:
            for out in node.output:
                if out:
                    self.producer[out] = node
            for i, name in enumerate(node.input):
                if name:
                    self.consumers.setdefault(name, []).append((node, i))
        self.static: set[str] = {i.name for i in graph.initializer}
        for node in graph.node:          # nodes are topologically sorted in valid ONNX
            if node.op_type == "Constant" or (
                    node.input and all(not n or n in self.static for n in node.input)):
                self.static.update(o for o in node.output if o)
        self.outputs = {o.name for o in graph.output}

    def sole_consumer(self, name: str) -> tuple[onnx.NodeProto, int] | None:
        uses = self.consumers.get(name, [])
        return uses[0] if len(uses) == 1 and name not in self.outputs else None

    def is_bias_add(self, node: onnx.NodeProto, static_index: int) -> bool:
        """``node`` is an Add of a static addend (input ``static_index``) to the output
        of an op the converter folds a bias into."""
        if node.op_type != "Add" or len(node.input) != 2:
            return False
        other = node.input[1 - static_index]
        prod = self.producer.get(other)
        return prod is not None and prod.op_type in BIAS_ADD_PRODUCERS and \
            node.input[static_index] in self.static

    def bias_use(self, name: str) -> bool:
        """Whether static ``name`` ends as a bias, directly or through data movement."""
        frontier = [name]
        for _ in range(MAX_HOPS):
            nxt: list[str] = []
            for t in frontier:
                for node, i in self.consumers.get(t, []):
                    if BIAS_INPUTS.get(node.op_type) == i or self.is_bias_add(node, i):
                        return True
                    if node.op_type in ENCODING_FROM_INPUT_OPS and i == 0:
                        nxt.extend(o for o in node.output if o)
            frontier = nxt
            if not frontier:
                break
        return False


def _role(g: _Graph, name: str) -> str | None:
    uses = g.consumers.get(name, [])
    if name in g.static:
        if uses and all(n.op_type == "BatchNormalization" and i in BATCHNORM_PARAM_INPUTS
                        for n, i in uses):
            return "batchnorm"
        if g.bias_use(name):
            return "bias"
        prod = g.producer.get(name)
        if prod is not None and prod.op_type != "Constant":
            return "data_movement" if prod.op_type in ENCODING_FROM_INPUT_OPS else "fused"
        return None
    prod = g.producer.get(name)
    if prod is not None and prod.op_type in ENCODING_FROM_INPUT_OPS:
        return "data_movement"
    sole = g.sole_consumer(name)
    if sole is None:
        return None
    node, i = sole
    if node.op_type in SQUASHED_ACTIVATION_OPS and i == 0:
        return "fused"
    if prod is not None and prod.op_type in BIAS_ADD_PRODUCERS and \
            g.is_bias_add(node, 1 - i):
        return "fused"
    if prod is not None and prod.op_type in ("Conv", "ConvTranspose") and \
            node.op_type == "BatchNormalization" and i == 0:
        return "fused"
    return None


def derived_roles(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, str]:
    """name -> role (one of ``ROLES``) for each of ``names`` (tensors of the main graph
    without an encoding) that the converter derives; the others are left out."""
    g = _Graph(model.graph)
    out: dict[str, str] = {}
    for name in names:
        role = _role(g, name)
        if role is not None:
            out[name] = role
    return out
