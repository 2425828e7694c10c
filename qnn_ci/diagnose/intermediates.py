"""Intermediate tensors of a model, exposed as graph outputs and run on
onnxruntime CPU.

- ``float_tensors(model)``: the float outputs of the top-level nodes in
  topological order, as ``layers.TensorInfo`` (non-float tensors, tensors whose
  value depends on no graph input (constant folding leftovers, shape
  arithmetic) and tensors inside subgraphs are left out).
- ``quantized_names(qdq_model, tensors)``: for each float-model tensor T, the
  tensor of the QDQ model (onnxruntime's QDQ quantizer output) that holds T's
  quantized value: the output of the DequantizeLinear that re-reads T
  (T -> QuantizeLinear -> DequantizeLinear), found by graph structure; else T
  itself when the QDQ model has it (a tensor left float, or a graph output the
  quantizer made a DequantizeLinear's output). Tensors the QDQ model lacks (e.g.
  a Relu the quantizer fused into the Conv before it) are listed as missing,
  with the node that computes the fused value where one can be named.
- ``expose(model, names)``: a copy of the model with those tensors added as
  graph outputs; ``only=True``: those tensors are its only outputs and the nodes
  they do not depend on are left out (a batch of the sweep).
- ``run_samples(model_path, samples, names)``: the exposed values per sample,
  one sample at a time (a generator: the caller keeps metrics, not tensors).

Compare the QDQ model with the float model it was quantized from: the
``<stem>.float.onnx`` that ``quantize_for_htp`` writes beside it (Constants
folded, BatchNormalization fused), so tensor names line up.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from qnn_ci.diagnose.layers import TensorInfo
from qnn_ci.model.sizes import FLOAT_TYPES, tensor_specs
from qnn_ci.util.cores import limit_threads

log = logging.getLogger(__name__)

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> ONNX element type (``tensor_specs``)."""
    return {k: v[0] for k, v in tensor_specs(model).items()}


def float_tensors(model: onnx.ModelProto) -> list[TensorInfo]:
    """The float node outputs of the top-level graph, in topological order."""
    g = model.graph
    types = elem_types(model)
    dynamic = {i.name for i in g.input} - {i.name for i in g.initializer}
    out: list[TensorInfo] = []
    for index, node in enumerate(_topological(g)):
        live = any(i in dynamic for i in node.input if i)
        if not live:
            continue
        for name in node.output:
            if not name:
                continue
            dynamic.add(name)
            if types.get(name) in FLOAT_TYPES:
                out.append(TensorInfo(name, _node_label(node, index), node.op_type,
                                      tuple(i for i in node.input if i)))
    return out


