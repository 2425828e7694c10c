"""Read what ``qairt-dlc-info -i <file.dlc>`` prints about a DLC (the DLC route's
only window into its DLCs: qnn-ci never opens a DLC itself).

The layout comes from the SDK's ``snpe_dlc_utils.py`` (vendored in public
repositories; formats page, section 8) and dumps users published::

    DLC info for: /abs/m_q.dlc
    Model Version: N/A
    ---------------------------------------------------------------------------
    | Id | Name | Type   | Inputs            | Outputs  | Out Dims | Runtimes | Parameters |
    ---------------------------------------------------------------------------
    | 0  | conv | Conv2d | <x>  [NW Input]   | <y>      | 1x8x8x8  | A D G C  | <x enc> |
    |    |      |        | <w>               |          |          |          | <w enc> |
    |    |      |        |                   |          |          |          | axis-quant: .. |
    ---------------------------------------------------------------------------
    | Input Name | Dimensions | Type    | Encoding Info |
    | x          | 1,8,8,3    | uFxp_16 | bitwidth 16, min .., max .., scale .., offset .. |
    Total parameters: 224 (0 MB assuming single precision float)
    Converter command: qairt-converter adjust_nms_features_dims=False ... quantization_overrides=
    Quantizer command: N/A
    DLC created with converter version: 2.31.0.250130

where a tensor ``<x>`` is ``x (data type: uFxp_16; tensor dimension: [1,8,8,3]; tensor
type: APP_WRITE)`` and an encoding ``<x enc>`` is ``x encoding : bitwidth 16, min ..,
max .., scale .., offset ..`` (per axis: ``w encoding for channel_0: ...``).

What is NOT confirmed, and so accepted in every plausible form: the spelling of the
data types (``uFxp_8``, ``sFxp_32``, ``Fxp_8``, ``Float_16``, ``Int_32``, ``uInt_8``,
``Bool_8``, or QNN names), spaces in ``tensor dimension`` lists, the ``tensor type``
words (with or without ``QNN_TENSOR_TYPE_``), the tables as ``|`` rows or as the CSV
that ``-s`` writes (tensors of one cell joined by ``; ``), metadata lines wrapped in
``| ... |`` or quoted, the command records as ``key=value`` lists (space- or
``; ``-separated, as the classic converter's record: ``qnn_ci.sdk.record``) or as a
command line (``--act_bitwidth 16``), ``N/A`` for a step not run, and a graph name
line (``Graph Name: ...``); without one, no graph is named (none is guessed).

``parse_dlc_info`` never raises: what it cannot read is listed in ``problems``.
"""

from __future__ import annotations

import csv
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from qnn_ci.sdk.record import ConverterRecord, canonical_key, parse_record_text, short_version
from qnn_ci.tables import DLC_TYPE_PREFIXES, QNN_DATATYPES
from qnn_ci.util.safe_read import MiB, read_text, safe_int

MAX_INFO_BYTES = 256 * MiB            # a DLC of thousands of ops prints a few MiB
MAX_PROBLEMS = 50
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DATA_TYPE = re.compile(r"\(\s*data\s*type\s*:", re.I)
_ENCODING = re.compile(
    r"encoding(?:\s+for\s+channel_(\d{1,9}))?\s*:\s*bitwidth\s+(\d{1,3})\s*,\s*"
    r"min\s+([^,\s]{1,64})\s*,\s*max\s+([^,\s]{1,64})\s*,\s*scale\s+([^,\s]{1,64})\s*,\s*"
    r"offset\s+([^,\s;|\"]{1,64})", re.I)
_BARE_ENCODING = re.compile(
    r"^\s*bitwidth\s+(\d{1,3})\s*,\s*min\s+([^,\s]{1,64})\s*,\s*max\s+([^,\s]{1,64})\s*,\s*"
    r"scale\s+([^,\s]{1,64})\s*,\s*offset\s+([^,\s;|\"]{1,64})", re.I)
_AXIS = re.compile(r"axis-quant\s*:\s*axis\s*:\s*(-?\d{1,9})", re.I)
_TYPE_NAME = re.compile(r"([A-Za-z]{1,8})_?(\d{1,3})")
_FAMILY = re.compile(r"(UFIXED_POINT|SFIXED_POINT|FLOAT|INT|UINT|BOOL)_(\d{1,3})")
_GRAPH = re.compile(r"(?:graph(?:[ _]?names?)?|info (?:of|for) graph)\s*:\s*(.+)", re.I)
_NAME_DELIMS = ";|\""
_CLOSE_WINDOW = 1024                  # a tensor's "(data type: ...)" is short
_NAME_WINDOW = 4096                   # how far back a tensor name may start

