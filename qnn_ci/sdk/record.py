"""The converter's recorded argument list (its resolved "namespace").

``qnn-onnx-converter`` writes every resolved argparse destination into a
comment at the top of the generated source, and the same string into
``<name>_net.json`` under ``converter_command``. Two layouts exist:

- 2.27 and later: ``qnn-onnx-converter; act_bitwidth=16; ...; weights_bitwidth=8``
- about 2.18 and earlier: the same list separated by single spaces, with the
  alias pairs side by side (``act_bitwidth=8 act_bw=8``).

Values are Python ``str()`` forms and may contain spaces inside list reprs
(``out_names=['a', 'b']``), so a list is split only before ``key=`` tokens.
Alias spellings are folded onto one canonical name
(``qnn_ci.tables.CONVERTER_ALIASES``); spellings that disagree are kept as
``AliasConflict`` so they can be reported.
"""

from __future__ import annotations

import ast
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from qnn_ci.errors import UserError
from qnn_ci.tables import CONVERTER_ALIASES, CONVERTER_CANONICAL_TO_ALIAS
from qnn_ci.util.safe_read import MiB, open_regular
from qnn_ci.util.safe_read import load_json as _load_json

log = logging.getLogger(__name__)

Era = Literal["semicolon", "space"]

_KEY_AT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SEMI_SPLIT = re.compile(r";\s*(?=[A-Za-z_][A-Za-z0-9_]*=)")
# (?<!\s): a whitespace run is tried once, from its start, not from each of its
# characters (which is quadratic in the run's length).
_SPACE_SPLIT = re.compile(r"(?<!\s)\s+(?=[A-Za-z_][A-Za-z0-9_]*=)")
_SEMI_ERA = re.compile(r";\s*[A-Za-z_][A-Za-z0-9_]*=")
_CMD_MARKER = re.compile(r"Command Line used:\s*(.*?)(\*/|\Z)", re.S)
_FIRST_RUN = re.compile(r"[ \t]*(\S*)")
_KEY_AFTER_SEMI = re.compile(r"[ \t]*[A-Za-z_]\w*=")
_KEY_AFTER_SPACE = re.compile(r"[ \t]+[A-Za-z_]\w*=")
_SDK_VERSION = re.compile(r"QNN_SDK_VERSION\s*=\s*\"([^\"]*)\"")
_VERSION_NUMBER = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# A folder of the tool path named after the SDK version: ``.../qairt/2.22.6.240515/bin/...``
# (Linux) or ``C:\\Qualcomm\\AIStack\\QAIRT\\2.22.6.240515\\bin\\...`` (Windows).
_PATH_VERSION = re.compile(r"^v?(\d{1,3}\.\d{1,3}\.\d{1,3}(?:\.\d{1,20})?)$")

# Where ``ConverterRecord.sdk_version`` was read from.
VERSION_FROM_STAMP = "QNN_SDK_VERSION"
VERSION_FROM_TOOL_PATH = "tool path"
_OPEN = {"[": "]", "(": ")", "{": "}"}

MAX_RECORD_CHARS = 256 * 1024    # real records are a few KiB

# The recorded arguments that decide what a quantized export is.
ARGS_OF_INTEREST: tuple[str, ...] = (
    "act_bitwidth", "weights_bitwidth", "bias_bitwidth", "float_bitwidth",
    "float_bias_bitwidth", "float_fallback", "input_list", "quantization_overrides",
    "input_encoding", "use_per_channel_quantization", "act_quantizer_calibration",
    "param_quantizer_calibration", "percentile_calibration_value",
)


def canonical_key(key: str) -> str:
    """The canonical argparse destination for a spelling (``act_bw`` -> ``act_bitwidth``)."""
    key = key.strip().lstrip("-")
    return CONVERTER_ALIASES.get(key, key)


def literal(text: str | None) -> Any:
    """A recorded value as Python: None/True/False/int/float/list/dict, else the text."""
    if text is None:
        return None
    stripped = text.strip()
    if not stripped:
        return ""
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if isinstance(value, complex):
        return text
    return value


