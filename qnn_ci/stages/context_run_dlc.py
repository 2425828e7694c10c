"""``context_run`` on the DLC route: run the context binary built on the host
(``dlc_context_binary``) on the board exactly as the classic route runs the board-built
one (``qnn-net-run --retrieve_context <bin> --backend libQnnHtp.so [--config_file ...]``,
latency and load time measured the same way), and judge it.

There is no ``.so`` on this route, so no CPU-backend reference: the outputs are held to
the export's thresholds against fp32 onnxruntime (the pinned model, run on the host on
the same held-out samples); the property ``reference`` says so. Inputs go to the board
in the DLC's layout (the graph inputs' dims ``qairt-dlc-info`` prints) and outputs come
back in ONNX order; with ``native_outputs`` the output types and scale/offset come from
the same dump.

Per layer, nothing is diagnosed on the board: ``--debug`` cannot be combined with
``--retrieve_context``, and the online-prepare run that could dump layers (``qnn-net-run
--model libQnnModelDlc.so --dlc_path``) is not one qnn-ci makes; ``qnn-ci sim
--diagnose`` (the HTP simulator, on the host) is the per-layer diagnosis.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import board_common, dlc_common

if TYPE_CHECKING:
    from qnn_ci.boards.native_outputs import NativeType
    from qnn_ci.boards.result_files import ExpectedOutput
    from qnn_ci.sdk.dlc_info import DlcInfo

REFERENCE = "fp32 onnxruntime (pinned model, on the host)"
NO_LAYERS = ("on the DLC route there is no .so and --debug cannot be combined with "
             "--retrieve_context: no per-layer diagnosis on the board; run qnn-ci sim "
             "--diagnose")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def _vtuple(text: str | None) -> tuple[int, int, int] | None:
    m = _VERSION.search(text or "")
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def native_types_from_info(info: DlcInfo, counts: dict[str, int | None]
                           ) -> tuple[dict[str, NativeType], list[ExpectedOutput],
                                      list[Finding]]:
    """For ``native_outputs``: each output's type and scale/offset as the DLC info
    prints them, the native files expected, an error per output that cannot be read."""
    from qnn_ci.boards.native_outputs import NativeType, storage_dtype
    from qnn_ci.boards.result_files import ExpectedOutput
    from qnn_ci.compare.outputs import match_names, sanitize

    app_read = {t.name: t for t in info.io_tensors() if t.name in set(info.outputs)}
    found = match_names(list(counts), app_read)
    types: dict[str, NativeType] = {}
    findings: list[Finding] = []
    for name in counts:
        t = app_read.get(found.get(name, ""))
        why = None
        if t is None or t.data_type is None:
            why = "qairt-dlc-info gives no data type for it"
        elif storage_dtype(t.data_type) is None:
            why = f"{t.raw_type} has no numeric storage qnn-ci can read"
        elif t.is_fixed_point and (t.encoding is None or t.encoding.per_axis
                                   or not (t.encoding.scale or 0) > 0
                                   or t.encoding.offset is None
                                   or not float(t.encoding.offset).is_integer()):
            why = f"{t.raw_type} without one scale/offset encoding in qairt-dlc-info"
        if why is not None or t is None or t.data_type is None:
            findings.append(Finding("board.native_type", f"native_outputs: output {name}: "
                                    f"{why}; compare float outputs instead (native_outputs: "
                                    "false)", subject=name))
            continue
        dtype = storage_dtype(t.data_type)
        assert dtype is not None
        enc = t.encoding if t.is_fixed_point else None
        types[name] = NativeType(t.name, t.data_type, dtype,
                                 enc.scale if enc else None,
                                 int(enc.offset) if enc and enc.offset is not None else None)
    expected = [ExpectedOutput(n, sanitize(n), c, types[n].dtype.str if n in types else None)
                for n, c in counts.items()]
    return types, expected, findings


def run_dlc(stage: str, ctx: StageContext) -> StageResult:
    from qnn_ci.boards.layout import board_inputs, layout_from_dims, outputs_to_onnx_order
    from qnn_ci.boards.native_outputs import dequantize_outputs
    from qnn_ci.boards.reference import write_reference_outputs
    from qnn_ci.boards.result_files import ExpectedOutput
    from qnn_ci.calibration.input_list import write_input_list
    from qnn_ci.calibration.sources import Expected
    from qnn_ci.compare import compare_sets, load_output_set, metric_properties, sanitize

    export, board = ctx.export, board_common.the_board(ctx)
    mismatch = board_common.soc_mismatch(export, board)
    if mismatch:
        return board_common.soc_mismatch_result(stage, board, mismatch)
    built, cal = ctx.upstream["dlc_context_binary"], ctx.upstream["calibration"]
    shapes = ctx.upstream["static_shapes"]
    binary = Path(built.artefacts["binary"])
    info = dlc_common.dlc_info_of(ctx)
    inputs = [Expected(n, i["dtype"], tuple(i["shape"])) for n, i in cal.data["inputs"].items()]
    names = [i.name for i in inputs]
    which, samples, findings = board_common.board_samples(cal, names)
    outputs = shapes.data.get("outputs") or []
    out_shapes = {o["name"]: tuple(o["shape"]) if o.get("shape") else None for o in outputs}
    io = {t.name: list(t.dims) for t in info.io_tensors() if t.dims is not None}
    layout = layout_from_dims(io, {i.name: i.shape for i in inputs}, out_shapes,
                              f"qairt-dlc-info of {Path(info.source).name}")
    findings += layout.findings
    board_list = ctx.workdir / "board_input_list.txt"
    write_input_list(board_list,
                     board_inputs(samples, inputs, layout, ctx.workdir / "board_inputs"), names)
    counts = {o["name"]: math.prod(o["shape"]) if o.get("shape") else None for o in outputs}
    expected_files = [ExpectedOutput(n, sanitize(n), c) for n, c in counts.items()]
    native = export.native_outputs
    types: dict[str, NativeType] = {}
    if native:
        types, expected_files, found = native_types_from_info(info, counts)
        findings += found
    soc = board_common.export_soc(export, board)
    graphs = list(built.data.get("graphs") or [])
    nr = board_common.run_context(
        ctx, stage, board, binary, input_list=board_list, names=names, native=native,
        expected=expected_files, htp_config=board_common.graphs_config_writer(export, soc, graphs))
    if isinstance(nr, StageResult):
        return nr
    findings += nr.findings
    built_version = (built.data.get("context_info") or {}).get("qnn_version")
    runtime = nr.board_version.version if nr.board_version else None
    have, run = _vtuple(built_version), _vtuple(runtime)
    if have is not None and run is not None and have > run:
        findings.append(Finding(
            "context.newer_than_runtime", f"{binary.name} was built on the host with QNN "
            f"{built_version}, newer than board {board.name}'s runtime {runtime}: the load "
            "fails with error 5000; build with the board's QNN (sdk.root) or update the "
            "board's runtime", subject=binary.name))
    properties = board_common.run_properties(nr) | {
        "binary": binary.name, "built_on": "host", "reference": REFERENCE,
        "sample_source": which, "layout": layout.describe(),
        "output_files": "native" if native else "float"}
    properties["sdk_version"] = built.data.get("sdk_version") or properties["sdk_version"]
    latency, load, profile = board_common.context_latency(nr, ctx.workdir)
    properties |= latency
    data: dict[str, Any] = {"board_run": nr.to_dict(), "reference": REFERENCE}
    summary = first_error(findings)
    ctx_dir = nr.output_dir("htp")
    artefacts = {"board_input_list": str(board_list)}
    if ctx_dir is not None and nr.reachable:
        if native:
            dequantize_outputs(ctx_dir, types)
        outputs_to_onnx_order(ctx_dir, out_shapes, layout)
        truth_dir = write_reference_outputs(Path(shapes.artefacts["model"]), samples, inputs,
                                            ctx.workdir / "out_fp32")
        artefacts["fp32_outputs"] = str(truth_dir)
        expected = {o["name"]: ("float32", tuple(o["shape"]) if o.get("shape") else None)
                    for o in outputs}
        steps = {n: t.encoding.scale for n in counts
                 for t in [info.tensors.get(n) or info.tensors.get(sanitize(n))]
                 if t is not None and t.encoding is not None and t.encoding.scale
                 and not t.encoding.per_axis}
        comp = compare_sets(load_output_set(truth_dir), load_output_set(ctx_dir),
                            export.thresholds, expected=expected, quant_steps=steps)
        findings += [replace(f, message=f"context binary vs {REFERENCE}: {f.message}")
                     for f in comp.findings]
        properties |= metric_properties(comp, "context_vs_fp32", thresholds=export.thresholds)
        data["comparison"] = comp.to_dict()
        if summary is None:
            summary = (f"context binary built on the host, on board {board.name}, "
                       f"{nr.samples} {which} sample(s): vs {REFERENCE} {comp.summary_line()}"
                       + (f"; {nr.latency.describe()}" if nr.latency else "")
                       + (f"; load {load:.1f} ms" if load is not None else ""))
    if summary is not None and any(f.severity == Severity.ERROR and
                                   f.check.startswith("compare.") for f in findings):
        summary += f" ({NO_LAYERS})"
    report = ctx.workdir / "context_run.json"
    report.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    artefacts["report"] = str(report)
    if ctx_dir is not None:
        artefacts["htp_outputs"] = str(ctx_dir)
    if profile is not None:
        artefacts["latency_profile"] = str(profile)
    return board_common.finish(StageResult(
        stage, status_of(findings), summary or "no outputs to compare",
        findings, properties=properties, artefacts=artefacts, data=data), nr)
