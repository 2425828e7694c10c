"""What a QNN context binary (``.bin``) says it is, read from its own bytes or
from the JSON the host SDK's ``qnn-context-binary-utility`` writes.

The bytes (docs/context-binaries.md; seen in onnxruntime-qnn's QNN 2.51 binaries,
the flatbuffer schema is not decoded): a header whose u64 fields at 16/24/32 are
the metadata size, the payload offset and the payload size (offset + size = the
file size, which tells a truncated copy); names stored as u32-LE-length-prefixed,
NUL-terminated strings (the graph's I/O tensor names, the graph name, the build
string ``v2.51.0.260929181845``, ``PICKLE/<n>/<graph name>``); and a
``;``-separated HTP settings string, twice per graph, with
``soc_type=QCS6490;arch=68;...;hvx_threads=4;...;vtcm_size=2097152``.

The utility's JSON (nesting NOT confirmed; every plausible variant accepted):
``info.graphs[].info.graphName`` / ``graphInputs[].info.{name, dataType,
dimensions}``, ``buildId``, ``socModel``, ``contextMetadata.info.dspArch`` and
``graphBlobInfo.info.{vtcmSize (MiB), numHvxThreads, spillFillBufferSize}``.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.tables import QNN_DATATYPE_BY_CODE, QNN_DATATYPES, SOCS, SocInfo, find_soc
from qnn_ci.util.safe_read import MiB, check_regular, load_json, open_regular, read_text, safe_int

BINARY_CAP = 32 << 30          # bigger than any context binary a device loads
JSON_CAP = 256 * MiB           # a 3-graph LLM context's JSON is ~400 KiB
NAME_WINDOW = 2 * MiB          # names sit in the first KiBs (300 ops: the first 20 KiB)
SETTINGS_SPAN = 64 << 10       # how far around `soc_type=` the settings string is read
MAX_SETTINGS = 16
MAX_NAME = 4096
UTILITY = "qnn-context-binary-utility"
UTILITY_DIR = Path("bin") / "x86_64-linux-clang"
WHAT = "context binary or qnn-context-binary-utility JSON"
HINT = (f"pass a .bin written by qnn-context-binary-generator / onnxruntime-qnn, or the JSON "
        f"`{UTILITY} --context_binary X.bin --json_file X.json` writes")

_NAME = re.compile(rb"[^\x00-\x1f\x7f][^\x00]*+\x00")
_BUILD = re.compile(r"v?\d+\.\d+\.\d+\.\d+")
_RAW_BUILD = re.compile(rb"v\d+\.\d+\.\d+\.\d{6,}")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_PICKLE = re.compile(r"PICKLE/\d+/(.+)")
_NOT_PRINTABLE = re.compile(rb"[^\x20-\x7e]")
_SOC_TEXT = re.compile(r"[A-Za-z0-9_]{1,40}")


@dataclass(frozen=True)
class ContextTensor:
    """One graph input or output as the binary (or the utility's JSON) names it."""

    name: str
    dtype: str | None                 # QNN_DATATYPE_* name (raw text if unknown)
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class ContextGraph:
    """One graph of a context binary and its I/O tensors (empty when not readable)."""

    name: str
    inputs: tuple[ContextTensor, ...] = ()
    outputs: tuple[ContextTensor, ...] = ()


@dataclass(frozen=True)
class ContextInfo:
    """What a context binary says it is; None where it could not be read."""

    source: Path
    kind: str                          # "binary" | "utility_json"
    size_bytes: int | None             # the binary's size (None for the JSON alone)
    soc: str | None                    # canonical qnn_ci.tables name; raw text if unknown
    htp_arch: int | None               # 68
    vtcm_bytes: int | None             # 2097152
    hvx_threads: int | None
    qnn_version: str | None            # "2.51.0"
    build_id: str | None               # "v2.51.0.260929181845" as found
    graphs: tuple[ContextGraph, ...]
    names: frozenset[str]              # stored names (binary); I/O names (JSON)
    spill_fill_bytes: int | None = None              # utility JSON only
    header_names: tuple[str, ...] = ()               # binary: names in the header, in order

    @property
    def io_known(self) -> bool:
        return any(g.inputs or g.outputs for g in self.graphs)

    def mentions(self, tensor_name: str) -> bool:
        return tensor_name in self.names or any(
            t.name == tensor_name for g in self.graphs for t in (*g.inputs, *g.outputs))

    def to_dict(self) -> dict[str, Any]:
        def tensors(ts: tuple[ContextTensor, ...]) -> list[dict[str, Any]]:
            return [{"name": t.name, "dtype": t.dtype,
                     "dims": None if t.dims is None else list(t.dims)} for t in ts]
        return {
            "source": str(self.source), "kind": self.kind, "size_bytes": self.size_bytes,
            "soc": self.soc, "htp_arch": self.htp_arch, "vtcm_bytes": self.vtcm_bytes,
            "hvx_threads": self.hvx_threads, "qnn_version": self.qnn_version,
            "build_id": self.build_id, "spill_fill_bytes": self.spill_fill_bytes,
            "graphs": [{"name": g.name, "inputs": tensors(g.inputs),
                        "outputs": tensors(g.outputs)} for g in self.graphs],
            "header_names": list(self.header_names), "names": sorted(self.names),
        }


@dataclass(frozen=True)
class ExpectedTensor:
    """What the binary must carry for one graph input/output (from the _net.json)."""

    name: str
    dtype: str | None
    dims: tuple[int, ...] | None
    is_input: bool


# ----------------------------------------------------------------------------- reading

def read_context_info(path: Path) -> ContextInfo:
    """A context binary or the utility's JSON, told apart by content. Any bytes give a
    ContextInfo or one UserError line naming the file and what to do."""
    path = Path(path)
    try:
        size = check_regular(path, what=WHAT).st_size
        if size == 0:
            raise UserError(f"empty file: not a context binary; {HINT}", file=path)
        with open_regular(path, cap=BINARY_CAP, what=WHAT) as fh:
            head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
            if head[:1] in (b"{", b"["):
                return _from_json(read_text(path, cap=JSON_CAP, what=WHAT), path)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _from_binary(data, path)
    except (OSError, ValueError, OverflowError, MemoryError) as exc:
        raise UserError(f"cannot read it ({type(exc).__name__}: {exc}); {HINT}",
                        file=path) from None


def _declared_size(data: mmap.mmap) -> int | None:
    """offset + size of the payload per the header, when the header looks like one."""
    if len(data) < 40:
        return None
    meta, offset, payload = (int.from_bytes(data[i:i + 8], "little") for i in (16, 24, 32))
    if 40 <= offset <= 1 << 24 and meta <= offset - 40 and 0 < payload < 1 << 46:
        return offset + payload
    return None


def _names(window: bytes) -> list[tuple[int, str]]:
    """(offset, text) of every u32-length-prefixed, NUL-terminated printable string."""
    found: list[tuple[int, str]] = []
    for m in _NAME.finditer(window):
        start, end = m.start(), m.end() - 1
        if start < 4 or end - start > MAX_NAME or \
                int.from_bytes(window[start - 4:start], "little") != end - start:
            continue
        try:
            text = window[start:end].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.isprintable() and text.strip():
            found.append((start - 4, text))
    return found


def _settings(data: mmap.mmap) -> tuple[list[dict[str, str]], bool]:
    """Each HTP settings string as {key: first value}, and whether one runs into the
    end of the file (a truncated copy)."""
    out: list[dict[str, str]] = []
    pos, cut = 0, False
    while len(out) < MAX_SETTINGS:
        at = data.find(b"soc_type=", pos)
        if at < 0:
            break
        lo = max(0, at - SETTINGS_SPAN)
        before = _NOT_PRINTABLE.search(data[lo:at][::-1])
        start = at - before.start() if before else lo
        tail = data[at:at + SETTINGS_SPAN]
        after = _NOT_PRINTABLE.search(tail)
        end = at + (after.start() if after else len(tail))
        cut = cut or end >= len(data)
        values: dict[str, str] = {}
        for item in data[start:end].decode("ascii").split(";"):
            key, sep, value = item.partition("=")
            if sep and key not in values:
                values[key] = value
        out.append(values)
        pos = max(end, at + 1)
    return out, cut


def _from_binary(data: mmap.mmap, path: Path) -> ContextInfo:
    size = len(data)
    if data[:4] == b"\x7fELF":
        raise UserError(f"an ELF file (a model or backend library), not a context binary; "
                        f"{HINT}", file=path)
    declared = _declared_size(data)
    if declared is not None and size < declared:
        raise UserError(f"truncated: its header says {declared} bytes, the file has {size}; "
                        "copy or build it again", file=path)
    window = bytes(data[:NAME_WINDOW]) + b"\0"     # every run of the scan ends: linear time
    found = _names(window)
    settings, cut = _settings(data)
    if cut:
        raise UserError("truncated: the HTP settings string runs into the end of the file; "
                        "copy or build it again", file=path)
    build = next((t for _, t in found if _BUILD.fullmatch(t)), None)
    if build is None and settings:
        raw = _RAW_BUILD.search(window)
        build = raw.group().decode() if raw else None
    if not settings and build is None:
        raise UserError("not a QNN context binary: no HTP settings string (`soc_type=...;"
                        f"arch=...`) and no QNN build string in it; {HINT}", file=path)
    graphs = list(dict.fromkeys(m.group(1) for _, t in found if (m := _PICKLE.fullmatch(t))))
    first = settings[0] if settings else {}
    raw_soc = first.get("soc_type")
    vtcms = [v for s in settings if (v := _int(s.get("vtcm_size"))) is not None and v > 0]
    header_end = min(int.from_bytes(data[24:32], "little"), len(window)) \
        if declared is not None else 1024
    build_at = next((at for at, t in found if t == build and at < header_end), header_end)
    header = tuple(dict.fromkeys(      # the I/O names precede the build string (QNN 2.51)
        t for at, t in found if at < build_at and t not in graphs
        and not _PICKLE.fullmatch(t) and any(c.isalnum() for c in t)))
    return ContextInfo(
        source=path, kind="binary", size_bytes=size,
        soc=_soc_name(raw_soc) if raw_soc is not None else None,
        htp_arch=_small(first.get("arch")),
        vtcm_bytes=max(vtcms) if vtcms else None, hvx_threads=_small(first.get("hvx_threads")),
        qnn_version=_version_text(build), build_id=build,
        graphs=tuple(ContextGraph(g) for g in graphs),
        names=frozenset(t for _, t in found), header_names=header)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 1 << 63 else None
    if isinstance(value, float) and value.is_integer() and abs(value) < 1 << 53:
        return int(value)
    return safe_int(value) if isinstance(value, str) else None


def _small(value: Any) -> int | None:
    """A count or an architecture number: 1..999, else unknown."""
    number = _int(value)
    return number if number is not None and 0 < number < 1000 else None


def _soc_name(raw: Any) -> str | None:
    """The canonical table name of a SoC given by name or numeric id; raw text if unknown."""
    number = _int(raw)
    if number is not None:
        by_sim = [s for s in SOCS if s.sim_soc_id == number]
        by_sdk = [s for s in SOCS if s.sdk_soc_id == number]
        match = by_sim or (by_sdk if len(by_sdk) == 1 else [])
        return match[0].name if match else str(number)
    if not isinstance(raw, str) or not raw.strip():
        return None
    soc = find_soc(raw)
    return soc.name if soc else raw.strip() if _SOC_TEXT.fullmatch(raw.strip()) else None


def _version_text(text: str | None) -> str | None:
    m = _VERSION.search(text) if text else None
    return ".".join(m.groups()) if m else None


def _vtuple(text: str | None) -> tuple[int, int, int] | None:
    m = _VERSION.search(text) if text else None
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


# ----------------------------------------------------------------------------- the JSON

def _walk(doc: Any, keys: frozenset[str], limit: int = 200_000) -> Iterator[Any]:
    """Values of ``keys`` anywhere in ``doc``, shallowest first (bounded)."""
    queue, seen = [doc], 0
    while queue and seen < limit:
        nxt: list[Any] = []
        for node in queue:
            seen += 1
            if isinstance(node, dict):
                for k, v in node.items():
                    if k in keys and v is not None:
                        yield v
                    if isinstance(v, dict | list):
                        nxt.append(v)
            elif isinstance(node, list):
                nxt.extend(v for v in node if isinstance(v, dict | list))
        queue = nxt


def _first(doc: Any, *keys: str) -> Any:
    return next(_walk(doc, frozenset(keys)), None)


def _dtype(value: Any) -> str | None:
    code = _int(value)
    if code is None and isinstance(value, str) and value.strip().lower().startswith("0x"):
        try:
            code = int(value.strip(), 16)
        except ValueError:
            code = None
    if code is not None:
        return QNN_DATATYPE_BY_CODE.get(code, str(code))
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().upper()
    if not text.startswith("QNN_DATATYPE_") and f"QNN_DATATYPE_{text}" in QNN_DATATYPES:
        text = f"QNN_DATATYPE_{text}"
    return text[:64]


def _dims(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list) or len(value) > 64:
        return None
    dims = [_int(d) for d in value]
    return tuple(d for d in dims if d is not None) if all(
        d is not None and 0 <= d for d in dims) else None


def _tensors(value: Any) -> tuple[ContextTensor, ...]:
    out = []
    for t in value if isinstance(value, list) else []:
        ti = t.get("info") if isinstance(t, dict) and isinstance(t.get("info"), dict) else t
        if isinstance(ti, dict) and isinstance(ti.get("name"), str):
            out.append(ContextTensor(ti["name"], _dtype(ti.get("dataType")),
                                     _dims(ti.get("dimensions"))))
    return tuple(out)


def _graph(value: Any) -> ContextGraph | None:
    if not isinstance(value, dict):
        return None
    gi = value["info"] if isinstance(value.get("info"), dict) else value
    name = gi.get("graphName", gi.get("name"))
    return ContextGraph(name if isinstance(name, str) else "", _tensors(gi.get("graphInputs")),
                        _tensors(gi.get("graphOutputs")))


def _from_json(text: str, path: Path) -> ContextInfo:
    doc = load_json(text.lstrip("\ufeff"), path, hint=HINT)
    root = doc.get("info") if isinstance(doc, dict) and isinstance(doc.get("info"), dict) \
        else doc
    raw_graphs = root.get("graphs") if isinstance(root, dict) else None
    if raw_graphs is None and isinstance(doc, dict):
        raw_graphs = doc.get("graphs")
    build = _first(doc, "buildId", "build_id")
    build = build.strip()[:80] if isinstance(build, str) and build.strip() else None
    if not isinstance(raw_graphs, list) and build is None:
        raise UserError(f"no `graphs` list and no `buildId`: not qnn-context-binary-utility "
                        f"output; {HINT}", file=path)
    graphs = tuple(g for g in map(_graph, raw_graphs or []) if g is not None)
    vtcm = [v << 20 if v < 1 << 16 else v
            for raw in _walk(doc, frozenset({"vtcmSize", "vtcm_size"}))
            if (v := _int(raw)) is not None and v > 0 and v < 1 << 40]
    spill = [v for raw in _walk(doc, frozenset({"spillFillBufferSize"}))
             if (v := _int(raw)) is not None and v >= 0]
    arch_raw = _first(doc, "dspArch", "dsp_arch", "htpArch", "htp_arch")
    arch = _int(arch_raw.strip().lstrip("vV") if isinstance(arch_raw, str) else arch_raw)
    return ContextInfo(
        source=path, kind="utility_json", size_bytes=None,
        soc=_soc_name(_first(doc, "socModel", "soc_model", "socId", "soc_id", "socName")),
        htp_arch=_small(arch), vtcm_bytes=max(vtcm) if vtcm else None,
        hvx_threads=_small(_first(doc, "numHvxThreads", "hvx_threads", "hvxThreads")),
        qnn_version=_version_text(build), build_id=build, graphs=graphs,
        names=frozenset(t.name for g in graphs for t in (*g.inputs, *g.outputs)),
        spill_fill_bytes=max(spill) if spill else None)


def merge(binary: ContextInfo, utility: ContextInfo | None) -> ContextInfo:
    """The binary's facts with the utility's graphs and I/O (the bytes win for SoC,
    arch, VTCM and size; the utility fills what the bytes did not say)."""
    if utility is None:
        return binary
    def pick(a: Any, b: Any) -> Any:
        return a if a is not None else b
    return replace(
        binary, soc=pick(binary.soc, utility.soc), htp_arch=pick(binary.htp_arch,
                                                                 utility.htp_arch),
        vtcm_bytes=pick(binary.vtcm_bytes, utility.vtcm_bytes),
        hvx_threads=pick(binary.hvx_threads, utility.hvx_threads),
        qnn_version=pick(binary.qnn_version, utility.qnn_version),
        build_id=pick(binary.build_id, utility.build_id),
        graphs=utility.graphs or binary.graphs, names=binary.names | utility.names,
        spill_fill_bytes=pick(utility.spill_fill_bytes, binary.spill_fill_bytes))


# ----------------------------------------------------------------------------- the tool

def _excerpt(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "fail" in line.lower()]
    joined = " | ".join((errors or lines)[-n:]) or "no output"
    return joined if len(joined) <= 300 else "..." + joined[-297:]


def context_utility(sdk_root: Path | None) -> Path | None:
    """The host SDK's ``qnn-context-binary-utility``, or None when it has none."""
    if sdk_root is None:
        return None
    tool = Path(sdk_root) / UTILITY_DIR / UTILITY
    return tool if tool.is_file() else None


def run_context_utility(sdk_root: Path | None, binary: Path, workdir: Path, *,
                        timeout_s: float = 120, environ: Mapping[str, str] | None = None
                        ) -> tuple[ContextInfo | None, str | None]:
    """Run the SDK's ``qnn-context-binary-utility`` on ``binary`` (JSON into
    ``workdir``): (info, None); (None, None) when the SDK has no such tool; (None,
    one-line reason) when it failed."""
    tool = context_utility(sdk_root)
    if sdk_root is None or tool is None:
        return None, None
    root = Path(sdk_root)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{Path(binary).stem}.context_info.json"
    out.unlink(missing_ok=True)
    argv = [str(tool), "--context_binary", str(Path(binary).resolve()), "--json_file", str(out)]
    from qnn_ci.sdk.locate import Sdk
    from qnn_ci.sdk.toolrun import run_tool

    sdk = Sdk(root, None, None, environ=dict(environ) if environ is not None else None)
    run = run_tool(argv, sdk=sdk, workdir=workdir, log_name=UTILITY, timeout=timeout_s)
    if not run.ok:
        status = f"timed out after {timeout_s:g} s" if run.timed_out else \
            f"exit status {run.exit_code}"
        return None, f"{UTILITY} failed ({status}): {_excerpt(run.output)} (log {run.log_path})"
    if not out.is_file():
        return None, f"{UTILITY} wrote no {out.name}: {_excerpt(run.output)} (log {run.log_path})"
    try:
        return read_context_info(out), None
    except UserError as exc:
        return None, f"{UTILITY}'s JSON cannot be read: {exc.oneline()}"


# ----------------------------------------------------------------------------- checks

def check_context(info: ContextInfo, *, soc: SocInfo | None, expected: Sequence[ExpectedTensor],
                  runtime_qnn_version: str | None, subject: str = "") -> list[Finding]:
    """The binary against the target SoC, the expected graph I/O and the board's QNN."""
    who = subject or info.source.name
    out: list[Finding] = []
    unknown: list[str] = []

    def add(check: str, message: str, severity: Severity = Severity.ERROR,
            about: str | None = None) -> None:
        out.append(Finding(check, message, severity, subject=about or who))

    if soc is not None:
        built = find_soc(info.soc) if info.soc else None
        if info.soc is None:
            unknown.append("SoC")
        elif built is None or built.name != soc.name:
            add("context.soc", f"{who} was built for {info.soc}, not the target {soc.name}: a "
                f"{soc.name} board would refuse it (error 5000); rebuild it for {soc.name} "
                f"(HTP config `devices` soc_model / dsp_arch {soc.arch_name})")
        if info.htp_arch is None:
            unknown.append("HTP arch")
        elif info.htp_arch != soc.htp_arch:
            add("context.arch", f"{who} was built for HTP v{info.htp_arch}, {soc.name} has "
                f"{soc.arch_name}: rebuild it with dsp_arch {soc.arch_name}")
        if info.vtcm_bytes is None:
            unknown.append("VTCM size")
        elif soc.vtcm_mb is not None and info.vtcm_bytes > soc.vtcm_mb << 20:
            add("context.vtcm", f"{who} asks for {vtcm_text(info.vtcm_bytes)} of VTCM, "
                f"{soc.name} has {soc.vtcm_mb} MiB: set vtcm_mb to {soc.vtcm_mb} (or 0, the "
                "SoC's maximum) in the HTP config and rebuild", Severity.WARNING)
    _check_io(info, expected, who, add, unknown)
    if runtime_qnn_version is not None:
        have, run = _vtuple(info.qnn_version), _vtuple(runtime_qnn_version)
        if have is None:
            unknown.append("QNN version")
        elif run is not None and have > run:
            built_v, run_v = ".".join(map(str, have)), ".".join(map(str, run))
            add("context.newer_than_runtime", f"{who} was built with QNN {built_v}, newer than "
                f"the board's runtime {run_v}: the load would fail with error 5000 (Could not "
                f"create context from binary); rebuild the binary with the board's QNN {run_v} "
                f"or update the board's runtime to {built_v}")
    if unknown:
        add("context.unknown", f"could not read from {who}: {', '.join(unknown)} (not checked)",
            Severity.INFO)
    return out


def _check_io(info: ContextInfo, expected: Sequence[ExpectedTensor], who: str, add: Any,
              unknown: list[str]) -> None:
    if not expected:
        return
    if not info.io_known and not info.names:
        unknown.append("graph I/O names")
        return
    found = {(t.name, True): t for g in info.graphs for t in g.inputs} | \
        {(t.name, False): t for g in info.graphs for t in g.outputs}
    for exp in expected:
        side = "input" if exp.is_input else "output"
        if info.io_known:
            tensor = found.get((exp.name, exp.is_input))
            if tensor is None:
                other = " (it is a graph " + ("output" if exp.is_input else "input") + ")" \
                    if (exp.name, not exp.is_input) in found else ""
                add("context.io_names", f"{who} has no graph {side} {exp.name!r}{other}: the "
                    "app would ask for a tensor the binary does not have; rebuild it from the "
                    "model being shipped (or fix the expected names)", about=exp.name)
                continue
            _check_tensor(tensor, exp, who, add)
        elif not info.mentions(exp.name):
            add("context.io_names", f"{who} never names the graph {side} {exp.name!r}: it was "
                "built from another model, or renamed it; rebuild it from the model being "
                "shipped", about=exp.name)


def _check_tensor(tensor: ContextTensor, exp: ExpectedTensor, who: str, add: Any) -> None:
    want = _dtype(exp.dtype) if exp.dtype is not None else None
    if want is not None and tensor.dtype is not None and tensor.dtype != want:
        add("context.io_types", f"{who}: {exp.name!r} is {tensor.dtype}, expected {want}: "
            "convert with the intended input/output encodings and rebuild", about=exp.name)
    if exp.dims is not None and tensor.dims is not None and tuple(exp.dims) != tensor.dims:
        add("context.io_shapes", f"{who}: {exp.name!r} has dims {list(tensor.dims)}, expected "
            f"{list(exp.dims)}: pin the shapes the app feeds and rebuild", about=exp.name)


def vtcm_text(n: int) -> str:
    """``2 MiB (2097152 bytes)``."""
    if n % MiB == 0:
        return f"{n // MiB} MiB ({n} bytes)"
    if n % 1024 == 0:
        return f"{n // 1024} KiB ({n} bytes)"
    return f"{n} bytes"


def dumps(info: ContextInfo, **extra: Any) -> str:
    """``info.to_dict()`` (plus ``extra``) as indented JSON."""
    return json.dumps(info.to_dict() | extra, indent=2)


