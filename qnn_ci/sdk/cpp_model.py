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

``read_cpp_model`` streams the file: it is read in blocks cut after a statement
or a top-level ``}``, so memory stays bounded whatever the file's size (up to
``CPP_CAP``), and no pattern here backtracks over more than a line or a block.
"""

from __future__ import annotations

import codecs
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.tables import QNN_DATATYPES
from qnn_ci.util.listing import cut_text
from qnn_ci.util.safe_read import MiB, iter_blocks, open_regular, safe_int

log = logging.getLogger(__name__)

RECORD_MARKER = "Command Line used:"
_FIELD = re.compile(
    r"\.(name|type|dataType|rank|dimensions|quantizeParams)\s*=\s*"
    r"(\"(?:[^\"\\]|\\.)*\"|[A-Za-z_][A-Za-z0-9_]*|-?\d+|\{)"
)
# Bodies stop at the first "}", ";" or "{" (the closing brace is optional) so a
# missing brace cannot make a match scan to the end of the text again and again.
_ARRAY = re.compile(
    r"\b(?:uint32_t|int32_t|size_t)\s+([A-Za-z_]\w*)\s*\[\s*\d*\s*\]\s*=\s*\{([^{};]*)\}?"
)
_ADD_NODE = re.compile(
    r"\.addNode\s*\(\s*(?:[A-Za-z_]\w*\s*,\s*)?\"((?:[^\"\\]|\\.)*)\"\s*,\s*"
    r"\"((?:[^\"\\]|\\.)*)\"\s*,\s*\"((?:[^\"\\]|\\.)*)\"\s*,([^;]*)"
)
_NAMES_ARRAY = re.compile(
    r"const\s+char\s*\*\s*([A-Za-z_]\w*)\s*\[\s*\d*\s*\]\s*=\s*\{([^{};]*)\}?")
_STRING = re.compile(r"\"((?:[^\"\\]|\\.)*)\"")
_GRAPH = re.compile(r"getQnnGraphConfigFromInfo\s*\(\s*\"((?:[^\"\\]|\\.)*)\"")
_SCALE = re.compile(r"\.scale\s*=\s*(-?[0-9.eE+\-]+)f?")
_OFFSET = re.compile(r"\.offset\s*=\s*(-?\d+)")
_AXIS = re.compile(r"\.axis\s*=\s*(-?\d+)")


@dataclass
class CppTensor:
    """One ``Qnn_Tensor_t`` of the generated source: type, data type, dims, quantization."""

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
    """One ``model.addNode`` call of the generated source: name, package, op type, inputs."""

    name: str
    package: str
    type: str
    inputs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CppModel:
    """The converter's generated source read: tensors, nodes, graphs and what is missing."""

    source: str
    tensors: list[CppTensor]
    nodes: list[CppNode]
    graphs: list[str]
    sdk_version_full: str | None = None
    problems: list[str] = field(default_factory=list)
    truncated: str | None = None       # why the file looks cut off, None when complete
    untyped: list[str] = field(default_factory=list)   # tensors without a readable dataType
    has_compose: bool = False          # the composeGraphs entry point was found
    has_record: bool = False           # the "Command Line used:" comment was found
    compose_function: str | None = None   # "QnnModel_composeGraphs" / "<Graph>_composeGraphs"
    prefixed: bool | None = None       # the record's overwrite_model_prefix, None if absent

    @property
    def converter_output(self) -> bool:
        """Whether the text looks like converter output at all."""
        return bool(self.tensors) or self.has_compose or self.has_record

    def incomplete(self) -> str | None:
        """Why an audit of this file cannot be complete, else None."""
        if self.truncated:
            return self.truncated
        if self.untyped:
            shown = cut_text(self.untyped, 5)
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


CPP_CAP = 2048 * MiB            # a generated source this big is not converter output
CPP_HINT = "pass the converter's generated model source"
BLOCK_CHARS = 1 << 20           # parse in blocks of about this size ...
MAX_BLOCK_CHARS = 16 << 20      # ... cut anywhere when no statement ends before this
QUANT_WINDOW = 4096             # a .quantizeParams group is read from this many chars

