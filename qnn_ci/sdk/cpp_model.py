"""Tensors and nodes in the converter's generated model source.

Each tensor is a ``Qnn_Tensor_t`` initialiser with fields such as
``.name= "conv1_weight"``, ``.type= QNN_TENSOR_TYPE_STATIC``,
``.dataType= QNN_DATATYPE_UFIXED_POINT_8``, ``.quantizeParams= {...}``,
``.rank= 4`` and ``.dimensions=dimensions_<name>`` (an array declared just
before). Nodes are ``model.addNode(QNN_OPCONFIG_VERSION_1, "<name>",
"<package>", "<OpType>", ...)`` calls.

Comments are removed first: the header comment holds the recorded argument
list (``float_bitwidth=32`` ...), which must never be read as tensor data.
A truncated or hand-edited source yields what could be read plus a list of
problems; this module never raises on content. ``CppModel.truncated`` says why
the file looks cut off (an unterminated comment, a tensor definition cut short,
no end of ``QnnModel_composeGraphs``) and ``CppModel.untyped`` names tensors
whose data type cannot be read: either makes an audit of the file incomplete.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.tables import QNN_DATATYPES

log = logging.getLogger(__name__)

RECORD_MARKER = "Command Line used:"
_FIELD = re.compile(
    r"\.(name|type|dataType|rank|dimensions|quantizeParams)\s*=\s*"
    r"(\"(?:[^\"\\]|\\.)*\"|[A-Za-z_][A-Za-z0-9_]*|-?\d+|\{)"
)
_ARRAY = re.compile(
    r"\b(?:uint32_t|int32_t|size_t)\s+([A-Za-z_]\w*)\s*\[\s*\d*\s*\]\s*=\s*\{([^}]*)\}"
)
_ADD_NODE = re.compile(
    r"\.addNode\s*\(\s*(?:[A-Za-z_]\w*\s*,\s*)?\"((?:[^\"\\]|\\.)*)\"\s*,\s*"
    r"\"((?:[^\"\\]|\\.)*)\"\s*,\s*\"((?:[^\"\\]|\\.)*)\"\s*,([^;]*)"
)
_NAMES_ARRAY = re.compile(r"const\s+char\s*\*\s*([A-Za-z_]\w*)\s*\[\s*\d*\s*\]\s*=\s*\{([^}]*)\}")
_STRING = re.compile(r"\"((?:[^\"\\]|\\.)*)\"")
_GRAPH = re.compile(r"getQnnGraphConfigFromInfo\s*\(\s*\"((?:[^\"\\]|\\.)*)\"")
_SCALE = re.compile(r"\.scale\s*=\s*(-?[0-9.eE+\-]+)f?")
_OFFSET = re.compile(r"\.offset\s*=\s*(-?\d+)")
_AXIS = re.compile(r"\.axis\s*=\s*(-?\d+)")


@dataclass
class CppTensor:
    name: str
    type: str | None = None            # QNN_TENSOR_TYPE_*
    data_type: str | None = None       # QNN_DATATYPE_*
    dims: list[int] | None = None
    rank: int | None = None
    quant_definition: str | None = None
    quant_encoding: str | None = None
    scale: float | None = None
    offset: int | None = None
    axis: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CppNode:
    name: str
    package: str
    type: str
    inputs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CppModel:
    source: str
    tensors: list[CppTensor]
    nodes: list[CppNode]
    graphs: list[str]
    sdk_version_full: str | None = None
    problems: list[str] = field(default_factory=list)
    truncated: str | None = None       # why the file looks cut off, None when complete
    untyped: list[str] = field(default_factory=list)   # tensors without a readable dataType
    has_compose: bool = False          # QnnModel_composeGraphs was found
    has_record: bool = False           # the "Command Line used:" comment was found

    @property
    def converter_output(self) -> bool:
        """Whether the text looks like converter output at all."""
        return bool(self.tensors) or self.has_compose or self.has_record

    def incomplete(self) -> str | None:
        """Why an audit of this file cannot be complete, else None."""
        if self.truncated:
            return self.truncated
        if self.untyped:
            shown = ", ".join(self.untyped[:5]) + (" ..." if len(self.untyped) > 5 else "")
            return f"{len(self.untyped)} tensor(s) without a readable .dataType ({shown})"
        return None

    def data_type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tensors:
            key = t.data_type or "?"
            counts[key] = counts.get(key, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "graphs": self.graphs,
                "sdk_version_full": self.sdk_version_full,
                "tensors": [t.to_dict() for t in self.tensors],
                "nodes": [n.to_dict() for n in self.nodes],
                "data_types": self.data_type_counts(), "problems": self.problems,
                "truncated": self.truncated, "untyped": self.untyped}


def strip_comments(text: str, problems: list[str] | None = None) -> str:
    """C/C++ source without comments; string literals are kept intact.
    Removed comments become a space (or their newlines) so positions of lines
    survive roughly."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or ch == "'":
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                if problems is not None:
                    problems.append("unterminated /* comment (file truncated?)")
                break
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            j = i
            while j < n and text[j] not in "\"'/":
                j += 1
            if j == i:
                out.append(ch)
                j = i + 1
            else:
                out.append(text[i:j])
            i = j
    return "".join(out)


def _unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == '"' and s[-1] == '"' else s


def _int_list(body: str) -> list[int] | None:
    parts = [p.strip() for p in body.split(",") if p.strip()]
    try:
        return [int(p.rstrip("uU")) for p in parts]
    except ValueError:
        return None


