"""Is this model already quantized? Read from its graph alone, before qnn-ci
quantizes it (again).

Kinds (``Prequantized.kind``):

- ``float`` — no quantization op anywhere.
- ``qdq`` — QuantizeLinear / DequantizeLinear (ai.onnx or com.microsoft, also the
  BFP variants) around float ops: onnxruntime's QDQ format, AIMET's ``to_onnx_qdq``,
  a QAT export. A DequantizeLinear of a weight with no QuantizeLinear anywhere is a
  weight-only quantized model (``weight_only``), also ``qdq``.
- ``qoperator`` — quantized operators: ``QLinear*`` (QLinearConv, QLinearMatMul,
  com.microsoft QLinearAdd, QLinearSigmoid, ...), ``QOrdered*``, QGemm, QAttention,
  QEmbedLayerNormalization, the weight-only contrib ops (MatMulNBits, ...), and
  ConvInteger / MatMulInteger when no DynamicQuantizeLinear feeds them.
- ``dynamic`` — onnxruntime's dynamic quantization: DynamicQuantizeLinear,
  DynamicQuantizeLSTM, DynamicQuantizeMatMul, MatMulIntegerToFloat, and
  ConvInteger / MatMulInteger next to a DynamicQuantizeLinear.
- ``mixed`` — both quantized operators and dynamic quantization.

Q/DQ nodes next to quantized operators or dynamic quantization are the boundary of
those formats (a QOperator model quantizes its inputs and dequantizes its outputs):
they are counted and named, but do not make the model ``mixed``.

Ops are matched by op type in any domain (a custom domain's ``QLinearConv`` is no
more a float op than onnxruntime's); nodes inside If/Loop/Scan bodies and model
local functions count too.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.errors import UserError

if TYPE_CHECKING:   # onnx only when a check really runs
    import onnx

log = logging.getLogger(__name__)

FLOAT, QDQ, QOPERATOR, DYNAMIC, MIXED = "float", "qdq", "qoperator", "dynamic", "mixed"
KINDS = (FLOAT, QDQ, QOPERATOR, DYNAMIC, MIXED)

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QuantizeBFP", "DequantizeBFP"})
DYNAMIC_OPS = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeLSTM",
                         "DynamicQuantizeMatMul", "MatMulIntegerToFloat"})
INTEGER_OPS = frozenset({"ConvInteger", "MatMulInteger", "MatMulInteger16"})
QOPERATOR_OPS = frozenset({
    "QGemm", "QAttention", "QEmbedLayerNormalization", "QMoE", "QuantizeWithOrder",
    "DequantizeWithOrder", "MatMulNBits", "MatMulBnb4", "MatMulFpQ4",
    "GatherBlockQuantized"})
QOPERATOR_PREFIXES = ("QLinear", "QOrdered")

_LOW_BIT = {"INT8", "UINT8", "INT4", "UINT4"}   # onnx.TensorProto data type names
SHOW_OPS = 6                                    # op types named in the message
MAX_NODES = 5_000_000                           # nodes walked before giving up


def category(op_type: str) -> str | None:
    """``qdq``, ``dynamic``, ``integer`` or ``qoperator`` for a quantization op,
    None for any other op."""
    if op_type in QDQ_OPS:
        return QDQ
    if op_type in DYNAMIC_OPS:
        return DYNAMIC
    if op_type in INTEGER_OPS:
        return "integer"
    if op_type in QOPERATOR_OPS or op_type.startswith(QOPERATOR_PREFIXES):
        return QOPERATOR
    return None


@dataclass(frozen=True)
class Prequantized:
    """What the graph says the model is. ``ops``: quantization op -> count
    (``com.microsoft.QLinearAdd`` when the domain is not ai.onnx), most frequent
    first; ``examples``: op -> the first node's name."""

    kind: str
    ops: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    int_weights: int = 0            # int8/uint8/int4/uint4 initializers and constants
    weight_only: bool = False       # DequantizeLinear of weights, no QuantizeLinear
    in_subgraphs: int = 0           # quantization nodes inside If/Loop/Scan bodies/functions

    @property
    def quantized(self) -> bool:
        return self.kind != FLOAT

    def describe(self) -> str:
        """What the model is, naming its quantization ops (one line)."""
        if not self.quantized:
            return "a float model (no quantization ops)"
        what = {QDQ: "QDQ (QuantizeLinear/DequantizeLinear around float ops)",
                QOPERATOR: "QOperator (quantized operators)",
                DYNAMIC: "onnxruntime dynamic quantization",
                MIXED: "quantized operators and onnxruntime dynamic quantization"}[self.kind]
        if self.weight_only:
            what = "weight-only quantized (DequantizeLinear of weights, no QuantizeLinear)"
        names = list(self.ops)
        shown = [f"{op} x{self.ops[op]}" + (f" (e.g. {self.examples[op]!r})"
                                            if op in self.examples else "")
                 for op in names[:SHOW_OPS]]
        more = f", +{len(names) - SHOW_OPS} more op types" if len(names) > SHOW_OPS else ""
        extra = []
        if self.int_weights:
            extra.append(f"{self.int_weights} int8/uint8/int4 weight tensor(s)")
        if self.in_subgraphs:
            extra.append(f"{self.in_subgraphs} of these nodes inside subgraphs/functions")
        tail = f"; {', '.join(extra)}" if extra else ""
        return f"already quantized: {what}: {', '.join(shown)}{more}{tail}"

    def message(self, tool: str = "simulator", *, calibration: bool = True) -> str:
        """One line: what the model is and what to do. ``tool``: ``simulator`` (the
        QDQ quantizer of the simulator path) or ``converter`` (qnn-onnx-converter,
        ``calibration``: whether it is given the calibration list)."""
        if tool == "converter" and self.kind == QDQ:
            why = ("qnn-onnx-converter strips activation Q/DQ nodes by default (its "
                   "--keep_quant_nodes option keeps them) and quantizes the graph itself")
            if calibration:
                why += (" with the calibration list; whether it then keeps the model's own "
                        "scales is not confirmed, so qnn-ci does not convert it this way")
        elif tool == "converter":
            why = ("qnn-ci runs the converter to quantize a float graph with the calibration "
                   "list, which for this model is quantizing it a second time (whether "
                   "qnn-onnx-converter takes these ops at all is not confirmed)")
        else:
            why = ("The simulator path quantizes the model itself (onnxruntime's QDQ "
                   "quantizer), and quantizing a quantized model again makes a different, "
                   "often invalid model")
        return (f"the model is {self.describe()}. {why}. Export the float model (before "
                "quantization) and let qnn-ci quantize it; or, for the SDK path, give the "
                "converter the float model with the AIMET encodings "
                "(quantization.overrides)")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ops": dict(self.ops), "examples": dict(self.examples),
                "int_weights": self.int_weights, "weight_only": self.weight_only,
                "in_subgraphs": self.in_subgraphs}


