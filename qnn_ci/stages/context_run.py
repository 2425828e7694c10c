"""Stage `context_run`: run the context binary the board built (``context_binary``)
the way an application loads it — ``qnn-net-run --retrieve_context <bin> --backend
libQnnHtp.so [--config_file …]`` — on the same inputs as ``htp_vs_cpu``, and judge it.
On the DLC route (``route: dlc``) the binary is the one built on the host
(``dlc_context_binary``) and the reference is fp32 onnxruntime: ``context_run_dlc``.
On an AI Hub board (``transport: ai-hub``) AI Hub runs and profiles the model it
compiled: ``context_run_hub``.

The CPU backend cannot make context binaries, so the reference stays the CPU run of
the ``.so`` (``htp_vs_cpu``'s outputs): the context-binary run is held to the
export's thresholds against it, and compared with the ``.so``'s HTP run (they
should agree: a difference is the binary's own). Latency is measured here too (the
number an application sees) with the same methods as ``htp_vs_cpu``, plus the load
time (the profile's Init stats) where the viewer gives it.

``--debug`` cannot be combined with ``--retrieve_context``: a failure here is not
diagnosed per layer; ``htp_vs_cpu``'s diagnosis (the ``.so`` path) is the one to read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import board_common

AGREE_COSINE = 0.9999       # the binary and the .so on the same HTP: the same graph


class ContextRunStage(board_common.BoardStage):
    name = "context_run"
    needs = ("context_binary", "htp_vs_cpu", "calibration", "static_shapes", "convert")
    # route: dlc -- the host-built binary, the DLC's I/O dims and types (qairt-dlc-info)
    dlc_needs = ("dlc_context_binary", "calibration", "static_shapes", "dlc_quantize")
    # an AI Hub board: AI Hub's compiled model, the samples, the pinned model (truth)
    hub_needs = ("context_binary", "calibration", "static_shapes")
    runs_on_hub = True
    settings = ("board", "thresholds", "target", "native_outputs", "latency", "htp_config")

    def board_needs(self, export: ExportSpec) -> tuple[str, ...]:
        return self.dlc_needs if export.route == "dlc" else self.needs

    def possible_needs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.needs, *self.dlc_needs, *self.hub_needs,
                                    *self.QDQ_NEEDS)))

    def run(self, ctx: StageContext) -> StageResult:
        if board_common.on_hub(ctx.export, ctx.env):
            from qnn_ci.stages.context_run_hub import run_on_hub

            return run_on_hub(self.name, ctx)
        if ctx.export.route == "dlc":
            from qnn_ci.stages.context_run_dlc import run_dlc

            return run_dlc(self.name, ctx)
        from qnn_ci.boards.layout import board_layout, outputs_to_onnx_order
        from qnn_ci.boards.native_outputs import NativeType, dequantize_outputs, quant_steps
        from qnn_ci.boards.result_files import ExpectedOutput
        from qnn_ci.compare import compare_sets, load_output_set, metric_properties, sanitize

        export, board = ctx.export, board_common.the_board(ctx)
        mismatch = board_common.soc_mismatch(export, board)
        if mismatch:
            return board_common.soc_mismatch_result(self.name, board, mismatch)
        built, so_run = ctx.upstream["context_binary"], ctx.upstream["htp_vs_cpu"]
        cal, shapes = ctx.upstream["calibration"], ctx.upstream["static_shapes"]
        binary = Path(built.artefacts["binary"])
        board_list = Path(so_run.artefacts["board_input_list"])
        names = list(cal.data["inputs"])
        outputs = shapes.data.get("outputs") or []
        out_shapes = {o["name"]: tuple(o["shape"]) if o.get("shape") else None
                      for o in outputs}
        inputs = {n: tuple(i["shape"]) for n, i in cal.data["inputs"].items()}
        net_json = ctx.upstream["convert"].artefacts.get("net_json")
        layout = board_layout(Path(net_json) if net_json else None, inputs, out_shapes)
        counts = {o["name"]: math.prod(o["shape"]) if o.get("shape") else None
                  for o in outputs}
        expected_files = [ExpectedOutput(n, sanitize(n), c) for n, c in counts.items()]
        native = export.native_outputs
        findings: list[Finding] = []
        types: dict[str, NativeType] = {}
        if native:
            types, expected_files, found = board_common.native_expectations(net_json, counts)
            findings += found
        cpp = ctx.upstream["convert"].artefacts.get("cpp")
        config = board_common.htp_config_writer(export, board_common.export_soc(export, board),
                                   Path(cpp) if cpp else None)
        nr = board_common.run_context(ctx, self.name, board, binary, input_list=board_list,
                                      names=names, native=native, expected=expected_files,
                                      htp_config=config)
        if isinstance(nr, StageResult):
            return nr
        findings += nr.findings
        properties = board_common.run_properties(nr) | {
            "binary": binary.name, "layout": layout.describe(),
            "output_files": "native" if native else "float"}
        latency, load, profile = board_common.context_latency(nr, ctx.workdir)
        properties |= latency
        data: dict[str, Any] = {"board_run": nr.to_dict()}
        summary = first_error(findings)
        ctx_dir = nr.output_dir("htp")
        cpu_dir = so_run.artefacts.get("cpu_outputs")
        so_dir = so_run.artefacts.get("htp_outputs")
        if ctx_dir is not None and cpu_dir and so_dir and nr.reachable:
            if native:
                dequantize_outputs(ctx_dir, types)
            outputs_to_onnx_order(ctx_dir, out_shapes, layout)
            expected = {o["name"]: ("float32", tuple(o["shape"]) if o.get("shape") else None)
                        for o in outputs}
            steps = quant_steps(Path(net_json) if net_json else None, out_shapes)
            here = load_output_set(ctx_dir)
            comp = compare_sets(load_output_set(Path(cpu_dir)), here, export.thresholds,
                                expected=expected, quant_steps=steps)
            agree = compare_sets(load_output_set(Path(so_dir)), here,
                                 Thresholds(default={}), expected=expected, quant_steps=steps)
            findings += [_label(f, "context binary vs CPU backend (.so)") for f in comp.findings]
            findings += _agreement(agree)
            properties |= metric_properties(comp, "context_vs_cpu",
                                            thresholds=export.thresholds)
            properties |= metric_properties(agree, "context_vs_so", ("cosine", "max_abs"))
            data |= {"comparison": comp.to_dict(), "vs_so_htp": agree.to_dict()}
            if summary is None:
                worst = agree.worst("cosine")
                summary = (f"context binary on board {board.name}, {nr.samples} sample(s): "
                           f"vs CPU backend {comp.summary_line()}; vs the .so's HTP run "
                           + (f"cosine {worst[0]:.6f}" if worst else "not compared")
                           + (f"; {nr.latency.describe()}" if nr.latency else "")
                           + (f"; load {load:.1f} ms" if load is not None else ""))
        if summary is not None and first_error(findings) and any(
                f.severity == Severity.ERROR and f.check.startswith("compare.")
                for f in findings):
            summary += (" (--debug cannot be combined with --retrieve_context: the per-layer "
                        "diagnosis is htp_vs_cpu's, on the .so)")
        report = ctx.workdir / "context_run.json"
        report.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        artefacts = {"report": str(report)}
        if ctx_dir is not None:
            artefacts["htp_outputs"] = str(ctx_dir)
        if profile is not None:
            artefacts["latency_profile"] = str(profile)
        return board_common.finish(StageResult(
            self.name, status_of(findings), summary or "no outputs to compare",
            findings, properties=properties, artefacts=artefacts, data=data), nr)


def _label(f: Finding, label: str) -> Finding:
    from dataclasses import replace

    return replace(f, message=f"{label}: {f.message}")


def _agreement(agree: Any) -> list[Finding]:
    """A warning per output where the binary and the .so's HTP run disagree."""
    found = []
    for out in agree.outputs:
        values = [s.metrics.value("cosine") for s in out.samples if s.metrics]
        values = [v for v in values if v is not None and not math.isnan(v)]
        if values and min(values) < AGREE_COSINE:
            found.append(Finding(
                "context.disagrees_with_so",
                f"output {out.name}: the context binary and the .so's HTP run disagree "
                f"(worst cosine {min(values):.6f} < {AGREE_COSINE}); the binary was built "
                "with other settings (htp_config) or another QNN than the library run",
                Severity.WARNING, subject=out.name))
    return found