def _braced(text: str, start: int) -> str:
    """The ``{...}`` group opening at ``start`` (or what is left when unbalanced)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return text[start:]


def _apply_quant(t: CppTensor, group: str) -> None:
    words = re.findall(r"\bQNN_(?:DEFINITION|QUANTIZATION_ENCODING)_[A-Z0-9_]+", group)
    for w in words:
        if w.startswith("QNN_DEFINITION_") and t.quant_definition is None:
            t.quant_definition = w
        elif w.startswith("QNN_QUANTIZATION_ENCODING_") and t.quant_encoding is None:
            t.quant_encoding = w
    if t.quant_encoding == "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET":
        s, o = _SCALE.search(group), _OFFSET.search(group)
        try:
            t.scale = float(s.group(1)) if s else None
        except ValueError:
            t.scale = None
        t.offset = int(o.group(1)) if o else None
    a = _AXIS.search(group)
    if a and "AXIS" in (t.quant_encoding or ""):
        t.axis = int(a.group(1))


def parse_cpp_text(text: str, *, source: str = "<text>") -> CppModel:
    problems: list[str] = []
    sdk = re.search(r"QNN_SDK_VERSION\s*=\s*\"([^\"]*)\"", text)
    code = strip_comments(text, problems)
    cut: list[str] = []           # why the file looks truncated, first reason first
    untyped: list[str] = []
    if problems:                  # strip_comments reports only an unterminated comment
        cut.append("an unterminated /* comment")
    arrays = {m.group(1): m.group(2) for m in _ARRAY.finditer(code)}
    name_arrays = {m.group(1): _STRING.findall(m.group(2)) for m in _NAMES_ARRAY.finditer(code)}

    tensors: list[CppTensor] = []
    seen: set[str] = set()
    current: CppTensor | None = None

    def finish(t: CppTensor | None, last: bool = False) -> None:
        if t is None:
            return
        if t.data_type is None and t.type is None:
            if last:
                problems.append(f"source ends after .name= {t.name!r} (file truncated?)")
                cut.append(f"the source ends after .name= {t.name!r}")
            return          # a parameter's .name="dilation", not a tensor
        if t.data_type is None:
            why = "definition cut short (file truncated?)" if last else \
                "no .dataType (definition incomplete)"
            problems.append(f"tensor {t.name!r}: {why}")
            if last:
                cut.append(f"the definition of tensor {t.name!r} is cut short")
            else:
                untyped.append(t.name)
        elif not t.data_type.startswith("QNN_DATATYPE_"):
            untyped.append(t.name)
        if t.name in seen:
            return
        seen.add(t.name)
        tensors.append(t)

    for m in _FIELD.finditer(code):
        key, val = m.group(1), m.group(2)
        if key == "name":
            finish(current)
            current = CppTensor(_unquote(val)) if val.startswith('"') else None
            continue
        if current is None:
            continue
        if key == "type":
            current.type = val
        elif key == "dataType":
            current.data_type = val
            if val not in QNN_DATATYPES:
                problems.append(f"tensor {current.name!r}: unknown data type {val}")
        elif key == "rank" and val.lstrip("-").isdigit():
            current.rank = int(val)
        elif key == "dimensions":
            if val in arrays:
                current.dims = _int_list(arrays[val])
            elif val not in ("nullptr", "NULL", "0"):
                problems.append(f"tensor {current.name!r}: dimensions array {val} not found")
        elif key == "quantizeParams" and val == "{":
            _apply_quant(current, _braced(code, m.end() - 1))
    finish(current, last=True)

    nodes: list[CppNode] = []
    for m in _ADD_NODE.finditer(code):
        rest = [a.strip() for a in m.group(4).split(",")]
        inputs: list[str] = []
        for arg in rest:
            if arg in name_arrays:
                inputs = name_arrays[arg]
                break
        nodes.append(CppNode(m.group(1), m.group(2), m.group(3), inputs))

    graphs = list(dict.fromkeys(_GRAPH.findall(code)))
    compose = _compose_state(code)
    if compose == "missing":
        problems.append("no QnnModel_composeGraphs function (file truncated or not a "
                        "converter source?)")
        if tensors or RECORD_MARKER in text:
            cut.append("no QnnModel_composeGraphs function (the end of the file is missing)")
    elif compose == "open":
        problems.append("QnnModel_composeGraphs does not end (file truncated?)")
        cut.append("QnnModel_composeGraphs does not end")
    if not tensors:
        problems.append("no tensor definitions found")
    for p in problems:
        log.debug("%s: %s", source, p)
    model = CppModel(source=source, tensors=tensors, nodes=nodes, graphs=graphs,
                     sdk_version_full=sdk.group(1) if sdk else None, problems=problems,
                     untyped=untyped, has_compose=compose != "missing",
                     has_record=RECORD_MARKER in text)
    if cut and model.converter_output:     # a README with a stray "/*" is not "cut off"
        model.truncated = cut[0]
    return model


_COMPOSE = re.compile(r"\bQnnModel_composeGraphs\s*\(")


def _compose_state(code: str) -> str:
    """"missing", "open" (its body never closes: the end of the graph-composition
    code is missing) or "closed". ``code`` has its comments removed."""
    m = _COMPOSE.search(code)
    if m is None:
        return "missing"
    depth_paren, i, n = 1, m.end(), len(code)
    while i < n and depth_paren:
        depth_paren += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    body = code.find("{", i)
    if depth_paren or body < 0:
        return "open"
    depth, i = 0, body
    while i < n:
        ch = code[i]
        if ch in "\"'":                  # skip a string or char literal
            j = i + 1
            while j < n and code[j] != ch and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return "closed"
        i += 1
    return "open"


def read_cpp_model(path: Path) -> CppModel:
    """Parse a generated source (``.cpp`` or extension-less). UserError only
    when the file cannot be read at all."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise UserError("file not found", file=path) from None
    except OSError as exc:
        raise UserError(f"cannot read the file ({exc.strerror or exc})", file=path) from None
    return parse_cpp_text(text, source=str(path))