def loose_literal(text: str) -> Any:
    """Like ``literal`` but also accepts ``true``/``false``/``none`` in any case
    (values typed by a user on a command line)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false", "none"):
        return {"true": True, "false": False, "none": None}[lowered]
    return literal(text)


def _norm(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def same_value(a: Any, b: Any) -> bool:
    """Semantic equality of two values (already converted with ``literal``):
    ``16 == 16.0``, a list equals a tuple, ``None`` equals ``""`` (both mean
    "not given"), a one-element list equals its element (2.10 records
    ``use_per_channel_quantization=[False]``), but ``True`` never equals ``1``."""
    a, b = _unwrap_single(a, b), _unwrap_single(b, a)
    if a in (None, "") and b in (None, ""):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return bool(a == b)          # exact: float() of a 400-digit int overflows
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(_norm(a) == _norm(b))


def _unwrap_single(value: Any, other: Any) -> Any:
    """``value``'s only element when it is a one-element list (at any depth) and
    ``other`` is not a list; else ``value``."""
    for _ in range(MAX_UNWRAP):
        if isinstance(value, list | tuple) and len(value) == 1 and \
                not isinstance(other, list | tuple):
            value = value[0]
        else:
            break
    return value


MAX_UNWRAP = 8


def split_tool(head: str) -> tuple[str, str | None]:
    """(tool name, the whole path or None) for a record's head, which real records
    write as a name (``qnn-onnx-converter``) or a full path (Windows or Linux)."""
    parts = [p for p in re.split(r"[\\/]", head) if p]
    if len(parts) <= 1:
        return head, None
    return parts[-1], head


def version_in_tool_path(path: str | None) -> str | None:
    """The SDK version folder in a recorded tool path (``2.22.6.240515``), None
    when the path has none."""
    if not path:
        return None
    for part in reversed(re.split(r"[\\/]", path)):
        m = _PATH_VERSION.match(part.strip())
        if m:
            return m.group(1)
    return None


def short_version(full: str | None) -> str | None:
    """``qaisw-v2.27.0.240926142112_100894`` -> ``2.27.0``."""
    if not full:
        return None
    m = _VERSION_NUMBER.search(full)
    if not m:
        return None
    return f"{m.group(1)}.{m.group(2)}.{m.group(3) or 0}"


@dataclass
class AliasConflict:
    """Two spellings of one destination recorded with different values."""

    canonical: str
    values: dict[str, str]     # spelling as written -> raw value

    def message(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.values.items())
        return (f"{self.canonical}: alias spellings disagree ({shown}); "
                f"which one the converter used is not certain")

    def to_dict(self) -> dict[str, Any]:
        return {"canonical": self.canonical, "values": dict(self.values)}


@dataclass
class ConverterRecord:
    """The converter's recorded argument list: the arguments, SDK version, era, problems."""

    tool: str
    sdk_version: str | None                    # "2.27.0"
    args: dict[str, str]                       # canonical name -> raw value text
    raw_args: list[tuple[str, str]]            # as written, in order
    conflicts: list[AliasConflict]
    era: Era
    raw: str                                   # the record string as found
    sdk_version_full: str | None = None        # "qaisw-v2.27.0.240926142112_100894"
    source: str | None = None                  # the file it was read from
    problems: list[str] = field(default_factory=list)
    truncated: str | None = None               # why the record looks cut off or edited
    sdk_version_source: str | None = None      # VERSION_FROM_STAMP / VERSION_FROM_TOOL_PATH
    tool_path: str | None = None               # the record's head when it is a path

    def has(self, key: str) -> bool:
        return canonical_key(key) in self.args

    def raw_value(self, key: str) -> str | None:
        return self.args.get(canonical_key(key))

    def value(self, key: str) -> Any:
        """The recorded value of ``key`` (any spelling) as Python, None when absent."""
        return literal(self.args.get(canonical_key(key)))

    def spellings(self, key: str) -> list[str]:
        """Every spelling of ``key``'s destination that the record carries."""
        canon = canonical_key(key)
        return [k for k, _ in self.raw_args if canonical_key(k) == canon]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "sdk_version": self.sdk_version,
            "sdk_version_full": self.sdk_version_full,
            "sdk_version_source": self.sdk_version_source,
            "tool_path": self.tool_path,
            "era": self.era,
            "args": dict(self.args),
            "conflicts": [c.to_dict() for c in self.conflicts],
            "problems": list(self.problems),
            "truncated": self.truncated,
            "source": self.source,
            "raw": self.raw,
        }


def _detect_era(text: str) -> Era:
    return "semicolon" if _SEMI_ERA.search(text) else "space"


