"""Prepare a QDQ model for one SoC's HTP on the simulator's graph preparer.

One session does it all: CPU fallback disabled, the assignment record on, the
EPContext model and context binary written (``<stem>_ctx.onnx`` +
``<stem>_ctx_qnn.bin``), the QNN JSON graph and the op trace (ONNX node ->
QNN ops) dumped, and the EP's log captured. The session exists only if every
node went to QNN; the binary is then read back for the SoC and arch it was
built for.

When the prepare fails, a second session with CPU fallback allowed (and no
context written) gives the assignment record the first one could not: how many
nodes the HTP took, and which went to the CPU.

Node counts all come from that one record: total = on the HTP + rejected (not
on the HTP, with a reason in the EP log) + other (not on the HTP, no reason
logged). The record holds the session's graph, so it also holds nodes
onnxruntime inserted or rewrote for the EP (NHWC Transposes, duplicated
DequantizeLinears, ``conv1_token_1``); those are listed as ``inserted``. The EP
log may also name QNN ops the EP made itself while lowering a node
(``cast_in_ort_qnn_ep_convert``): they are not graph nodes, so they are attached
to the node they were made for, never counted on their own. A node without a name
is logged as ``<op type><graph index>`` and recorded with an empty name; both are
matched back to the graph node (``qnn_ci.sim.node_names``), so its rejection
carries its QNN error code and counts as rejected.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.sim.binary import ContextInfo, read_context_info
from qnn_ci.sim.ep import EP_NAME, assignment, capture_native_output, htp_session_options
from qnn_ci.sim.logparse import EpLog, RejectedNode, read_ep_log
from qnn_ci.sim.node_names import display_names, resolve_record, unnamed_nodes
from qnn_ci.tables import SocInfo
from qnn_ci.util.listing import cut_text, shown

log = logging.getLogger(__name__)

_SUFFIX = re.compile(r"(_token_\d+|_\d+)$")
EP_OP_MARK = "_ort_qnn_ep_"         # QNN ops/tensors the EP names after a node or tensor
NO_REASON = ("not taken by the QNN EP; no reason at this log level (the EP's verbose log, "
             "`qnn-ci -vv sim`, may say why)")
MAX_NODE_FINDINGS = 20
NODES_COUNTED = ("nodes of the QDQ graph as onnxruntime partitioned it (Q/DQ nodes and the "
                 "NHWC Transposes it inserted for the EP included)")
STATIC_SHAPES_HINT = ("pin every dim first: the static_shapes stage (manifest `inputs:` "
                      "shapes) or `qnn-ci shapes --dim NAME=d0,d1,...`")


@dataclass
class PrepareResult:
    """A QDQ model prepared for one SoC's HTP: files written, where the nodes went, why."""

    soc: SocInfo
    prepared: bool
    ep_log: Path
    ctx_model: Path | None = None
    ctx_binary: Path | None = None
    qnn_json: list[Path] = field(default_factory=list)
    op_trace: Path | None = None
    context: ContextInfo | None = None
    nodes_on_htp: int | None = None
    nodes_total: int | None = None
    by_ep: dict[str, int] = field(default_factory=dict)
    rejected: list[RejectedNode] = field(default_factory=list)   # every node not on the HTP
    model_nodes: int | None = None          # nodes of the quantized model given to prepare
    inserted: list[tuple[str, str, str]] = field(default_factory=list)  # (name, op, EP)
    log_only: list[RejectedNode] = field(default_factory=list)  # named in the log, not off-HTP
    error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def nodes_rejected(self) -> int:
        """Nodes not on the HTP for which the EP log gives a reason."""
        return sum(1 for r in self.rejected if r.reason != NO_REASON)

    @property
    def nodes_other(self) -> int:
        """Nodes not on the HTP without a logged reason."""
        return sum(1 for r in self.rejected if r.reason == NO_REASON)

    def counts_text(self) -> str:
        """``8 = 6 on HTP + 2 rejected + 0 other`` (all from the assignment record)."""
        if self.nodes_total is None:
            return (f"unknown (no session could be built); {len(self.rejected)} node(s) "
                    "rejected per the EP log")
        text = f"{self.nodes_total} = {self.nodes_on_htp} on HTP"
        if self.rejected or not self.prepared:
            text += (f" + {self.nodes_rejected} rejected + {self.nodes_other} not on HTP "
                     "without a logged reason")
        return text

    def origin_text(self, limit: int = 6) -> str | None:
        """Where the session's nodes come from: the quantized model, and which
        onnxruntime inserted or rewrote for the EP."""
        if self.nodes_total is None or self.model_nodes is None:
            return None
        kept = self.nodes_total - len(self.inserted)
        head = f"{kept} of the quantized model's {self.model_nodes} nodes as they are"
        if not self.inserted:
            return f"{head}; none inserted by onnxruntime for the EP"
        names = cut_text(self.inserted, limit, render=lambda i: f"{i[0]!r} ({i[1]})")
        return (f"{head}; {len(self.inserted)} inserted or rewritten by onnxruntime for the "
                f"EP: {names}")

    def to_dict(self) -> dict[str, Any]:
        ctx = self.context
        return {
            "soc": self.soc.name, "sim_soc_id": self.soc.sim_soc_id, "prepared": self.prepared,
            "soc_type": ctx.soc_type if ctx else None, "arch": ctx.arch if ctx else None,
            "vtcm_size": ctx.vtcm_size if ctx else None,
            "nodes_on_htp": self.nodes_on_htp, "nodes_total": self.nodes_total,
            "nodes_counted": NODES_COUNTED,
            "nodes_rejected": self.nodes_rejected if self.nodes_total is not None else None,
            "nodes_other": self.nodes_other if self.nodes_total is not None else None,
            "nodes_by_ep": self.by_ep, "model_nodes": self.model_nodes,
            "inserted": [{"name": n, "op_type": op, "ep": ep} for n, op, ep in self.inserted],
            "rejected": [r.to_dict() for r in self.rejected],
            "log_only": [r.to_dict() for r in self.log_only],
            "error": self.error,
            "ctx_model": _s(self.ctx_model), "ctx_binary": _s(self.ctx_binary),
            "qnn_json": [str(p) for p in self.qnn_json], "op_trace": _s(self.op_trace),
            "ep_log": str(self.ep_log), "duration_s": round(self.duration_s, 3),
        }