# A string or char literal (ends at its quote or the end of the line), a line
# comment, or the start of a block comment.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|\'(?:[^\'\\\n]|\\.)*\'?|//[^\n]*|/\*')
_BRACE_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|\'(?:[^\'\\\n]|\\.)*\'?|[{}()]')
# The entry point: ``QnnModel_composeGraphs``, or ``<Graph>_composeGraphs`` when the
# record says ``overwrite_model_prefix=True`` (a real 2.40 source: ElementwiseAdd_...).
_COMPOSE = re.compile(r"\b([A-Za-z_]\w*)_composeGraphs\s*\(")
DEFAULT_PREFIX = "QnnModel"
_PREFIX_FLAG = re.compile(r"\boverwrite_model_prefix=\[?\s*(True|False)\b")


def _strip(text: str, in_comment: bool = False) -> tuple[str, bool]:
    """``text`` without comments, and whether it ends inside a ``/*`` comment.
    ``in_comment``: the text starts inside one (a block of a longer file)."""
    out: list[str] = []
    pos, n = 0, len(text)
    if in_comment:
        end = text.find("*/")
        if end < 0:
            return "\n" * text.count("\n"), True
        out.append(" " + "\n" * text.count("\n", 0, end))
        pos = end + 2
    while pos < n:
        m = _TOKEN.search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        out.append(text[pos:m.start()])
        tok = m.group()
        if tok == "/*":
            end = text.find("*/", m.end())
            if end < 0:
                out.append("\n" * text.count("\n", m.end()))
                return "".join(out), True
            out.append(" " + "\n" * text.count("\n", m.end(), end))
            pos = end + 2
        elif tok.startswith("//"):
            pos = m.end()
        else:
            out.append(tok)
            pos = m.end()
    return "".join(out), False


def strip_comments(text: str, problems: list[str] | None = None) -> str:
    """C/C++ source without comments; string literals are kept intact.
    Removed comments become a space (or their newlines) so positions of lines
    survive roughly."""
    code, open_comment = _strip(text)
    if open_comment and problems is not None:
        problems.append("unterminated /* comment (file truncated?)")
    return code


def _unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == '"' and s[-1] == '"' else s


def _int_list(body: str) -> list[int] | None:
    parts = [p.strip() for p in body.split(",") if p.strip()]
    values = [safe_int(p.rstrip("uU")) for p in parts]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


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
        t.offset = safe_int(o.group(1)) if o else None
    a = _AXIS.search(group)
    if a and "AXIS" in (t.quant_encoding or ""):
        t.axis = safe_int(a.group(1))


class _Compose:
    """Where ``<prefix>_composeGraphs`` stands, fed block by block: "missing",
    "params" (its parameter list is open), "body" (its body is open) or "closed".
    ``prefixed``: None accepts any prefix, False only ``QnnModel``, True any other
    (the record's ``overwrite_model_prefix``; set before the function is reached)."""

    def __init__(self) -> None:
        self.state = "missing"
        self.depth = 0
        self.prefixed: bool | None = None
        self.name: str | None = None            # the function found
        self.other: list[str] = []              # compose functions the record rules out

    def _find(self, code: str) -> re.Match[str] | None:
        for m in _COMPOSE.finditer(code):
            prefix = m.group(1)
            if self.prefixed is None or (prefix == DEFAULT_PREFIX) != self.prefixed:
                return m
            if len(self.other) < 5:
                self.other.append(f"{prefix}_composeGraphs")
        return None

    def feed(self, code: str) -> None:
        if self.state == "closed":
            return
        pos = 0
        if self.state == "missing":
            m = self._find(code)
            if m is None:
                return
            self.name = f"{m.group(1)}_composeGraphs"
            self.state, self.depth, pos = "params", 1, m.end()
        for tok in _BRACE_TOKEN.finditer(code, pos):
            ch = tok.group()
            if self.state == "params":
                if ch in "()":
                    self.depth += 1 if ch == "(" else -1
                    if self.depth == 0:
                        self.state = "between"
            elif self.state == "between":
                if ch == "{":
                    self.state, self.depth = "body", 1
            elif ch in "{}":
                self.depth += 1 if ch == "{" else -1
                if self.depth == 0:
                    self.state = "closed"
                    return

    def result(self) -> str:
        """"missing", "open" (the end of the graph-composition code is missing) or
        "closed"."""
        return self.state if self.state in ("missing", "closed") else "open"