def _bracket_end(text: str, start: int) -> int | None:
    """Index just past the bracket group opening at ``start``, None if unbalanced."""
    stack: list[str] = []
    quote: str | None = None
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch in _OPEN:
            stack.append(_OPEN[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return None


def _split(text: str, era: Era, problems: list[str]) -> list[str]:
    splitter = _SEMI_SPLIT if era == "semicolon" else _SPACE_SPLIT
    tokens: list[str] = []
    pos = 0
    n = len(text)
    brackets = True        # after one value runs unbalanced to the end, stop looking:
    while pos < n:         # scanning to the end for every later value is quadratic
        key = _KEY_AT.match(text, pos)
        search_from = pos
        if key:
            vstart = key.end()
            if brackets and vstart < n and text[vstart] in _OPEN:
                end = _bracket_end(text, vstart)
                if end is None:
                    problems.append(f"unbalanced brackets in the value of "
                                    f"{key.group(0)[:-1][:60]}")
                    brackets = False
                else:
                    search_from = end
        m = splitter.search(text, search_from)
        if m is None:
            tokens.append(text[pos:].strip())
            break
        tokens.append(text[pos:m.start()].strip())
        pos = m.end()
    return [t for t in tokens if t]


def parse_record_text(text: str, *, source: str | None = None) -> ConverterRecord:
    """Parse a record string (either era). Never raises on odd content: what
    cannot be read is listed in ``problems``."""
    raw = text.strip()
    too_long = None
    if len(raw) > MAX_RECORD_CHARS:
        too_long = (f"the record is {len(raw)} characters long, more than the "
                    f"{MAX_RECORD_CHARS} a real one has; only its start was read")
        raw = raw[:MAX_RECORD_CHARS]
    # A wrapped record reads as one line (split, not a regex: a regex over a long
    # run of blanks without a newline is quadratic).
    flat = " ".join(p for p in (line.strip() for line in raw.split("\n")) if p)
    era = _detect_era(flat)
    problems: list[str] = [too_long] if too_long else []
    tokens = _split(flat, era, problems)
    tool, tool_path = "", None
    if tokens and not _KEY_AT.match(tokens[0]):
        tool, tool_path = split_tool(tokens.pop(0).rstrip(";").strip())
    raw_args: list[tuple[str, str]] = []
    for tok in tokens:
        key_m = _KEY_AT.match(tok)
        if not key_m:
            problems.append(f"unreadable fragment {tok[:60]!r}")
            continue
        value = tok[key_m.end():]
        if era == "semicolon":
            value = value.rstrip(";")
        raw_args.append((key_m.group(0)[:-1], value.strip()))
    if not raw_args:
        problems.append("no key=value entries in the record")

    grouped: dict[str, dict[str, str]] = {}
    for key, value in raw_args:
        spellings = grouped.setdefault(canonical_key(key), {})
        if key in spellings and spellings[key] != value and \
                not same_value(literal(spellings[key]), literal(value)):
            problems.append(f"{key} recorded twice with different values "
                            f"({spellings[key]!r}, {value!r}); the first is used")
            continue
        spellings.setdefault(key, value)

    args: dict[str, str] = {}
    conflicts: list[AliasConflict] = []
    for canon, spellings in grouped.items():
        args[canon] = spellings.get(canon, next(iter(spellings.values())))
        values = list(spellings.values())
        if len(values) > 1 and not all(same_value(literal(values[0]), literal(v))
                                       for v in values[1:]):
            conflicts.append(AliasConflict(canon, dict(spellings)))
    for c in conflicts:
        log.info("%s", c.message())
    return ConverterRecord(tool=tool, sdk_version=None, args=args, raw_args=raw_args,
                           conflicts=conflicts, era=era, raw=raw, source=source,
                           problems=problems, truncated=too_long, tool_path=tool_path)


def _record_from_source(text: str) -> tuple[str | None, list[str], str | None]:
    """(record body, problems, why it looks cut off or None)."""
    problems: list[str] = []
    m = _CMD_MARKER.search(text)
    if m:
        cut = None
        if not m.group(2):
            problems.append("the record comment is not closed (file truncated?)")
            cut = "the 'Command Line used:' comment is not closed"
        body = m.group(1).strip()
        return (body or None), problems, cut
    line = _converter_line(text[:200_000])
    if line is not None:
        problems.append("no 'Command Line used:' marker; read the converter line found")
        return line, problems, None
    return None, problems, None


def _converter_line(text: str) -> str | None:
    """The first line whose first word names a converter and is followed by
    ``key=`` (after ``;`` or blanks), stripped; checked in linear time."""
    for line in text.split("\n"):
        m = _FIRST_RUN.match(line)
        run = m.group(1) if m else ""
        c = run.find("converter")
        if c < 0:
            continue
        start, end = m.start(1) if m else 0, m.end(1) if m else 0
        if _KEY_AFTER_SPACE.match(line, end):
            return line.strip()
        semi = line.find(";", start + c + 9, end)
        while semi >= 0:
            if _KEY_AFTER_SEMI.match(line, semi + 1):
                return line.strip()
            semi = line.find(";", semi + 1, end)
    return None


def _sdk_version_in(text: str) -> str | None:
    m = _SDK_VERSION.search(text)
    return m.group(1) if m else None


HEAD_BYTES = 4 << 20   # the record and QNN_SDK_VERSION sit at the top of a source
JSON_CAP = 1024 * MiB   # a _net.json read for its converter_command
RECORD_HINT = "pass the converter's _net.json or its generated source"


def _read_text(path: Path) -> str:
    """The whole file when it is JSON (up to JSON_CAP), else its first HEAD_BYTES (a
    multi-GB source or a .bin passed by mistake is not read whole). Folders, FIFOs
    and devices are refused before anything is read."""
    too_big = UserError(f"JSON larger than the {JSON_CAP // MiB} MiB cap of this reader; "
                        f"{RECORD_HINT}", file=path)
    with open_regular(path, cap=_UNCAPPED, what="converter output", hint=RECORD_HINT) as fh:
        try:
            data = fh.read(HEAD_BYTES)
            if data.lstrip()[:1] == b"{" or path.suffix.lower() == ".json":
                if os.fstat(fh.fileno()).st_size > JSON_CAP:
                    raise too_big
                data += fh.read(JSON_CAP + 1 - len(data))
        except OSError as exc:
            raise UserError(f"cannot read the file ({exc.strerror or exc})",
                            file=path) from None
    if len(data) > JSON_CAP:
        raise too_big
    return data.decode("utf-8", errors="replace")


_UNCAPPED = 1 << 62      # only the head of a source is read, whatever its size


def looks_like_json(text: str, path: Path) -> bool:
    return text.lstrip().startswith("{") or path.suffix.lower() == ".json"


def load_json(text: str, path: Path) -> Any:
    """JSON from converter output; one line (UserError) when it cannot be read."""
    return _load_json(text, path, hint=RECORD_HINT)


def _version_in_json(data: dict[str, Any]) -> str | None:
    for key, value in data.items():
        if "version" in str(key).lower() and isinstance(value, str) and \
                _VERSION_NUMBER.search(value):
            return value
    return None


def read_record(path: Path) -> ConverterRecord:
    """The recorded argument list of a generated source (any extension, or none)
    or a ``_net.json``. UserError (one line, naming the file) when there is none."""
    path = Path(path)
    text = _read_text(path)
    if looks_like_json(text, path):
        data = load_json(text, path)
        if not isinstance(data, dict):
            raise UserError("JSON top level is not an object; expected a converter "
                            "_net.json", file=path)
        cmd = data.get("converter_command")
        if not isinstance(cmd, str) or not cmd.strip():
            what = "missing" if cmd is None else "empty"
            raise UserError(f"no recorded argument list: converter_command is {what} "
                            f"(a file not written by qnn-onnx-converter?)", file=path)
        rec = parse_record_text(cmd, source=str(path))
        full = _version_in_json(data)
    else:
        body, problems, cut = _record_from_source(text)
        if body is None:
            raise UserError("no recorded argument list (no 'Command Line used:' comment); "
                            "pass the converter's generated source or _net.json", file=path)
        rec = parse_record_text(body, source=str(path))
        rec.problems[:0] = problems
        rec.truncated = cut or rec.truncated
        full = _sdk_version_in(text)
    if rec.truncated is None:
        unbalanced = [p for p in rec.problems if p.startswith("unbalanced brackets")]
        if unbalanced:
            rec.truncated = unbalanced[0]
    set_version(rec, full)
    if not rec.raw_args:
        raise UserError("the recorded argument list has no key=value entries", file=path)
    return rec


def set_version(rec: ConverterRecord, stamp: str | None) -> None:
    """The SDK version of ``rec``: the source's ``QNN_SDK_VERSION`` stamp, else (sources
    up to 2.22 have none) the version folder of the recorded tool path, else None."""
    source = VERSION_FROM_STAMP if short_version(stamp) else None
    if source is None:
        in_path = version_in_tool_path(rec.tool_path)
        if in_path:
            stamp, source = in_path, VERSION_FROM_TOOL_PATH
    rec.sdk_version_full = stamp
    rec.sdk_version = short_version(stamp) if source else None
    rec.sdk_version_source = source


def version_text(rec: ConverterRecord) -> str:
    """``2.22.6 (2.22.6.240515, from the tool path)`` / ``unknown (...)``: the SDK
    version and where it was read."""
    if rec.sdk_version is None:
        return "unknown (no QNN_SDK_VERSION stamp and no version in the tool path)"
    where = "QNN_SDK_VERSION" if rec.sdk_version_source == VERSION_FROM_STAMP \
        else "the tool path"
    return f"{rec.sdk_version} ({rec.sdk_version_full}, from {where})"


def truncated_text(rec: ConverterRecord) -> str:
    """One line: the record is cut off or edited, so what it says is incomplete."""
    return (f"{rec.truncated}: the file is truncated or edited, so the recorded argument "
            f"list is incomplete; regenerate it with qnn-onnx-converter")


def alias_of(key: str) -> str | None:
    """The short alias of a canonical name, if it has one."""
    return CONVERTER_CANONICAL_TO_ALIAS.get(canonical_key(key))