def _s(p: Path | None) -> str | None:
    return str(p) if p is not None else None


def dynamic_dims(model: onnx.ModelProto) -> list[tuple[str, str, list[str]]]:
    """(kind, tensor, dims) for graph inputs/outputs and value_info with a dim that
    is not a positive integer."""
    found: list[tuple[str, str, list[str]]] = []
    inits = {i.name for i in model.graph.initializer}
    groups = [("input", [v for v in model.graph.input if v.name not in inits]),
              ("output", list(model.graph.output)), ("interior", list(model.graph.value_info))]
    for kind, values in groups:
        for vi in values:
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                continue
            dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                    for d in tt.shape.dim]
            if any(not (d.isdigit() and int(d) > 0) for d in dims):
                found.append((kind, vi.name, dims))
    return found


def _reset(paths: list[Path], dirs: list[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)


def _ctx_binary(ctx_model: Path) -> Path | None:
    """The binary an embed-mode-0 EPContext model points at."""
    m = onnx.load(str(ctx_model), load_external_data=False)
    for node in m.graph.node:
        if node.op_type == "EPContext":
            for a in node.attribute:
                if a.name == "ep_cache_context":
                    return ctx_model.parent / a.s.decode()
    return None


def _session(model: Path, so: Any, log_path: Path) -> Any:
    import onnxruntime as ort

    with capture_native_output(log_path):
        return ort.InferenceSession(str(model), sess_options=so)


def _owner(name: str, nodes: set[str], producer: dict[str, str],
           consumer: dict[str, str]) -> tuple[str | None, bool]:
    """The node a name from the EP log stands for, and whether the name is a QNN
    op the EP made for that node (``<node or tensor>_ort_qnn_ep_<what>``) rather
    than the node itself. EP-made suffixes (``conv1_token_1``, ``relu1_2``) are
    stripped until a known node remains."""
    base, mark, _ = name.partition(EP_OP_MARK)
    made = bool(mark)
    cand = name if not made else base
    if not cand:                       # `_ort_qnn_ep_convert`: made for a nameless node
        return None, made
    while cand not in nodes and _SUFFIX.search(cand):
        cand = _SUFFIX.sub("", cand)
    if cand in nodes:
        return cand, made
    tensor_node = producer.get(base) or consumer.get(base)
    if made and tensor_node in nodes:
        return tensor_node, True
    return None, made


def _merge(into: RejectedNode, r: RejectedNode) -> None:
    into.op_type = into.op_type or r.op_type
    into.qnn_type = into.qnn_type or r.qnn_type
    into.error_code = into.error_code if into.error_code is not None else r.error_code
    into.reason = into.reason or r.reason


def attribute_log(logged: list[RejectedNode], nodes: dict[str, str],
                  model: onnx.ModelProto) -> tuple[dict[str, RejectedNode], list[RejectedNode]]:
    """Log entries merged per node (``nodes``: EP name -> op type, an unnamed node
    under its ``<op type><index>`` name: ``qnn_ci.sim.node_names``), with the QNN
    ops the EP made for a node attached to it; and the entries that match no node."""
    names = display_names(model)
    producer = {o: names[k] for k, n in enumerate(model.graph.node) for o in n.output}
    consumer: dict[str, str] = {}
    for k, n in enumerate(model.graph.node):
        for i in n.input:
            if i:
                consumer.setdefault(i, names[k])
    known = set(nodes)
    merged: dict[str, RejectedNode] = {}
    unmatched: list[RejectedNode] = []
    for r in logged:
        owner, made = _owner(r.name, known, producer, consumer)
        if owner is None:
            unmatched.append(r)
            continue
        cur = merged.setdefault(owner, RejectedNode(owner, op_type=nodes.get(owner)))
        if made:
            op = f"{r.name!r} ({r.qnn_type or r.op_type or '?'}"
            op += f", error code {r.error_code})" if r.error_code is not None else ")"
            if op not in cur.ep_ops:
                cur.ep_ops.append(op)
        else:
            _merge(cur, r)
    return merged, unmatched


def prepare_for_htp(qdq_model: Path, out_dir: Path, soc: SocInfo, *, stem: str | None = None,
                    log_severity: int = 2, diagnose: bool = True) -> PrepareResult:
    """Prepare ``qdq_model`` for ``soc`` (its numeric simulator id) with CPU
    fallback disabled; see the module docstring."""
    start = time.monotonic()
    stem = stem or qdq_model.name.removesuffix(".onnx")
    ctx_model = out_dir / f"{stem}_ctx.onnx"
    json_dir, trace_dir = out_dir / "qnn_json", out_dir / "op_trace"
    ep_log = out_dir / "ep.log"
    _reset([ctx_model, out_dir / f"{stem}_ctx_qnn.bin", ep_log], [json_dir, trace_dir])
    so = htp_session_options(
        soc, log_severity=log_severity,
        config={"ep.context_enable": "1", "ep.context_file_path": str(ctx_model),
                "ep.context_embed_mode": "0"},
        provider_options={"dump_json_qnn_graph": "1", "json_qnn_graph_dir": str(json_dir),
                          "enable_framework_op_trace": "1",
                          "framework_op_trace_dir": str(trace_dir)})
    res = PrepareResult(soc, False, ep_log)
    model = onnx.load(str(qdq_model), load_external_data=False)
    res.model_nodes = len(model.graph.node)
    try:
        session = _session(qdq_model, so, ep_log)
    except Exception as exc:
        res.error = str(exc).strip()
        _failed(res, qdq_model, model, log_severity, diagnose)
    else:
        _succeeded(res, session, ctx_model, model)
        del session
    res.qnn_json = sorted(p for p in json_dir.glob("*.json")
                          if not p.name.endswith("_tensor_log.json"))
    trace = trace_dir / "qnn_op_trace.json"
    res.op_trace = trace if trace.is_file() else None
    res.duration_s = time.monotonic() - start
    return res


def _count(res: PrepareResult, by_ep_nodes: dict[str, list[tuple[str, str]]],
           model: onnx.ModelProto) -> None:
    """Counts and the inserted nodes, all from the session's assignment record."""
    res.by_ep = {ep: len(nodes) for ep, nodes in by_ep_nodes.items()}
    res.nodes_on_htp = res.by_ep.get(EP_NAME, 0)
    res.nodes_total = sum(res.by_ep.values())
    in_model = {n.name for n in model.graph.node}
    res.inserted = [(name, op, ep) for ep, nodes in by_ep_nodes.items()
                    for name, op in nodes if name not in in_model]


def _succeeded(res: PrepareResult, session: Any, ctx_model: Path,
               model: onnx.ModelProto) -> None:
    by_ep = assignment(session)
    _count(res, by_ep, model)
    others = {ep: n for ep, n in by_ep.items() if ep != EP_NAME and n}
    if others:
        res.findings.append(Finding("sim.assignment", "the session reports nodes not on QNN: "
                                    + ", ".join(f"{ep}: {len(n)}" for ep, n in others.items()),
                                    Severity.ERROR))
    elif not res.nodes_total:
        res.findings.append(Finding("sim.assignment", "the session's assignment record is "
                                    "empty: no node is known to be on QNN", Severity.ERROR))
    res.ctx_model = ctx_model if ctx_model.is_file() else None
    res.ctx_binary = _ctx_binary(ctx_model) if res.ctx_model else None
    if res.ctx_binary is None or not res.ctx_binary.is_file():
        res.findings.append(Finding("sim.context", "the prepare wrote no context binary "
                                    f"next to {ctx_model.name}", Severity.ERROR))
        return
    res.context = read_context_info(res.ctx_binary)
    res.findings += check_context(res.context, res.soc, res.ctx_binary)
    res.prepared = not any(f.severity == Severity.ERROR for f in res.findings)


def check_context(info: ContextInfo, soc: SocInfo, binary: Path) -> list[Finding]:
    """The binary must say it was built for ``soc``: soc_type, arch, and VTCM size
    where the table knows it."""
    out: list[Finding] = []
    names = {soc.name.upper(), *(a.upper() for a in soc.aliases)}
    if info.soc_type is None or info.soc_type.upper() not in names:
        out.append(Finding("sim.soc_type", f"{binary.name} was built for soc_type="
                           f"{info.soc_type}, not {soc.name} (simulator id {soc.sim_soc_id})",
                           Severity.ERROR, subject=binary.name))
    if info.arch != soc.htp_arch:
        out.append(Finding("sim.arch", f"{binary.name} was built for arch={info.arch}, not "
                           f"{soc.htp_arch} ({soc.arch_name}) of {soc.name}",
                           Severity.ERROR, subject=binary.name))
    if soc.vtcm_mb is not None and info.vtcm_size not in (None, soc.vtcm_mb << 20):
        out.append(Finding("sim.vtcm", f"{binary.name} has vtcm_size={info.vtcm_size}, the "
                           f"table says {soc.vtcm_mb} MiB for {soc.name}", Severity.WARNING))
    return out


def _failed(res: PrepareResult, qdq_model: Path, model: onnx.ModelProto,
            log_severity: int, diagnose: bool) -> None:
    parsed: EpLog = read_ep_log(res.ep_log)
    by_ep: dict[str, list[tuple[str, str]]] | None = None
    if diagnose:
        with res.ep_log.open("a", encoding="utf-8") as fh:
            fh.write("\n=== qnn-ci: diagnostic session, CPU fallback allowed ===\n")
        so = htp_session_options(res.soc, allow_cpu_fallback=True, log_severity=log_severity)
        try:
            session = _session(qdq_model, so, res.ep_log)
        except Exception as exc:
            log.info("diagnostic session failed too: %s", exc)
        else:
            by_ep = assignment(session)
            _count(res, by_ep, model)
            del session
    graph_nodes = {name: n.op_type for name, n in zip(display_names(model), model.graph.node,
                                                     strict=True)}
    index = unnamed_nodes(model)
    if by_ep is None:
        # No record: the log alone, mapped onto the quantized model's nodes.
        merged, unmatched = attribute_log(parsed.rejected, graph_nodes, model)
        res.rejected = list(merged.values()) + unmatched
    else:
        logged, _ = attribute_log(parsed.rejected, graph_nodes, model)
        resolved = resolve_record(by_ep, model, set(logged), EP_NAME)
        nodes = {name: op for ns in resolved.values() for name, op in ns}
        merged, res.log_only = attribute_log(parsed.rejected, nodes, model)
        for ep, ns in resolved.items():
            if ep == EP_NAME:
                continue
            for name, op in ns:
                r = merged.pop(name, None) or RejectedNode(name, reason=NO_REASON)
                r.op_type, r.ep = op, ep
                res.rejected.append(r)
        res.log_only += list(merged.values())      # the log named them; the record has them on QNN
    order = {name: k for k, name in enumerate(graph_nodes)}
    res.rejected.sort(key=lambda r: order.get(r.name, len(order)))     # graph order
    for r in res.rejected:
        r.index = index.get(r.name)
    res.findings += failure_findings(res, parsed, model)


def _names(nodes: list[RejectedNode], limit: int = 8) -> str:
    return cut_text(nodes, limit, render=lambda r: f"{r.name} ({r.op_type or r.qnn_type})")


def failure_findings(res: PrepareResult, parsed: EpLog, model: onnx.ModelProto) -> list[Finding]:
    out: list[Finding] = []
    dyn = dynamic_dims(model)
    for kind, name, dims in dyn:
        why = ("a dynamic input makes the EP reject every node" if kind == "input"
               else "may be why nodes were rejected")
        out.append(Finding("sim.dynamic_dim", f"{kind} {name!r} has dynamic dims "
                           f"[{', '.join(dims)}]: the HTP needs static shapes ({why}); "
                           f"{STATIC_SHAPES_HINT}",
                           Severity.ERROR if kind == "input" else Severity.WARNING,
                           subject=name))
    if any("Cannot get shape" in r for r in parsed.reasons) and not dyn:
        out.append(Finding("sim.dynamic_dim", "the EP could not get a static shape for some "
                           f"tensors; {STATIC_SHAPES_HINT}", Severity.ERROR))
    explained = [r for r in res.rejected if r.reason != NO_REASON]
    silent = [r for r in res.rejected if r.reason == NO_REASON]
    dyn_input = any(f.severity == Severity.ERROR for f in out)
    kept, more = shown(explained, MAX_NODE_FINDINGS)     # graph order: the first ones first
    for r in kept:
        out.append(Finding("sim.rejected", f"{res.soc.name} HTP rejected {r.describe()}",
                           Severity.ERROR, subject=r.name))
    if more:
        out.append(Finding("sim.rejected", f"+{more} more rejected node(s): "
                           f"{_names(explained[MAX_NODE_FINDINGS:])} (full list in the JSON "
                           "report)", Severity.ERROR))
    if silent:
        note = "the dynamic input dims above are the likely cause" \
            if dyn_input and not explained else NO_REASON
        out.append(Finding("sim.rejected", f"{len(silent)} node(s) not on the {res.soc.name} "
                           f"HTP: {_names(silent)}; {note}", Severity.ERROR))
    for op_type, count, reason in parsed.unit_failures:
        out.append(Finding("sim.validation", f"{count} {op_type} node(s) failed the EP's "
                           f"validation: {reason}", Severity.WARNING, subject=op_type))
    if res.error and "NHWC format" in res.error:
        out.append(Finding("sim.nhwc", "the EP's NHWC layout pass inserted a node the HTP then "
                           "refused; this usually means float (unquantized) weights or ops "
                           f"on an HTP without FP16. Original error: {res.error}",
                           Severity.ERROR))
    if not out:
        out.append(Finding("sim.prepare", f"prepare for {res.soc.name} failed: {res.error}",
                           Severity.ERROR))
    return out
