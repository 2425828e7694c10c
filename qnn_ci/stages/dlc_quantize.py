"""Stage `dlc_quantize` (route: dlc): ``qairt-quantizer`` on the converter's DLC with
the calibration stage's input list and the same ``quantization:`` keys as the classic
route (bit widths, per-channel, calibration methods, percentile, float fallback), the
integer inputs kept unquantized (``--preserve_io_datatype``, where the SDK lists it),
every flag spelled the way this SDK's quantizer lists it. Writes ``<export>_q.dlc``.

Then ``qairt-dlc-info -i <export>_q.dlc``: its output (artefact ``dlc_info``) is what
``dlc_contract``, ``dlc_fp16_gate``, ``dlc_context_binary`` and ``context_run`` read (a
DLC whose info cannot be read fails here, once).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.sdk.locate import DLC_INFO, DLC_QUANTIZER
from qnn_ci.stages import dlc_common
from qnn_ci.stages.sdk_common import mark_transient


class DlcQuantizeStage(dlc_common.DlcStage):
    name = "dlc_quantize"
    needs = ("dlc_convert", "calibration", "static_shapes")
    gates = ("matches_original",)     # nothing is quantized before the surgery is checked
    settings = ("inputs", "quantization", "sdk")
    tools = (DLC_QUANTIZER, DLC_INFO)

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.sdk.dlc_cmd import build_dlc_quantize_argv
        from qnn_ci.sdk.dlc_info import parse_dlc_info
        from qnn_ci.sdk.dlc_run import run_dlc_info, run_dlc_step

        export = ctx.export
        sdk = self.sdk(ctx)
        help_, unread = dlc_common.tool_help(ctx, sdk, DLC_QUANTIZER, self.name)
        converted = ctx.upstream["dlc_convert"]
        cal = ctx.upstream["calibration"]
        in_dlc = Path(converted.artefacts["dlc"])
        out = ctx.workdir / f"{in_dlc.stem}_q.dlc"
        input_list = Path(cal.artefacts["input_list"]) if cal.artefacts.get("input_list") \
            else None
        cmd = build_dlc_quantize_argv(
            export, in_dlc, out, input_list, help_, tool=sdk.tool(DLC_QUANTIZER),
            graph_inputs=ctx.upstream["static_shapes"].data.get("inputs"),
            kept_by_converter=converted.data.get("preserved") or ())
        step = run_dlc_step(cmd.argv, sdk=sdk, tool=DLC_QUANTIZER, stage=self.name,
                            workdir=ctx.workdir, out_dlc=out, timeout=export.sdk.timeout_s,
                            help_read=help_ is not None)
        findings = ([unread] if unread else []) + step.findings
        findings += dlc_common.notes(self.name, cmd.notes, Severity.INFO)
        findings += dlc_common.notes(self.name, cmd.warnings, Severity.WARNING)
        artefacts = {"log": str(step.run.log_path)}
        data: dict[str, object] = {"argv": cmd.argv, "preserved": cmd.preserved}
        duration = step.run.duration_s
        run = step.run
        if step.ok and step.output is not None:
            artefacts["dlc"] = str(step.output)
            text, info_run = run_dlc_info(sdk, step.output, ctx.workdir,
                                          timeout=export.sdk.timeout_s)
            artefacts["info_log"] = str(info_run.log_path)
            duration += info_run.duration_s
            if text is None:
                run = info_run
                findings.append(Finding("dlc_quantize.info", f"{DLC_INFO} could not read "
                                        f"{step.output.name}: {info_run.describe(5)}"))
            else:
                info = parse_dlc_info(text.read_text(encoding="utf-8", errors="replace"),
                                      source=str(text))
                artefacts["dlc_info"] = str(text)
                if info.empty:
                    findings.append(Finding(
                        "dlc_quantize.info", f"{DLC_INFO} printed nothing qnn-ci can read for "
                        f"{step.output.name} (no op table, no tensors, no metadata; see "
                        f"{text}): nothing downstream can check it"))
                data |= {"graph_names": info.graph_names, "inputs": info.inputs,
                         "outputs": info.outputs, "tensors": len(info.tensors)}
                if info.sdk_version and sdk.version is None:
                    sdk.version = info.sdk_version
        summary = first_error(findings) or (
            f"{out.name} written by {DLC_QUANTIZER} ({sdk.describe()}) in "
            f"{duration:.1f} s; {DLC_INFO} lists {data.get('tensors', 0)} tensor(s)")
        return mark_transient(dlc_common.with_sdk_version(StageResult(
            self.name, status_of(findings), summary, findings,
            properties={"quantizer_argv": shlex.join(cmd.argv),
                        "duration_s": round(duration, 3)},
            artefacts=artefacts, data=data), sdk.version), run)