META_KEYS = {
    "converter command": "converter_command", "quantizer command": "quantizer_command",
    "dlc created with converter version": "converter_version",
    "total parameters": "total_parameters", "model version": "model_version",
    "dlc info for": "source",
}


@dataclass(frozen=True)
class DlcEncoding:
    """A tensor's quantization encoding as printed (per-axis: channel 0's)."""

    bitwidth: int
    scale: float | None
    offset: float | None
    minimum: float | None
    maximum: float | None
    per_axis: bool = False
    axis: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"bitwidth": self.bitwidth, "scale": self.scale, "offset": self.offset,
                "min": self.minimum, "max": self.maximum, "per_axis": self.per_axis,
                "axis": self.axis}


@dataclass
class DlcTensor:
    """One tensor as the DLC info prints it: data type, dims, kind, encoding."""

    name: str
    raw_type: str                       # as printed: uFxp_16, Float_16 ...
    data_type: str | None               # QNN_DATATYPE_* (None: not a known type)
    dims: tuple[int, ...] | None = None
    kind: str | None = None             # APP_WRITE | APP_READ | NATIVE | STATIC | ...
    encoding: DlcEncoding | None = None

    @property
    def bits(self) -> int | None:
        m = re.search(r"_(\d+)$", self.data_type or "")
        return int(m.group(1)) if m else None

    @property
    def is_fixed_point(self) -> bool:
        return "FIXED_POINT" in (self.data_type or "")

    @property
    def is_float16(self) -> bool:
        return self.data_type == "QNN_DATATYPE_FLOAT_16"

    @property
    def is_float(self) -> bool:
        return (self.data_type or "").startswith("QNN_DATATYPE_FLOAT_")

    @property
    def is_static(self) -> bool:
        return self.kind == "STATIC"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.raw_type, "data_type": self.data_type,
                "dims": list(self.dims) if self.dims is not None else None,
                "kind": self.kind,
                "encoding": self.encoding.to_dict() if self.encoding else None}


@dataclass
class DlcOp:
    """One op row: id, name, QNN type, the tensors it reads and writes."""

    id: int
    name: str
    type: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


@dataclass
class DlcInfo:
    """What ``qairt-dlc-info`` said about one DLC."""

    source: str
    ops: list[DlcOp] = field(default_factory=list)
    tensors: dict[str, DlcTensor] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)     # graph inputs (APP_WRITE)
    outputs: list[str] = field(default_factory=list)    # graph outputs (APP_READ)
    converter_command: str | None = None                # None: not printed or N/A
    quantizer_command: str | None = None
    converter: ConverterRecord | None = None
    quantizer: ConverterRecord | None = None
    converter_version: str | None = None
    total_parameters: int | None = None
    graph_names: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)         # metadata lines present
    problems: list[str] = field(default_factory=list)

    @property
    def sdk_version(self) -> str | None:
        """``2.31.0`` from the converter version line."""
        return short_version(self.converter_version)

    @property
    def empty(self) -> bool:
        """Nothing of a DLC info was found in the text."""
        return not (self.tensors or self.ops or self.seen)

    def io_tensors(self) -> list[DlcTensor]:
        names = list(dict.fromkeys([*self.inputs, *self.outputs]))
        return [self.tensors[n] for n in names if n in self.tensors]

    def fp16_tensors(self) -> list[DlcTensor]:
        return [t for t in self.tensors.values() if t.is_float16]

    def ops_of(self, tensor: str) -> list[DlcOp]:
        """The ops that write ``tensor``, else those that read it."""
        writers = [op for op in self.ops if tensor in op.outputs]
        return writers or [op for op in self.ops if tensor in op.inputs]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "graph_names": list(self.graph_names),
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "converter_version": self.converter_version,
                "converter_command": self.converter_command,
                "quantizer_command": self.quantizer_command,
                "total_parameters": self.total_parameters,
                "ops": [{"id": o.id, "name": o.name, "type": o.type, "inputs": o.inputs,
                         "outputs": o.outputs} for o in self.ops],
                "tensors": [t.to_dict() for t in self.tensors.values()],
                "problems": list(self.problems)}


# ----------------------------------------------------------------------------- reading

def read_dlc_info(path: Path) -> DlcInfo:
    """The DLC info text saved in ``path`` (one UserError line for a file that cannot
    be read: missing, not a regular file, larger than any real dump)."""
    text = read_text(path, cap=MAX_INFO_BYTES, what="qairt-dlc-info output",
                     hint="rerun the dlc_quantize stage")
    return parse_dlc_info(text, source=str(path))


