"""Read onnxruntime's QNN EP log back: which nodes the HTP rejected, with which
QNN error code, and the session's own error lines.

Lines this understands (severity WARNING/ERROR unless noted):
- ``QNN.backendValidateOpConfig() failed for node `X` of type `Y` with error code N``
  (Y is the QNN op type, e.g. ``ElementWiseAdd``; 3110 is QNN's op-config
  validation failure: the HTP does not take this op with these data types);
- ``Unsupported nodes in QNN EP: { name: X, type: Y }{ ... }`` (Y is the ONNX op type;
  X is empty for a node without a name: such entries name nothing and are skipped);
- ``Validation FAILED for N nodes in OrtNodeUnit (Y) :`` followed by
  ``REASON : ...`` (VERBOSE level only, e.g. ``Cannot get shape`` for a dynamic dim).

A node without a name appears in the first kind as ``<op type><node index>``
(``Cast0``, ``Relu4``): ``qnn_ci.sim.node_names`` maps it back.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VALIDATE = re.compile(r"backendValidateOpConfig\(\) failed for node `(?P<name>[^`]*)` of type "
                       r"`(?P<qtype>[^`]*)` with error code (?P<code>-?\d+)")
_UNSUPPORTED = re.compile(r"Unsupported nodes in QNN EP: (?P<body>.*)")
_ENTRY = re.compile(r"\{ name: (?P<name>.*?), type: (?P<type>[^ ]*?) \}")
_UNIT = re.compile(r"Validation FAILED for (?P<n>\d+) nodes in OrtNodeUnit \((?P<type>[^)]*)\)")
_REASON = re.compile(r"REASON\s*:\s*(?P<reason>.*)")
_SEVERITY = re.compile(r"\[(?P<sev>[VIWEF]):onnxruntime:[^\]]*\]\s*(?P<msg>.*)")

QNN_ERROR_CODES = {3110: "QNN op-config validation failed (the HTP does not support this op "
                         "with these data types/parameters)"}


@dataclass
class RejectedNode:
    """A node the HTP rejected: its ONNX and QNN op types, QNN error code and reason."""

    name: str                      # as the EP named it (may carry a `_token_N` suffix)
    op_type: str | None = None     # ONNX op type
    qnn_type: str | None = None    # QNN op type
    error_code: int | None = None
    reason: str | None = None
    ep: str | None = None          # the EP the session put it on instead (when known)
    ep_ops: list[str] = field(default_factory=list)   # QNN ops the EP made for it that failed
    index: int | None = None       # graph node index, for a node the model leaves unnamed

    def describe(self) -> str:
        kind = self.op_type or self.qnn_type or "?"
        if self.qnn_type and self.op_type and self.qnn_type != self.op_type:
            kind = f"{self.op_type} (QNN {self.qnn_type})"
        unnamed = f" (unnamed node #{self.index})" if self.index is not None else ""
        text = f"node {self.name!r}{unnamed} of type {kind}"
        if self.error_code is not None:
            meaning = QNN_ERROR_CODES.get(self.error_code)
            text += f": QNN error code {self.error_code}" + (f" ({meaning})" if meaning else "")
        if self.reason:
            text += f": {self.reason}"
        if self.ep_ops:
            text += (f"; the QNN op{'s' if len(self.ep_ops) > 1 else ''} the EP made for it "
                     f"failed too: {', '.join(self.ep_ops)}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EpLog:
    """What a QNN EP log says: rejected nodes, per-op-type failures and error lines."""

    rejected: list[RejectedNode]
    unit_failures: list[tuple[str, int, str]]   # (ONNX op type, node count, reason)
    errors: list[str]                           # ERROR/FATAL messages, in order, deduplicated

    @property
    def reasons(self) -> set[str]:
        return {r for _, _, r in self.unit_failures}


def clean(text: str) -> str:
    return _ANSI.sub("", text)


def parse_ep_log(text: str) -> EpLog:
    text = clean(text)
    rejected: dict[str, RejectedNode] = {}
    units: list[tuple[str, int, str]] = []
    errors: list[str] = []
    pending_unit: tuple[str, int] | None = None

    def node(name: str) -> RejectedNode:
        return rejected.setdefault(name, RejectedNode(name))

    for line in text.splitlines():
        if pending_unit is not None:
            m = _REASON.search(line)
            if m:
                units.append((pending_unit[0], pending_unit[1], m.group("reason").strip()))
                pending_unit = None
                continue
        if (m := _VALIDATE.search(line)) and m.group("name").strip():
            n = node(m.group("name"))
            n.qnn_type = m.group("qtype")
            n.error_code = int(m.group("code"))
        if m := _UNSUPPORTED.search(line):
            for e in _ENTRY.finditer(m.group("body")):
                if e.group("name").strip():
                    node(e.group("name")).op_type = e.group("type")
        if m := _UNIT.search(line):
            pending_unit = (m.group("type"), int(m.group("n")))
        if (m := _SEVERITY.search(line)) and m.group("sev") in "EF":
            msg = m.group("msg").strip()
            if msg and msg not in errors:
                errors.append(msg)
    return EpLog(list(rejected.values()), units, errors)


def read_ep_log(path: Path) -> EpLog:
    try:
        return parse_ep_log(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return EpLog([], [], [])