def _graphs(model: onnx.ModelProto) -> list[tuple[Any, bool]]:
    """(graph or function, is a subgraph/function) for every graph of the model,
    iteratively (a deep nest of bodies cannot exhaust the stack)."""
    import onnx

    found: list[tuple[Any, bool]] = []
    todo: list[tuple[Any, bool]] = [(model.graph, False)]
    todo += [(f, True) for f in model.functions]
    nodes = 0
    while todo:
        g, sub = todo.pop()
        found.append((g, sub))
        for node in g.node:
            nodes += 1
            if nodes > MAX_NODES:
                raise UserError(f"the model has more than {MAX_NODES:,} nodes (counting "
                                "subgraphs): not a model qnn-ci can check")
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    todo.append((attr.g, True))
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    todo += [(s, True) for s in attr.graphs]
    return found


def _low_bit(data_type: int) -> bool:
    import onnx

    try:
        return onnx.TensorProto.DataType.Name(data_type) in _LOW_BIT
    except ValueError:          # not a known data type
        return False


def _label(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


def detect(model: onnx.ModelProto) -> Prequantized:
    """What ``model`` is, from its nodes, initializers and Constant values."""
    import onnx

    ops: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    examples: dict[str, str] = {}
    int_weights = 0
    in_sub = 0
    dq_of_weight = False
    for g, sub in _graphs(model):
        constant_outputs: set[str] = set()
        if isinstance(g, onnx.GraphProto):
            int_weights += sum(_low_bit(t.data_type) for t in g.initializer)
            int_weights += sum(_low_bit(s.values.data_type) for s in g.sparse_initializer)
            weights = {t.name for t in g.initializer}
        else:
            weights = set()
        for i, node in enumerate(g.node):
            if node.op_type == "Constant":
                constant_outputs.update(node.output)
                for attr in node.attribute:
                    if attr.type == onnx.AttributeProto.TENSOR and _low_bit(attr.t.data_type):
                        int_weights += 1
                continue
            cat = category(node.op_type)
            if cat is None:
                continue
            domain = node.domain if node.domain not in ("", "ai.onnx") else ""
            key = f"{domain}.{node.op_type}" if domain else node.op_type
            ops[key] += 1
            cats[cat] += 1
            examples.setdefault(key, _label(node, i))
            in_sub += sub
            if node.op_type == "DequantizeLinear" and node.input and (
                    node.input[0] in weights or node.input[0] in constant_outputs):
                dq_of_weight = True
    has_q = any(op.rsplit(".", 1)[-1] in ("QuantizeLinear", "QuantizeBFP") for op in ops)
    operators = cats[QOPERATOR] > 0
    dynamic = cats[DYNAMIC] > 0
    if cats["integer"] and not dynamic:     # ConvInteger/MatMulInteger on their own
        operators = True
    if operators and dynamic:
        kind = MIXED
    elif operators:
        kind = QOPERATOR
    elif dynamic:
        kind = DYNAMIC
    elif cats[QDQ]:
        kind = QDQ
    else:
        kind = FLOAT
    weight_only = kind == QDQ and dq_of_weight and not has_q
    ordered = dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
    return Prequantized(kind, ordered, {k: examples[k] for k in ordered}, int_weights,
                        weight_only, in_sub)


def detect_file(path: Path) -> Prequantized:
    """``detect`` on the model file at ``path`` (no external data is read); an
    unreadable file is a UserError naming it."""
    from qnn_ci.model.onnx_io import load_model

    return detect(load_model(Path(path)))


def refuse_quantized(model: onnx.ModelProto, *, file: str | Path | None,
                     tool: str = "simulator", calibration: bool = True) -> Prequantized:
    """The float model's ``Prequantized`` result; a UserError (one line, naming
    ``file``) when the model is already quantized."""
    found = detect(model)
    if found.quantized:
        log.info("%s: %s", file, found.describe())
        raise UserError(found.message(tool, calibration=calibration), file=file)
    return found