def data_type_of(raw: str) -> str | None:
    """``uFxp_16`` / ``Float_16`` / ``Int_32`` / ``QNN_DATATYPE_INT_32`` /
    ``UFIXED_POINT_8`` -> the ``QNN_DATATYPE_*`` name; None when it is none."""
    text = raw.strip().strip(".,")
    upper = text.upper()
    if upper.startswith("QNN_DATATYPE_"):
        return upper if upper in QNN_DATATYPES else None
    m = _FAMILY.fullmatch(upper)
    if m:
        name = f"QNN_DATATYPE_{m.group(1)}_{m.group(2)}"
        return name if name in QNN_DATATYPES else None
    m = _TYPE_NAME.fullmatch(text)
    if m is None:
        return None
    family = DLC_TYPE_PREFIXES.get(m.group(1).lower())
    if family is None:
        return None
    name = f"QNN_DATATYPE_{family}_{int(m.group(2))}"
    return name if name in QNN_DATATYPES else None


def _kind(text: str) -> str | None:
    word = text.strip().upper().removeprefix("QNN_TENSOR_TYPE_").replace(" ", "_")
    return word or None


def _number(text: str) -> float | None:
    try:
        value = float(text.strip().rstrip(",;"))
    except (ValueError, OverflowError):
        return None
    return value


def _dims(text: str) -> tuple[int, ...] | None:
    inner = text.strip().strip("[]() ")
    if not inner:
        return ()
    parts = [p for p in re.split(r"[,\s]+|(?<=\d)x(?=\d)", inner) if p]
    values = [safe_int(p, limit=1 << 40) for p in parts]
    if any(v is None or v < 0 for v in values):
        return None
    return tuple(int(v) for v in values)   # type: ignore[arg-type]


