"""Stage `htp_vs_cpu`: run held-out samples (else a few calibration samples) on
the board's CPU backend (the reference) and HTP backend (the target) with
identical inputs, and compare: HTP vs CPU against the export's thresholds, and
both against the fp32 pinned model in onnxruntime with the accuracy rule (the
HTP must be at least as accurate as the CPU backend, within a tolerance).
A fast wrong answer is the failure this stage exists to catch.

The CPU backend is also held to the thresholds against fp32 onnxruntime: if the
reference is wrong, the conversion (or the data layout on the board) is wrong.
Inputs go to the board in the converter's layout (spatial-first rank-4 tensors,
read from the convert stage's ``_net.json``) and outputs come back in ONNX order.
With ``native_outputs`` both backends write ``<tensor>_native.raw`` in the graph's
own types (from the same ``_net.json``); quantized ones are dequantized with their
scale/offset before anything is compared.

A failed comparison is diagnosed (``diagnosis.enabled``, the default): attribution
from these comparisons, then one ``qnn-net-run --debug`` run of the HTP backend for
the per-layer report (``qnn_ci.diagnose.board``; docs/board-runs.md).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.boards.session import board_session
from qnn_ci.engine.results import Finding, Severity, StageResult, Status, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.errors import ToolError
from qnn_ci.stages import board_common
from qnn_ci.stages.diagnosis_common import guarded, progress_logger

if TYPE_CHECKING:   # numpy (via these) only when the stage runs, not at load
    from qnn_ci.compare import Comparison

log = logging.getLogger(__name__)

FLOAT_EXACT = 1e-5               # CPU-vs-fp32 max |err| / peak below which it ran in float
# Missing / short / NaN output files are already named, per backend and sample,
# by the board run's own checks; the comparison would only repeat them.
_REPEATS = ("compare.missing", "compare.short", "compare.nan_inf")


class HtpVsCpuStage(board_common.BoardStage):
    name = "htp_vs_cpu"
    needs = ("so_load", "calibration", "static_shapes", "convert")
    settings = ("board", "thresholds", "target", "native_outputs", "diagnosis", "latency",
                "htp_config")
    route = "classic"

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.boards.latency_run import request_for
        from qnn_ci.boards.layout import board_inputs, board_layout, outputs_to_onnx_order
        from qnn_ci.boards.native_outputs import NativeType, dequantize_outputs, quant_steps
        from qnn_ci.boards.netrun import run_on_board
        from qnn_ci.boards.reference import write_reference_outputs
        from qnn_ci.boards.result_files import ExpectedOutput
        from qnn_ci.calibration.input_list import write_input_list
        from qnn_ci.calibration.sources import Expected
        from qnn_ci.compare import load_output_set, sanitize
        from qnn_ci.compare.judgement import judge_quantized
        from qnn_ci.transport.base import TransportError

        export, board = ctx.export, board_common.the_board(ctx)
        mismatch = board_common.soc_mismatch(ctx.export, board)
        if mismatch:
            return board_common.soc_mismatch_result(self.name, board, mismatch)
        so_load, cal = ctx.upstream["so_load"], ctx.upstream["calibration"]
        shapes = ctx.upstream["static_shapes"]
        inputs = [Expected(n, i["dtype"], tuple(i["shape"]))
                  for n, i in cal.data["inputs"].items()]
        names = [i.name for i in inputs]
        which, samples, findings = board_common.board_samples(cal, names)
        outputs = shapes.data.get("outputs") or []
        out_shapes = {o["name"]: tuple(o["shape"]) if o.get("shape") else None
                      for o in outputs}
        net_json = ctx.upstream["convert"].artefacts.get("net_json")
        layout = board_layout(Path(net_json) if net_json else None,
                              {i.name: i.shape for i in inputs}, out_shapes)
        findings += layout.findings
        board_list = ctx.workdir / "board_input_list.txt"
        write_input_list(board_list,
                         board_inputs(samples, inputs, layout, ctx.workdir / "board_inputs"),
                         names)
        counts = {o["name"]: math.prod(o["shape"]) if o.get("shape") else None
                  for o in outputs}
        expected_files = [ExpectedOutput(n, sanitize(n), c) for n, c in counts.items()]
        native = export.native_outputs
        types: dict[str, NativeType] = {}
        if native:
            types, expected_files, found = board_common.native_expectations(net_json, counts)
            findings += found
        expected = {o["name"]: ("float32", tuple(o["shape"]) if o.get("shape") else None)
                    for o in outputs}
        cpp = ctx.upstream["convert"].artefacts.get("cpp")
        config = board_common.htp_config_writer(
            export, board_common.export_soc(export, board), Path(cpp) if cpp else None)
        try:
            with board_session(board, ctx.env.environ) as transport:
                nr = run_on_board(transport, board, library=Path(so_load.data["library"]),
                                  input_list=board_list, input_names=names,
                                  workdir=ctx.workdir, native=native,
                                  library_sdk_version=so_load.data.get("sdk_version"),
                                  expected_outputs=expected_files or None,
                                  latency=request_for(export, ctx.env), htp_config=config)
        except (TransportError, ToolError) as exc:
            return board_common.board_error_result(self.name, board, exc)
        findings += nr.findings
        properties = board_common.run_properties(nr) | {
            "sample_source": which, "layout": layout.describe(),
            "output_files": "native" if native else "float"}
        if nr.latency is not None:
            properties |= nr.latency.properties()
        if types:
            properties["native_types"] = ", ".join(f"{n} {t.describe()}"
                                                   for n, t in sorted(types.items()))
        cpu_dir, htp_dir = nr.output_dir("cpu"), nr.output_dir("htp")
        for out_dir in (cpu_dir, htp_dir):
            if out_dir is not None:
                if native:
                    dequantize_outputs(out_dir, types)
                outputs_to_onnx_order(out_dir, out_shapes, layout)
        data: dict[str, Any] = {"board_run": nr.to_dict()}
        summary = first_error(findings)
        diagnose: Any = None
        if cpu_dir is not None and htp_dir is not None and nr.reachable:
            truth_dir = write_reference_outputs(Path(shapes.artefacts["model"]), samples,
                                                inputs, ctx.workdir / "out_fp32")
            cpu, htp = load_output_set(cpu_dir), load_output_set(htp_dir)
            truth = load_output_set(truth_dir)
            # Each output's quantization step tells a near-zero reference from a
            # small real signal.
            steps = quant_steps(Path(net_json) if net_json else None, out_shapes)
            judged = judge_quantized(truth, cpu, htp, export.thresholds, expected=expected,
                                     quant_steps=steps)
            comp = judged.vs_cpu
            findings += _labelled(comp.findings, "HTP vs CPU backend")
            findings += _labelled(judged.cpu_vs_truth.findings,
                                  "CPU backend vs fp32 onnxruntime")
            cpu_float = float_exact(judged.cpu_vs_truth, {
                sanitize(n): t.scale for n, t in types.items() if t.scale is not None})
            findings += _labelled([_advisory(f) if cpu_float else f
                                   for f in judged.rule_findings()], "accuracy rule vs fp32")
            properties["cpu_backend"] = "float" if cpu_float else "quantized"
            properties |= judged.properties("htp", export.thresholds)
            properties["accuracy_rule"] = judged.rule_text() + (
                " (advisory: float CPU backend)" if cpu_float else "")
            data |= judged.data("htp")
            if export.diagnosis.enabled and not (comp.passed and judged.cpu_vs_truth.passed):
                diagnose = _Diagnose(ctx, board, truth=truth, htp=htp, cpu=judged.cpu_vs_truth,
                                     cpu_float=cpu_float, expected=expected, steps=steps,
                                     board_list=board_list, names=names, samples=samples,
                                     inputs=inputs, net_json=net_json,
                                     outputs={n: c for n, c in counts.items()},
                                     library=Path(so_load.data["library"]),
                                     sdk_version=so_load.data.get("sdk_version"),
                                     htp_config=config)
            if summary is None:
                summary = (f"HTP vs CPU on board {board.name}, {nr.samples} {which} "
                           f"sample(s): {comp.summary_line()}; accuracy rule "
                           f"{properties['accuracy_rule']}"
                           + (f"; {nr.latency.describe()}" if nr.latency else ""))
        report = ctx.workdir / "htp_vs_cpu.json"
        report.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        artefacts = {"report": str(report), "board_input_list": str(board_list)}
        profile = ctx.workdir / "latency" / "profile.txt"
        if nr.latency is not None and profile.is_file():
            artefacts["latency_profile"] = str(profile)
        for backend in ("cpu", "htp"):
            out = nr.output_dir(backend)
            if out is not None:
                artefacts[f"{backend}_outputs"] = str(out)
        result = board_common.finish(StageResult(
            self.name, status_of(findings), summary or "no outputs to compare",
            findings, properties=properties, artefacts=artefacts, data=data), nr)
        if diagnose is not None and result.status == Status.FAILED:
            result = guarded(result, diagnose.run)
        return result


class _Diagnose:
    """The board diagnosis of a failed comparison: attribution from the comparisons
    made, then one ``qnn-net-run --debug`` run of the HTP backend on one sample for
    the per-layer report (``qnn_ci.diagnose.board``); artefacts in
    ``<stage folder>/diagnosis``."""

    def __init__(self, ctx: StageContext, board: Any, **parts: Any) -> None:
        self.ctx, self.board, self.p = ctx, board, parts

    def run(self) -> Any:
        from qnn_ci.boards.result_files import ExpectedOutput
        from qnn_ci.compare import compare_sets, sanitize
        from qnn_ci.diagnose.board import (
            board_attribution,
            debug_run,
            diagnose_board,
            load_feeds,
        )

        ctx, p, export = self.ctx, self.p, self.ctx.export
        progress = progress_logger(export.name, HtpVsCpuStage.name, ctx.env.progress)
        # HTP vs fp32 judged by the export's thresholds (the stage's own HTP-vs-fp32
        # comparison carries no bounds: the HTP-vs-CPU one is the gate).
        judged = compare_sets(p["truth"], p["htp"], export.thresholds,
                              expected=p["expected"], quant_steps=p["steps"])
        attribution, detail = board_attribution(judged, p["cpu"], cpu_float=p["cpu_float"],
                                                thresholds=export.thresholds)
        progress(f"attribution {attribution}: {detail}")
        failing = [o.name for o in judged.outputs if any(s.failed for s in o.samples)]
        out_dir = ctx.workdir / "diagnosis"
        float_files = [ExpectedOutput(n, sanitize(n), c) for n, c in p["outputs"].items()]

        def run_debug() -> Any:
            progress("qnn-net-run --debug on the HTP backend, 1 sample")
            with board_session(self.board, ctx.env.environ) as transport:
                return debug_run(transport=transport, board=self.board,
                                 library=p["library"], input_list=p["board_list"],
                                 input_names=p["names"], workdir=out_dir / "board",
                                 expected=float_files or None,
                                 library_sdk_version=p["sdk_version"],
                                 htp_config=p["htp_config"])

        net_json = p["net_json"]
        return diagnose_board(
            run_debug=run_debug, model=Path(ctx.upstream["static_shapes"].artefacts["model"]),
            feeds=load_feeds(p["samples"][0], p["inputs"]),
            net_json=Path(net_json) if net_json else None, thresholds=export.thresholds,
            outputs=failing or list(p["outputs"]), attribution=attribution, detail=detail,
            out_dir=out_dir)


def float_exact(cpu_vs_fp32: Comparison, output_steps: Mapping[str, float] | None = None
                ) -> bool:
    """True when the CPU backend reproduced fp32 onnxruntime to float rounding (every
    |err| <= FLOAT_EXACT x the reference peak): it ran the graph in float, not the
    quantized graph. A quantized run misses by at least half a 16-bit step
    (~1.5e-5 of the peak), float runs by ~1e-7. ``output_steps`` (output file key ->
    scale) are the quantization steps of native outputs: a float run written in a
    quantized output type misses by up to half of that step more."""
    from qnn_ci.compare import sanitize

    steps = dict(output_steps or {})
    checks = []
    for o in cpu_vs_fp32.outputs:
        half_step = 0.5 * steps.get(o.name, steps.get(sanitize(o.name), 0.0))
        for s in o.samples:
            m = s.metrics
            if m is not None:
                rounding = FLOAT_EXACT * max(m.ref_peak, 1e-12)
                checks.append(m.max_abs is not None
                              and m.max_abs <= rounding + half_step * (1 + 1e-6))
    return bool(checks) and all(checks)


def _advisory(f: Finding) -> Finding:
    """The accuracy rule presumes the CPU side ran the same quantized graph (as in
    onnxruntime's QNN EP tests). Against a float CPU run it only measures the
    HTP's own quantization error, so a miss is a warning; the HTP-vs-CPU
    thresholds are the gate."""
    if f.check != "compare.accuracy" or f.severity != Severity.ERROR:
        return f
    return replace(f, severity=Severity.WARNING,
                   message=f"{f.message} (advisory: the CPU backend ran in float, so this "
                           "is the HTP's quantization error itself; the HTP-vs-CPU "
                           "thresholds decide)")


def _labelled(found: list[Finding], label: str) -> list[Finding]:
    """Findings of one comparison, said which comparison they come from; without
    the file problems the board run's own checks already named."""
    return [replace(f, message=f"{label}: {f.message}") for f in found
            if f.check not in _REPEATS]