class _Parser:
    """``parse_cpp_text`` fed block by block (blocks cut between statements)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []
        self.cut: list[str] = []          # why the file looks truncated, first reason first
        self.untyped: list[str] = []
        self.arrays: dict[str, str] = {}
        self.name_arrays: dict[str, list[str]] = {}
        self.tensors: list[CppTensor] = []
        self.seen: set[str] = set()
        self.current: CppTensor | None = None
        self.nodes: list[CppNode] = []
        self.graphs: dict[str, None] = {}
        self.sdk: str | None = None
        self.has_record = False
        self.in_comment = False
        self.compose = _Compose()

    def _finish_tensor(self, t: CppTensor | None, last: bool = False) -> None:
        if t is None:
            return
        if t.data_type is None and t.type is None:
            if last:
                self.problems.append(f"source ends after .name= {t.name!r} (file truncated?)")
                self.cut.append(f"the source ends after .name= {t.name!r}")
            return          # a parameter's .name="dilation", not a tensor
        if t.data_type is None:
            why = "definition cut short (file truncated?)" if last else \
                "no .dataType (definition incomplete)"
            self.problems.append(f"tensor {t.name!r}: {why}")
            if last:
                self.cut.append(f"the definition of tensor {t.name!r} is cut short")
            else:
                self.untyped.append(t.name)
        elif not t.data_type.startswith("QNN_DATATYPE_"):
            self.untyped.append(t.name)
        if t.name in self.seen:
            return
        self.seen.add(t.name)
        self.tensors.append(t)

    def feed(self, text: str) -> None:
        if self.sdk is None:
            sdk = re.search(r"QNN_SDK_VERSION\s*=\s*\"([^\"\n]*)\"", text)
            self.sdk = sdk.group(1) if sdk else None
        if not self.has_record and RECORD_MARKER in text:
            self.has_record = True
            flag = _PREFIX_FLAG.search(text, text.find(RECORD_MARKER))
            if flag and self.compose.state == "missing":
                self.compose.prefixed = flag.group(1) == "True"
        code, self.in_comment = _strip(text, self.in_comment)
        self.arrays.update((m.group(1), m.group(2)) for m in _ARRAY.finditer(code))
        self.name_arrays.update((m.group(1), _STRING.findall(m.group(2)))
                                for m in _NAMES_ARRAY.finditer(code))
        matches = list(_FIELD.finditer(code))
        for k, m in enumerate(matches):
            self._field(m, code, matches[k + 1].start() if k + 1 < len(matches) else len(code))
        for m in _ADD_NODE.finditer(code):
            rest = [a.strip() for a in m.group(4).split(",")]
            inputs: list[str] = []
            for arg in rest:
                if arg in self.name_arrays:
                    inputs = self.name_arrays[arg]
                    break
            self.nodes.append(CppNode(m.group(1), m.group(2), m.group(3), inputs))
        self.graphs.update(dict.fromkeys(_GRAPH.findall(code)))
        self.compose.feed(code)

    def _field(self, m: re.Match[str], code: str, next_start: int) -> None:
        key, val = m.group(1), m.group(2)
        if key == "name":
            self._finish_tensor(self.current)
            self.current = CppTensor(_unquote(val)) if val.startswith('"') else None
            return
        current = self.current
        if current is None:
            return
        if key == "type":
            current.type = val
        elif key == "dataType":
            current.data_type = val
            if val not in QNN_DATATYPES:
                self.problems.append(f"tensor {current.name!r}: unknown data type {val}")
        elif key == "rank":
            current.rank = safe_int(val)
        elif key == "dimensions":
            if val in self.arrays:
                current.dims = _int_list(self.arrays[val])
            elif val not in ("nullptr", "NULL", "0"):
                self.problems.append(f"tensor {current.name!r}: dimensions array {val} "
                                     "not found")
        elif key == "quantizeParams" and val == "{":
            start = m.end() - 1
            _apply_quant(current, code[start:min(next_start, start + QUANT_WINDOW)])

    def finish(self) -> CppModel:
        problems, cut = self.problems, self.cut
        if self.in_comment:
            problems.insert(0, "unterminated /* comment (file truncated?)")
            cut.insert(0, "an unterminated /* comment")
        self._finish_tensor(self.current, last=True)
        compose = self.compose.result()
        prefixed = self.compose.prefixed
        want = "<Graph>_composeGraphs" if prefixed else f"{DEFAULT_PREFIX}_composeGraphs"
        if compose == "missing":
            ruled_out = ""
            if self.compose.other:
                ruled_out = (f"; found {', '.join(self.compose.other)}, but the record says "
                             f"overwrite_model_prefix={prefixed}")
            elif prefixed:
                ruled_out = " (the record says overwrite_model_prefix=True)"
            problems.append(f"no {want} function{ruled_out} (file truncated or not a "
                            "converter source?)")
            if self.tensors or self.has_record:
                cut.append(f"no {want} function{ruled_out} (the end of the file is missing)"
                           if not self.compose.other else
                           f"no {want} function{ruled_out}")
        elif compose == "open":
            name = self.compose.name or want
            problems.append(f"{name} does not end (file truncated?)")
            cut.append(f"{name} does not end")
        if not self.tensors:
            problems.append("no tensor definitions found")
        for p in problems[:50]:
            log.debug("%s: %s", self.source, p)
        model = CppModel(source=self.source, tensors=self.tensors, nodes=self.nodes,
                         graphs=list(self.graphs), sdk_version_full=self.sdk,
                         problems=problems, untyped=self.untyped,
                         has_compose=compose != "missing", has_record=self.has_record,
                         compose_function=self.compose.name, prefixed=prefixed)
        if cut and model.converter_output:     # a README with a stray "/*" is not "cut off"
            model.truncated = cut[0]
        return model


def parse_cpp_text(text: str, *, source: str = "<text>") -> CppModel:
    parser = _Parser(source)
    parser.feed(text)
    return parser.finish()


def _cut_point(text: str, searched_from: int) -> int:
    """Where to end a block of ``text``: after the last statement (``;`` at a line
    end) or top-level ``}`` line at or after ``searched_from``; 0 when there is none."""
    semi = text.rfind(";\n", searched_from)
    brace = text.rfind("\n}", searched_from)
    if brace >= 0:
        eol = text.find("\n", brace + 2)
        brace = eol + 1 if eol >= 0 else -1
    return max(semi + 2 if semi >= 0 else 0, brace if brace > 0 else 0)


def parse_cpp_stream(chunks: Any, *, source: str, block: int = BLOCK_CHARS,
                     max_block: int = MAX_BLOCK_CHARS) -> CppModel:
    """``parse_cpp_text`` over an iterable of text pieces, holding about ``block``
    (at most ``max_block``) characters of it at a time."""
    parser = _Parser(source)
    pending = ""
    for chunk in chunks:
        searched = max(0, len(pending) - 1)
        pending += chunk
        if len(pending) < block:
            continue
        cut = _cut_point(pending, searched) or _cut_point(pending, 0)
        if not cut and len(pending) >= max_block:
            cut = pending.rfind("\n") + 1 or len(pending)
        if cut:
            parser.feed(pending[:cut])
            pending = pending[cut:]
    if pending:
        parser.feed(pending)
    return parser.finish()


def read_cpp_model(path: Path) -> CppModel:
    """Parse a generated source (``.cpp`` or extension-less), streaming it. UserError
    only when the file cannot be read at all (missing, not a regular file, larger
    than ``CPP_CAP``)."""
    path = Path(path)
    with open_regular(path, cap=CPP_CAP, what="generated model source",
                      hint=CPP_HINT) as fh:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        chunks = (decoder.decode(b) for b in iter_blocks(fh, path, cap=CPP_CAP,
                                                         what="generated model source",
                                                         hint=CPP_HINT))
        model = parse_cpp_stream(_with_tail(chunks, decoder), source=str(path))
    return model


def _with_tail(chunks: Any, decoder: codecs.IncrementalDecoder) -> Any:
    yield from chunks
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