def _topological(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes in topological order (the stored order when it already
    is one, as the ONNX spec requires; unsorted nodes appended last)."""
    known = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    pending = list(g.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        rest = []
        for node in pending:
            if all(i in known for i in node.input):
                ordered.append(node)
                known.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):    # inputs from outer scopes / a cycle: keep order
            ordered += rest
            break
        pending = rest
    return ordered


@dataclass(frozen=True)
class Dequant:
    """A DequantizeLinear with constant scale and zero point: its output can be
    computed from its quantized input (``source``) without running it, so a CPU
    run can expose the integer tensor (which keeps onnxruntime's QDQ fusions)."""

    source: str
    scale: np.ndarray
    zero_point: np.ndarray | None
    axis: int = 1

    @functools.cached_property
    def _per_tensor(self) -> tuple[np.float32, np.float32 | None] | None:
        """(scale, zero point) as float32 scalars when per-tensor (made once: a
        sweep dequantizes every tensor of every sample)."""
        scale, zero = self.scale, self.zero_point
        if scale.size != 1:
            return None
        return (np.float32(scale.reshape(-1)[0]),
                None if zero is None else np.float32(zero.reshape(-1)[0]))

    def apply(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q)
        scale, zero = self.scale, self.zero_point
        per_tensor = self._per_tensor
        if per_tensor is not None:
            s, z = per_tensor
            if z is None:
                return np.multiply(q, s, dtype=np.float32)
            x = np.subtract(q, z, dtype=np.float32)
            x *= s
            return x
        x = q.astype(np.float32)
        shape = [1] * x.ndim                              # per-axis
        shape[self.axis % x.ndim] = scale.size
        if zero is not None:
            x -= zero.astype(np.float32).reshape(shape)
        x *= scale.reshape(shape)
        return x


@dataclass
class QuantizedNames:
    """Float tensor -> the QDQ model's tensor holding its quantized value."""

    names: dict[str, str] = field(default_factory=dict)
    dequant: dict[str, Dequant] = field(default_factory=dict)   # T -> its DQ, when constant
    producers: dict[str, tuple[str, str]] = field(default_factory=dict)  # QDQ node, op
    missing: list[str] = field(default_factory=list)
    fused: dict[str, tuple[str, str]] = field(default_factory=dict)   # missing T -> the
    #  QDQ node (name, op) that computes T's consumer output instead


def quantized_names(qdq: onnx.ModelProto, tensors: Sequence[TensorInfo]) -> QuantizedNames:
    g = qdq.graph
    producer = {o: n for n in g.node for o in n.output if o}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    by_name = {n.name: n for n in g.node if n.name}
    inits = {i.name: i for i in g.initializer}
    result = QuantizedNames()
    for info in tensors:
        t = info.tensor
        if t not in producer:
            result.missing.append(t)
            qnode = by_name.get(info.node)
            if qnode is not None and qnode.op_type not in QDQ_OPS:
                result.fused[t] = (qnode.name, qnode.op_type)
            continue
        name = _dequantized(t, consumers) or t
        result.names[t] = name
        dq = producer.get(name)
        if dq is not None and dq.op_type == "DequantizeLinear":
            d = _constant_dequant(dq, inits)
            if d is not None:
                result.dequant[t] = d
        node = _compute_node(t, producer)
        if node is not None:
            result.producers[t] = (node.name, node.op_type)
    return result


def _dequantized(t: str, consumers: dict[str, list[onnx.NodeProto]]) -> str | None:
    """The output of a DequantizeLinear fed by a QuantizeLinear of ``t``."""
    for q in consumers.get(t, []):
        if q.op_type != "QuantizeLinear" or not q.output:
            continue
        for dq in consumers.get(q.output[0], []):
            if dq.op_type == "DequantizeLinear" and dq.output and dq.output[0]:
                return dq.output[0]
    return None


def _constant_dequant(dq: onnx.NodeProto, inits: dict[str, onnx.TensorProto]
                      ) -> Dequant | None:
    from onnx import numpy_helper

    if dq.domain not in ("", "ai.onnx", "com.microsoft") or len(dq.input) < 2 \
            or dq.input[1] not in inits:
        return None
    if any(a.name == "block_size" for a in dq.attribute):
        return None
    zero = None
    if len(dq.input) > 2 and dq.input[2]:
        if dq.input[2] not in inits:
            return None
        zero = numpy_helper.to_array(inits[dq.input[2]])
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float32)
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    return Dequant(dq.input[0], scale, zero, int(axis))


def _compute_node(t: str, producer: dict[str, onnx.NodeProto]) -> onnx.NodeProto | None:
    """The node that computes ``t`` in the QDQ model, looking through Q/DQ pairs
    (a graph output there is a DequantizeLinear's output)."""
    node = producer.get(t)
    for _ in range(4):
        if node is None or node.op_type not in QDQ_OPS or not node.input:
            return node
        node = producer.get(node.input[0])
    return node


def expose(model: onnx.ModelProto, names: Sequence[str], *,
           types: dict[str, int] | None = None, only: bool = False) -> onnx.ModelProto:
    """A copy of ``model`` with ``names`` added as graph outputs (typed when shape
    inference knows their type, else untyped: onnxruntime infers it); existing
    outputs are kept. ``types``: ``elem_types(model)`` when the caller has it.
    ``only``: ``names`` are the only outputs, and the nodes (and initializers) they
    do not depend on are left out; every graph input stays."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if types is None:
        types = elem_types(model)
    if only:
        _keep_only(copy.graph, names)
    have = {o.name for o in copy.graph.output}
    for name in names:
        if name in have:
            continue
        have.add(name)
        if name in types:
            copy.graph.output.append(onnx.helper.make_tensor_value_info(name, types[name], None))
        else:
            vi = onnx.ValueInfoProto()
            vi.name = name
            copy.graph.output.append(vi)
    return copy


def _used_names(node: onnx.NodeProto) -> set[str]:
    """The tensors a node reads: its inputs and what its subgraphs read."""
    used = {i for i in node.input if i}
    for attr in node.attribute:
        graphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for g in graphs:
            for n in g.node:
                used |= _used_names(n)
    return used


def _keep_only(g: onnx.GraphProto, names: Sequence[str]) -> None:
    """``g`` reduced to what computes ``names``, which become its only outputs."""
    needed = set(names)
    keep: list[onnx.NodeProto] = []
    for node in reversed(list(g.node)):
        if needed.intersection(node.output):
            keep.append(node)
            needed |= _used_names(node)
    kept_nodes = [onnx.NodeProto() for _ in keep]
    for dst, src in zip(kept_nodes, reversed(keep), strict=True):
        dst.CopyFrom(src)
    del g.node[:]
    g.node.extend(kept_nodes)
    inits = [i for i in g.initializer if i.name in needed]
    if len(inits) != len(g.initializer):
        kept_inits = [onnx.TensorProto() for _ in inits]
        for dst_t, src_t in zip(kept_inits, inits, strict=True):
            dst_t.CopyFrom(src_t)
        del g.initializer[:]
        g.initializer.extend(kept_inits)
    del g.output[:]


def save_exposed(model: onnx.ModelProto, names: Sequence[str], path: Path, *,
                 types: dict[str, int] | None = None, only: bool = False) -> Path:
    """``expose`` and write it (external data beside it when the model is large)."""
    exposed = expose(model, names, types=types, only=only)
    path.parent.mkdir(parents=True, exist_ok=True)
    large = exposed.ByteSize() > 1_800_000_000
    onnx.save(exposed, str(path), save_as_external_data=large,
              location=f"{path.name}.data" if large else None)
    return path


def cpu_session(model_path: Path) -> Any:
    import onnxruntime as ort

    # No spinning worker threads after a run: the metrics run in this process
    # between inferences and would share the cores with them.
    so = limit_threads(ort.SessionOptions(), spin=False)
    so.log_severity_level = 3
    return ort.InferenceSession(str(model_path), sess_options=so,
                                providers=["CPUExecutionProvider"])


def run_samples(model_path: Path, samples: Sequence[dict[str, np.ndarray]],
                names: Sequence[str], *, session: Any = None
                ) -> Iterator[dict[str, np.ndarray]]:
    """``{name: value}`` per sample for ``names`` (those the model outputs)."""
    sess = session if session is not None else cpu_session(model_path)
    outputs = {o.name for o in sess.get_outputs()}
    wanted = [n for n in names if n in outputs]
    for feeds in samples:
        yield dict(zip(wanted, sess.run(wanted, feeds), strict=True))
