"""Stage `dlc_convert` (route: dlc): ``qairt-converter`` on the pinned model: its input
dims, integer input dtypes kept, ``dlc:`` layouts and ``preserve_io`` only where the
manifest asks, the AIMET encodings (``--quantization_overrides``: on the converter, as
the formats page says); every flag spelled the way this SDK's converter lists it
(``qnn_ci.sdk.dlc_cmd``). Writes the float DLC ``<export>.dlc``.

An op without a translation names the node and the op; a flag this SDK's era does not
know names the flag and the manifest key; anything else gives the command and the
log's last lines. Artefacts: ``dlc``, ``log``. Data: ``argv``, ``sdk_version``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from qnn_ci.engine.results import Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.sdk.locate import DLC_CONVERTER
from qnn_ci.stages import dlc_common
from qnn_ci.stages.dry_run import prequantized_check
from qnn_ci.stages.sdk_common import mark_transient


class DlcConvertStage(dlc_common.DlcStage):
    name = "dlc_convert"
    # encodings applies only with quantization.overrides (a need not planned is ignored)
    needs = ("static_shapes", "encodings")
    gates = ("matches_original",)     # nothing is converted before the surgery is checked
    settings = ("inputs", "quantization", "sdk", "dlc")
    tools = (DLC_CONVERTER,)

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.sdk.dlc_cmd import build_dlc_convert_argv
        from qnn_ci.sdk.dlc_run import run_dlc_step
        from qnn_ci.sdk.model_lib import library_name

        export = ctx.export
        refused, _ = prequantized_check(self.name, ctx, calibration=True)
        if refused is not None:
            return refused
        sdk = self.sdk(ctx)
        help_, unread = dlc_common.tool_help(ctx, sdk, DLC_CONVERTER, self.name)
        shapes = ctx.upstream["static_shapes"]
        model = Path(shapes.artefacts["model"])
        out = ctx.workdir / f"{library_name(export.name)}.dlc"
        cmd = build_dlc_convert_argv(export, model, out, help_, tool=sdk.tool(DLC_CONVERTER),
                                     graph_inputs=shapes.data.get("inputs"))
        step = run_dlc_step(cmd.argv, sdk=sdk, tool=DLC_CONVERTER, stage=self.name,
                            workdir=ctx.workdir, out_dlc=out, timeout=export.sdk.timeout_s,
                            model=model, help_read=help_ is not None)
        findings = ([unread] if unread else []) + step.findings
        findings += dlc_common.notes(self.name, cmd.notes, Severity.INFO)
        findings += dlc_common.notes(self.name, cmd.warnings, Severity.WARNING)
        artefacts = {"log": str(step.run.log_path)}
        if step.output is not None:
            artefacts["dlc"] = str(step.output)
        summary = first_error(findings) or (
            f"{out.name} written by {DLC_CONVERTER} ({sdk.describe()}) in "
            f"{step.run.duration_s:.1f} s")
        return mark_transient(dlc_common.with_sdk_version(StageResult(
            self.name, status_of(findings), summary, findings,
            properties={"converter_argv": shlex.join(cmd.argv),
                        "duration_s": round(step.run.duration_s, 3)},
            artefacts=artefacts,
            data={"argv": cmd.argv, "preserved": cmd.preserved}), sdk.version), step.run)
