"""Stage `dlc_fp16_gate` (route: dlc): no ``Float_16`` tensor in the quantized DLC when
``target.soc`` has no FP16 (``qnn_ci.tables``: v68) — there the host's
``qnn-context-binary-generator`` aborts (SIGABRT). Each FP16 tensor is one finding
naming it and the op that writes (else reads) it; read from ``qairt-dlc-info``, whose
tensors carry their data types (a dump that leaves some tensors' types out cannot
prove "no FP16": an error on an SoC without FP16, a warning otherwise; weights printed
without a type are not counted, an FP16 op shows in the tensor it writes).
"""

from __future__ import annotations

import json
from typing import Any

from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import dlc_common
from qnn_ci.tables import get_soc
from qnn_ci.util.listing import cut_text


class DlcFp16GateStage(dlc_common.DlcStage):
    name = "dlc_fp16_gate"
    needs = ("dlc_quantize",)
    settings = ("target",)

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        return {}                     # reads dlc_quantize's files only

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.sdk.fp16_audit import why_fp16_fails

        export = ctx.export
        info = dlc_common.dlc_info_of(ctx)
        dlc = ctx.upstream["dlc_quantize"].artefacts.get("dlc") or "the DLC"
        name = dlc.rsplit("/", 1)[-1]
        soc = get_soc(export.target.soc, file=export.manifest, line=export.line,
                      key="target.soc") if export.target.soc else None
        fp16 = info.fp16_tensors()
        # an FP16 op writes an FP16 tensor: every op output and graph I/O must be typed
        # (a weight printed without its type, as some layouts do, proves nothing either way)
        written = {o for op in info.ops for o in op.outputs} | set(info.inputs) | \
            set(info.outputs)
        untyped = [t.name for t in info.tensors.values() if t.data_type is None
                   and t.kind != "STATIC" and (t.name in written or t.kind is not None)]
        findings: list[Finding] = []
        if not info.tensors:
            findings.append(Finding("fp16.unreadable", f"qairt-dlc-info lists no tensor of "
                                    f"{name}, so zero FP16 cannot be confirmed"))
        if untyped:
            lacks = soc is not None and not soc.fp16
            findings.append(Finding(
                "fp16.incomplete", f"{name}: qairt-dlc-info gives no data type for "
                f"{len(untyped)} of {len(info.tensors)} tensor(s) ({cut_text(untyped, 5)}), so "
                "the FP16 audit is incomplete" + (f" and {soc.name} has no FP16"
                                                  if lacks and soc else ""),
                Severity.ERROR if lacks or soc is None else Severity.WARNING))
        if soc is None:
            findings.append(Finding("fp16.no_soc", f"{len(fp16)} FP16 tensor(s); no target.soc "
                                    "in the manifest, so nothing is gated", Severity.WARNING))
        elif fp16 and not soc.fp16:
            reason = why_fp16_fails(soc)
            for t in fp16:
                ops = info.ops_of(t.name)
                by = f", {'written' if t.name in ops[0].outputs else 'read'} by op " \
                    f"{ops[0].name} ({ops[0].type})" if ops else ""
                findings.append(Finding("fp16.tensor", f"tensor {t.name} ({t.raw_type}{by}) in "
                                        f"{name} is FLOAT_16; {reason}", Severity.ERROR,
                                        subject=t.name))
        elif soc is not None:
            support = "executes FP16" if soc.fp16 else "has no FP16"
            findings.append(Finding("fp16.count", f"{name}: {len(fp16)} FP16 tensor(s) of "
                                    f"{len(info.tensors)}; {soc.name} (HTP {soc.arch_name}) "
                                    f"{support}", Severity.INFO))
        failed = any(f.severity == Severity.ERROR for f in findings)
        if failed and fp16 and soc is not None and not soc.fp16:
            summary = (f"{len(fp16)} FP16 tensor(s) of {len(info.tensors)} in {name}: "
                       f"{soc.name} (HTP {soc.arch_name}) has no FP16, the context binary "
                       "build would abort")
        else:
            where = f"{soc.name}, HTP {soc.arch_name}" if soc else "no target SoC"
            summary = first_error(findings) or \
                f"{len(fp16)} FP16 tensor(s) of {len(info.tensors)} ({where})"
        report = ctx.workdir / "dlc_fp16_gate.json"
        report.write_text(json.dumps({
            "soc": soc.name if soc else None, "htp_arch": soc.arch_name if soc else None,
            "fp16_supported": soc.fp16 if soc else None,
            "fp16_tensors": [t.name for t in fp16], "untyped": untyped,
            "findings": [f.to_dict() for f in findings]}, indent=2), "utf-8")
        return StageResult(
            self.name, status_of(findings), summary, findings,
            properties={"fp16_tensors": len(fp16), "soc": soc.name if soc else "",
                        "htp_arch": soc.arch_name if soc else ""},
            artefacts={"report": str(report)},
            data={"fp16_tensors": [t.name for t in fp16], "total_tensors": len(info.tensors)})