class _Parser:
    """One pass over the lines; the tables' state between them."""

    def __init__(self, source: str) -> None:
        self.info = DlcInfo(source=source)
        self.mode: str | None = None           # "ops" | "inputs" | "outputs" | "other"
        self.op: DlcOp | None = None
        self.last_encoded: str | None = None   # the tensor the last encoding was for
        self.csv = False
        self.columns: dict[str, int] = {}       # the op table's header -> column

    def problem(self, text: str) -> None:
        if len(self.info.problems) < MAX_PROBLEMS:
            self.info.problems.append(text[:300])

    # -- tensors ---------------------------------------------------------------------
    def tensor(self, name: str, raw_type: str, dims: tuple[int, ...] | None,
               kind: str | None) -> DlcTensor:
        known = self.info.tensors.get(name)
        data_type = data_type_of(raw_type) if raw_type.strip() else None
        if known is None:
            known = self.info.tensors[name] = DlcTensor(name, raw_type.strip(), data_type,
                                                        dims, kind)
        else:
            if data_type and known.data_type and data_type != known.data_type:
                self.problem(f"tensor {name} is printed as {known.raw_type} and as "
                             f"{raw_type.strip()}")
            if data_type and not known.data_type:
                known.data_type, known.raw_type = data_type, raw_type.strip()
            known.dims = known.dims if known.dims is not None else dims
            known.kind = known.kind or kind
        if kind == "APP_WRITE" and name not in self.info.inputs:
            self.info.inputs.append(name)
        if kind == "APP_READ" and name not in self.info.outputs:
            self.info.outputs.append(name)
        return known

    def entries(self, cell: str) -> list[str]:
        """The tensors written ``name (data type: T; tensor dimension: [..]; tensor
        type: K)`` in one cell (several joined by ``; `` in the CSV layout)."""
        names: list[str] = []
        prev = 0
        for m in _DATA_TYPE.finditer(cell):
            if m.start() < prev:
                continue
            close = cell.find(")", m.end(), m.end() + _CLOSE_WINDOW)
            start = max(prev, m.start() - _NAME_WINDOW)
            head = cell[start:m.start()]
            cut = max(head.rfind(d) for d in _NAME_DELIMS)
            name = head[cut + 1:].strip().strip(",")
            if close < 0:
                self.problem(f"a tensor entry is not closed: {cell[m.start():m.start() + 80]}")
                break
            parts = cell[m.end():close].split(";")
            raw_type, dims, kind = parts[0].strip(), None, None
            for part in parts[1:]:
                key, _, value = part.partition(":")
                key = key.strip().lower()
                if "dimension" in key or key in ("dims", "shape"):
                    dims = _dims(value)
                    if dims is None:
                        self.problem(f"tensor {name}: dims {value.strip()[:60]!r} unreadable")
                elif "type" in key:
                    kind = _kind(value)
            prev = close + 1
            rest = cell[prev:prev + 40].lstrip()
            if rest.lower().startswith("[nw input]"):
                kind = kind or "APP_WRITE"
                prev = cell.find("]", prev) + 1
            if not name:
                self.problem(f"a tensor entry without a name: {cell[m.start():close + 1][:80]}")
                continue
            self.tensor(name, raw_type, dims, kind)
            names.append(name)
        return names

    def encodings(self, cell: str) -> None:
        """``name encoding : bitwidth 8, min .., max .., scale .., offset ..`` (per
        axis: ``name encoding for channel_0: ...``), and ``axis-quant: axis: N``."""
        prev = 0
        for m in _ENCODING.finditer(cell):
            if m.start() == 0 or not cell[m.start() - 1].isspace():
                continue
            head = cell[max(prev, m.start() - _NAME_WINDOW):m.start()]
            cut = max(head.rfind(d) for d in _NAME_DELIMS)
            name = head[cut + 1:].strip().strip(",")
            prev = m.end()
            if not name:
                continue
            channel, bits, lo, hi, scale, offset = m.groups()
            enc = DlcEncoding(int(bits), _number(scale), _number(offset), _number(lo),
                              _number(hi), per_axis=channel is not None)
            self.set_encoding(name, enc)
        for m in _AXIS.finditer(cell):
            name = self.last_encoded
            tensor = self.info.tensors.get(name or "")
            if tensor is not None and tensor.encoding is not None:
                tensor.encoding = replace(tensor.encoding, per_axis=True,
                                          axis=safe_int(m.group(1)))

    def set_encoding(self, name: str, enc: DlcEncoding) -> None:
        tensor = self.info.tensors.get(name)
        if tensor is None:
            tensor = self.info.tensors[name] = DlcTensor(name, "", None)
        if tensor.encoding is None:
            tensor.encoding = enc
        elif enc.per_axis and not tensor.encoding.per_axis:
            tensor.encoding = replace(tensor.encoding, per_axis=True)
        self.last_encoded = name

    # -- lines -----------------------------------------------------------------------
    def cells(self, line: str) -> list[str] | None:
        stripped = line.strip()
        if stripped.startswith("|"):
            body = stripped[1:-1] if stripped.endswith("|") and len(stripped) > 1 \
                else stripped[1:]
            return [c.strip() for c in body.split("|")]
        if self.csv and "," in stripped:
            try:
                return [c.strip() for c in next(csv.reader([stripped]))]
            except (csv.Error, StopIteration):
                return None
        return None

    def metadata(self, line: str) -> bool:
        text = line.strip().strip("|").strip().strip('"').strip()
        key, sep, value = text.partition(":")
        if not sep:
            return False
        name = META_KEYS.get(key.strip().lower())
        if name is None:
            graph = _GRAPH.fullmatch(text)
            if graph and not self.info.graph_names:
                self.info.graph_names = [g.strip().strip("'\"") for g in
                                         re.split(r"[,\s]+", graph.group(1).strip().strip("[]"))
                                         if g.strip().strip("'\"")]
                self.info.seen.add("graph")
                return True
            return False
        value = value.strip()
        self.info.seen.add(name)
        self.mode = None
        if name in ("converter_command", "quantizer_command"):
            if value.upper() in ("N/A", "NA", "NONE", ""):
                return True
            setattr(self.info, name, value)
        elif name == "converter_version":
            self.info.converter_version = value or None
        elif name == "total_parameters":
            first = value.split()[0] if value.split() else ""
            self.info.total_parameters = safe_int(first)
        return True

    def header(self, cells: list[str]) -> bool:
        lowered = [c.lower() for c in cells]
        if "id" in lowered[:1] and "name" in lowered and "type" in lowered:
            self.mode, self.op = "ops", None
            self.columns = {c: i for i, c in enumerate(lowered)}
        elif lowered and lowered[0] == "input name":
            self.mode = "inputs"
        elif lowered and lowered[0] == "output name":
            self.mode = "outputs"
        elif lowered and lowered[0].endswith("record name"):
            self.mode = "other"
        else:
            return False
        return True

    def column(self, cells: list[str], name: str, default: int | None) -> str:
        index = self.columns.get(name, default) if self.columns else default
        return cells[index] if index is not None and index < len(cells) else ""

    def io_row(self, cells: list[str]) -> None:
        if len(cells) < 3 or not cells[0]:
            return
        kind = "APP_WRITE" if self.mode == "inputs" else "APP_READ"
        tensor = self.tensor(cells[0], cells[2], _dims(cells[1]), kind)
        bare = _BARE_ENCODING.match(cells[3]) if len(cells) >= 4 else None
        if bare and tensor.encoding is None:
            bits, lo, hi, scale, offset = bare.groups()
            tensor.encoding = DlcEncoding(int(bits), _number(scale), _number(offset),
                                          _number(lo), _number(hi))

    def names_in(self, cell: str, *, raw_type: str = "", dims_text: str = "") -> list[str]:
        """The tensors of an Inputs / Outputs cell: typed entries, else a bare name
        (its type from a ``Data Type`` column, when the table has one)."""
        if _DATA_TYPE.search(cell):
            return self.entries(cell)
        name = cell.strip()
        if not name:
            return []
        if raw_type or name not in self.info.tensors:
            dims = _dims(dims_text) if dims_text else None
            self.tensor(name, raw_type, dims, None)
        return [name]

    def row(self, cells: list[str]) -> None:
        if self.mode in ("inputs", "outputs"):
            self.io_row(cells)
            return
        if self.mode == "other" or len(cells) < 5:
            return
        first = cells[0]
        if first.isdigit() and first.isascii():
            self.mode = "ops"
            name = self.column(cells, "name", 1)
            self.op = DlcOp(int(first[:18]), name, self.column(cells, "type", 2))
            self.info.ops.append(self.op)
            self.last_encoded = None
        elif first or self.op is None or self.mode != "ops":
            return
        op = self.op
        op.inputs += [n for n in self.names_in(self.column(cells, "inputs", 3))
                      if n not in op.inputs]
        outs = self.names_in(self.column(cells, "outputs", 4),
                             raw_type=self.column(cells, "data type", None),
                             dims_text=self.column(cells, "out dims", 5))
        op.outputs += [n for n in outs if n not in op.outputs]
        for cell in cells[5:]:
            self.encodings(cell)

    def line(self, raw: str) -> None:
        line = _ANSI.sub("", raw)
        stripped = line.strip()
        if not stripped or set(stripped) <= set("-=+| "):
            return
        if self.metadata(line):
            return
        cells = self.cells(line)
        if cells is None and not self.csv and "," in stripped and \
                stripped.lower().startswith(("id,name,type", "input name,", "output name,")):
            self.csv = True
            cells = self.cells(line)
        if cells is None:
            self.mode = None
            return
        if not self.header(cells):
            self.row(cells)


