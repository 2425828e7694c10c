"""Stage `dry_run`: ``qnn-onnx-converter --dry_run`` on the pinned model.

Seconds instead of a full quantization pass, and it names unsupported ops,
attributes, inputs and outputs first. Passes only when the tool exits 0 AND
lists no problem rows (a dry run exits 0 even when it lists some).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.stage import StageContext
from qnn_ci.sdk.locate import CONVERTER
from qnn_ci.stages.sdk_common import (
    ConverterStage,
    mark_transient,
)

log = logging.getLogger(__name__)


def _op_types(model: Path) -> dict[str, str]:
    import onnx  # not at import: cached runs need no onnx

    from qnn_ci.sdk.dry_run import node_op_types

    try:
        return node_op_types(onnx.load(str(model), load_external_data=False))
    except Exception as exc:      # only the op names in messages are at stake
        log.info("could not read %s for op types: %s", model, exc)
        return {}


def prequantized_check(stage: str, ctx: StageContext, *, calibration: bool
                       ) -> tuple[StageResult | None, list[Finding]]:
    """An already-quantized pinned model (``qnn_ci.model.prequantized``): a FAILED result
    when the converter would quantize it again (QOperator / dynamic always; QDQ
    when given the calibration list), else the findings to add (a QDQ model in a
    dry run: a warning that convert will refuse it)."""
    from qnn_ci.model.prequantized import QDQ, detect_file

    found = detect_file(Path(ctx.upstream["static_shapes"].artefacts["model"]))
    if not found.quantized:
        return None, []
    text = f"{ctx.export.model.name}: {found.message('converter', calibration=calibration)}"
    if found.kind == QDQ and not calibration:
        return None, [Finding("model.prequantized", f"{text} (the convert stage, which "
                              "passes the calibration list, refuses it)", Severity.WARNING)]
    return StageResult(stage, Status.FAILED, text,
                       [Finding("model.prequantized", text, Severity.ERROR)],
                       properties={"prequantized": found.kind},
                       data={"prequantized": found.to_dict()}), []


class DryRunStage(ConverterStage):
    name = "dry_run"
    settings = ("inputs", "quantization", "target", "sdk")
    needs = ("static_shapes",)
    gates = ("matches_original",)     # nothing is converted before the surgery is checked
    version = 2                       # 2: an already-quantized model is refused

    def run(self, ctx: StageContext) -> StageResult:
        export = ctx.export
        # the converter's modules: only when a stage runs (a cached run needs none)
        from qnn_ci.sdk.convert import explain_failure
        from qnn_ci.sdk.converter_cmd import build_convert_argv
        from qnn_ci.sdk.toolrun import run_tool

        refused, early = prequantized_check(self.name, ctx, calibration=False)
        if refused is not None:
            return refused
        ready = self.prepare(ctx)
        if isinstance(ready, StageResult):
            return ready
        sdk, help_, model = ready
        shapes = ctx.upstream["static_shapes"]
        argv = build_convert_argv(export, model, None, ctx.workdir / "dry_run.cpp", help_.flags,
                                  dry_run=True, graph_inputs=shapes.data.get("inputs"),
                                  tool=sdk.tool(CONVERTER))
        run = run_tool(argv, sdk=sdk, workdir=ctx.workdir, log_name="dry_run",
                       timeout=export.sdk.timeout_s)
        from qnn_ci.sdk.dry_run import fill_ops, parse_dry_run  # onnx: only when it runs

        report = parse_dry_run(run.output)
        if any(not p.op for p in report.problems):
            fill_ops(report, _op_types(model))
        findings = [Finding("dry_run.unsupported", p.message(), Severity.ERROR, p.layer or None)
                    for p in report.problems]
        if not run.ok:
            message, node, _op = explain_failure(run, model)
            findings.append(Finding("dry_run.exit", message, Severity.ERROR, node))
        findings += early
        findings += [Finding("dry_run.row", f"dry-run table row not understood: {row}",
                             Severity.WARNING) for row in report.unrecognised_rows]
        if run.ok and not report.clean and not report.table:
            findings.append(Finding(
                "dry_run.format", "neither the problem table nor the 'have been evaluated' "
                f"line was found in the dry-run log ({run.log_path}); nothing was reported "
                "as unsupported", Severity.WARNING))
        passed = report.passed(run.exit_code) and run.ok
        if passed:
            summary = f"dry run clean ({sdk.describe()})"
        elif report.problems:
            first = report.problems[0]
            summary = (f"dry run lists {len(report.problems)} problem(s), first: "
                       f"{first.message()}")
        else:
            summary = findings[0].message.splitlines()[0] if findings else "dry run failed"
        return mark_transient(StageResult(
            self.name, Status.PASSED if passed else Status.FAILED, summary, findings,
            properties={"sdk_version": sdk.version or "", "problems": len(report.problems),
                        "exit_code": run.exit_code, "log": str(run.log_path)},
            artefacts={"log": str(run.log_path)},
            data={"sdk_version": sdk.version, "argv": argv, "exit_code": run.exit_code,
                  "problems": [asdict(p) for p in report.problems]},
        ), run)
