"""Which graph node a name from onnxruntime's QNN EP stands for.

The EP names a node unit after its node (onnxruntime's
``core/providers/qnn/builder/qnn_utils.cc``, ``GetUniqueName(const NodeUnit&)``):
the node's name, or, for a node without one, its op type followed by its
onnxruntime node INDEX: ``Cast`` at index 3 -> ``Cast3``. The index is global,
not counted per op type, and onnxruntime numbers the nodes of a loaded model in
graph order, so it is the node's position in ``graph.node`` of the model the
session was given (nodes onnxruntime adds later get indices after those).
Seen on the simulator: five unnamed nodes Relu, Cast, Add, Cast, Relu log as
``Relu0 Cast1 Add2 Cast3 Relu4``; in their QDQ model (with Q/DQ nodes between
them) as ``Relu0 Cast1 Cast7 Relu8``. A process-wide counter then appends
``_2``, ``_3``, ... whenever the same name is built again (a second session in
one process logs ``Relu0_2``); ``qnn_ci.sim.prepare`` strips such suffixes.

The session's assignment record (``get_provider_graph_assignment_info``) gives an
unnamed node an empty name and no index. ``resolve_record`` matches those per op
type to the model's unnamed nodes of that type, but only where nothing is left
to guess: every unnamed node of the type is off the HTP, or the EP log names
exactly as many of them as the record has off the HTP. Otherwise an entry stays
``unnamed <op type>``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import onnx

UNNAMED = "unnamed {op}"


def ep_name(node: onnx.NodeProto, index: int) -> str:
    """The name the QNN EP gives ``node`` (at ``index`` in ``graph.node``)."""
    return node.name or f"{node.op_type}{index}"


def display_names(model: onnx.ModelProto) -> list[str]:
    """Every node's name as the EP logs it, in graph order."""
    return [ep_name(n, i) for i, n in enumerate(model.graph.node)]


def unnamed_nodes(model: onnx.ModelProto) -> dict[str, int]:
    """EP name -> graph index of every node the model leaves unnamed."""
    return {ep_name(n, i): i for i, n in enumerate(model.graph.node) if not n.name}


def resolve_record(by_ep: Mapping[str, Sequence[tuple[str, str]]], model: onnx.ModelProto,
                   logged_off: Collection[str], qnn_ep: str
                   ) -> dict[str, list[tuple[str, str]]]:
    """``by_ep`` (EP -> [(name, op type)], the assignment record) with each empty name
    replaced by the unnamed graph node it stands for (see the module docstring), or
    by ``unnamed <op type>`` when the record and the log leave a choice.
    ``logged_off``: EP names of nodes the EP log says failed on the HTP."""
    pool: dict[str, list[str]] = {}
    for i, n in enumerate(model.graph.node):
        if not n.name:
            pool.setdefault(n.op_type, []).append(ep_name(n, i))
    off_count: dict[str, int] = {}
    on_count: dict[str, int] = {}
    for ep, nodes in by_ep.items():
        for name, op in nodes:
            if not name:
                counts = on_count if ep == qnn_ep else off_count
                counts[op] = counts.get(op, 0) + 1
    off_names: dict[str, list[str]] = {}
    on_names: dict[str, list[str]] = {}
    for op, candidates in pool.items():
        off, on = off_count.get(op, 0), on_count.get(op, 0)
        logged = [c for c in candidates if c in logged_off]
        chosen: list[str] | None = None
        if off == 0:
            chosen = []
        elif on == 0 and len(candidates) == off:
            chosen = list(candidates)
        elif len(logged) == off:
            chosen = logged
        if chosen is None:
            continue
        off_names[op] = chosen
        rest = [c for c in candidates if c not in chosen]
        if len(rest) == on:
            on_names[op] = rest
    out: dict[str, list[tuple[str, str]]] = {}
    taken: dict[tuple[bool, str], int] = {}
    for ep, nodes in by_ep.items():
        side = ep == qnn_ep
        names = on_names if side else off_names
        resolved: list[tuple[str, str]] = []
        for name, op in nodes:
            if not name:
                k = taken.get((side, op), 0)
                taken[(side, op)] = k + 1
                known = names.get(op)
                name = known[k] if known is not None and k < len(known) else \
                    UNNAMED.format(op=op)
            resolved.append((name, op))
        out[ep] = resolved
    return out
