"""Read a converter ``<name>_net.json`` (or the QNN JSON graph onnxruntime-qnn
dumps with ``dump_json_qnn_graph``, which has the same ``graph.tensors`` /
``graph.nodes`` layout).

Tensor ``data_type`` is a DECIMAL ``Qnn_DataType_t`` code (534 = FLOAT_16),
``type`` a code (0 app-write = graph input, 1 app-read = graph output,
3 native, 4 static). Real files from 2.10 to 2.33 carry ``dims``; ``current_dims``
/ ``max_dims`` are read when ``dims`` is absent. ``quant_params.is_overridden``
(2.18 on: AIMET overrides set the encoding) is kept in ``NetTensor.quant``.
Missing keys are tolerated: what cannot be read is listed in ``problems``. A
file larger than ``NET_JSON_CAP``, nested deeper than any real one, or not a
regular file is refused with one line (``qnn_ci.util.safe_read``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.tables import QNN_DATATYPE_BY_CODE
from qnn_ci.util.safe_read import MiB, load_json, read_text, safe_int

log = logging.getLogger(__name__)

NET_JSON_CAP = 1024 * MiB       # real _net.json files reach hundreds of MB for big models
NET_JSON_HINT = "pass the converter's _net.json or a QNN JSON graph"

TENSOR_TYPE_BY_CODE: dict[int, str] = {
    0: "APP_WRITE", 1: "APP_READ", 2: "APP_READWRITE", 3: "NATIVE", 4: "STATIC", 5: "NULL",
}


@dataclass
class NetTensor:
    """One tensor of a ``_net.json``: type code, data type, dims and quantization params."""

    name: str
    type_code: int | None
    data_type_code: int | None
    data_type: str | None              # QNN_DATATYPE_* name, None when the code is unknown
    dims: list[int] | None
    quant: dict[str, Any] = field(default_factory=dict)

    @property
    def type_name(self) -> str | None:
        return None if self.type_code is None else TENSOR_TYPE_BY_CODE.get(self.type_code)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_code, "type_name": self.type_name,
                "data_type": self.data_type_code, "data_type_name": self.data_type,
                "dims": self.dims, "quant": self.quant}


@dataclass
class NetNode:
    """One node of a ``_net.json``: name, op package, op type, input and output tensors."""

    name: str
    package: str | None
    type: str | None
    inputs: list[str]
    outputs: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class NetJson:
    """A ``_net.json`` read: tensors, nodes, the recorded converter command, op types."""

    source: str
    tensors: list[NetTensor]
    nodes: list[NetNode]
    converter_command: str | None
    op_types: list[str]
    problems: list[str] = field(default_factory=list)

    def data_type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tensors:
            key = t.data_type or (f"code {t.data_type_code}" if t.data_type_code is not None
                                  else "?")
            counts[key] = counts.get(key, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "converter_command": self.converter_command,
                "op_types": self.op_types, "tensors": [t.to_dict() for t in self.tensors],
                "nodes": [n.to_dict() for n in self.nodes],
                "data_types": self.data_type_counts(), "problems": self.problems}


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return safe_int(v)
    return None


def _dims(t: dict[str, Any]) -> list[int] | None:
    for key in ("dims", "current_dims", "max_dims"):
        v = t.get(key)
        if isinstance(v, list):
            dims = [_as_int(d) for d in v]
            if all(d is not None for d in dims):
                return [d for d in dims if d is not None]
    return None


def _quant(q: Any) -> dict[str, Any]:
    if not isinstance(q, dict):
        return {}
    out: dict[str, Any] = {}
    for key in ("definition", "encoding", "is_overridden"):
        if key in q:
            out[key] = q[key]
    so = q.get("scale_offset")
    if isinstance(so, dict):
        for key in ("bitwidth", "scale", "offset", "minimum", "maximum", "is_symmetric"):
            if key in so:
                out[key] = so[key]
    aso = q.get("axis_scale_offset")
    if isinstance(aso, dict):
        out["axis"] = aso.get("axis")
        offs = aso.get("scale_offsets")
        out["num_scale_offsets"] = aso.get("num_scale_offsets",
                                           len(offs) if isinstance(offs, list) else None)
    return out


def _items(container: Any, what: str, problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Name -> entry pairs from a dict keyed by name or a list of objects with ``name``."""
    if isinstance(container, dict):
        out = []
        for k, v in container.items():
            if isinstance(v, dict):
                out.append((str(k), v))
            else:
                problems.append(f"{what} {k!r}: not an object")
        return out
    if isinstance(container, list):
        out = []
        for i, v in enumerate(container):
            if isinstance(v, dict) and isinstance(v.get("name"), str):
                out.append((v["name"], v))
            else:
                problems.append(f"{what}[{i}]: no name")
        return out
    if container is not None:
        problems.append(f"graph.{what} is neither an object nor a list")
    return []


def parse_net_json(data: Any, *, source: str = "<json>") -> NetJson:
    problems: list[str] = []
    if not isinstance(data, dict):
        return NetJson(source, [], [], None, [], ["JSON top level is not an object"])
    graph = data.get("graph")
    if not isinstance(graph, dict):
        # Some dumps may put tensors/nodes at the top level.
        graph = data if ("tensors" in data or "nodes" in data) else {}
        if not graph:
            problems.append("no 'graph' object (not a _net.json / QNN JSON graph?)")
    tensors: list[NetTensor] = []
    for name, t in _items(graph.get("tensors"), "tensors", problems):
        code = _as_int(t.get("data_type"))
        dtname = QNN_DATATYPE_BY_CODE.get(code) if code is not None else None
        if code is None:
            problems.append(f"tensor {name!r}: no data_type")
        elif dtname is None:
            problems.append(f"tensor {name!r}: unknown data_type code {code}")
        tensors.append(NetTensor(name, _as_int(t.get("type")), code, dtname, _dims(t),
                                 _quant(t.get("quant_params"))))
    nodes: list[NetNode] = []
    for name, n in _items(graph.get("nodes"), "nodes", problems):
        ins, outs = n.get("input_names"), n.get("output_names")
        nodes.append(NetNode(name, n.get("package"), n.get("type"),
                             [str(x) for x in ins] if isinstance(ins, list) else [],
                             [str(x) for x in outs] if isinstance(outs, list) else []))
    if graph and not tensors:
        problems.append("no tensors in graph.tensors")
    cmd = data.get("converter_command")
    ops = data.get("op_types")
    return NetJson(source, tensors, nodes, cmd if isinstance(cmd, str) else None,
                   [str(o) for o in ops] if isinstance(ops, list) else [], problems)


def read_net_json(path: Path) -> NetJson:
    """Parse a ``_net.json``. UserError (one line) when it is missing, not a regular
    file, larger than ``NET_JSON_CAP``, not JSON or nested absurdly deep."""
    path = Path(path)
    text = read_text(path, cap=NET_JSON_CAP, what="_net.json", hint=NET_JSON_HINT)
    return parse_net_json(load_json(text, path, hint=NET_JSON_HINT), source=str(path))