def parse_dlc_info(text: str, *, source: str = "qairt-dlc-info output") -> DlcInfo:
    """The DLC info in ``text`` (any of the layouts in the module text). Never
    raises: what cannot be read is in ``problems``; ``empty`` when nothing was."""
    parser = _Parser(source)
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        parser.line(raw)
    info = parser.info
    info.converter = _record(info.converter_command, "converter", parser)
    info.quantizer = _record(info.quantizer_command, "quantizer", parser)
    return info


def _record(text: str | None, what: str, parser: _Parser) -> ConverterRecord | None:
    """The ``key=value`` record of a command line (either era's layout), or one
    built from a ``--flag value`` command line."""
    if not text:
        return None
    if re.search(r"(?:^|\s)--?[A-Za-z]", text) and not re.search(r"(?:^|[\s;])[A-Za-z_]\w*=",
                                                                   text):
        return _argv_record(text)
    rec = parse_record_text(text, source=f"{what} command")
    for p in rec.problems:
        parser.problem(f"{what} command: {p}")
    return rec


def _argv_record(text: str) -> ConverterRecord:
    """``qairt-quantizer --input_dlc a.dlc --act_bitwidth 16 --use_per_channel_quantization``
    as a record: flag -> its value (True without one; a list when repeated)."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        tokens = text.split()
    tool = tokens.pop(0) if tokens and not tokens[0].startswith("-") else ""
    values: dict[str, list[list[str]]] = {}
    order: list[str] = []
    current: str | None = None
    for tok in tokens:
        if re.match(r"--?[A-Za-z]", tok):
            current = canonical_key(tok.split("=", 1)[0])
            if current not in values:
                order.append(current)
            values.setdefault(current, []).append(
                [tok.split("=", 1)[1]] if "=" in tok else [])
        elif current is not None:
            values[current][-1].append(tok)
    args: dict[str, str] = {}
    for key in order:
        uses = values[key]
        if len(uses) == 1:
            one = uses[0]
            args[key] = "True" if not one else one[0] if len(one) == 1 else repr(one)
        else:
            args[key] = repr([u if len(u) != 1 else u[0] for u in uses])
    return ConverterRecord(tool=Path(tool).name if tool else "", sdk_version=None, args=args,
                           raw_args=list(args.items()), conflicts=[], era="space", raw=text)
