"""Stage `fp16_gate`: count FP16 tensors in the converter's output (generated
source AND ``_net.json``) and fail when the target SoC has no FP16 — on v68 an
FP16 op makes the context binary build abort (exit 134).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.stage import Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.tables import get_soc

log = logging.getLogger(__name__)


class Fp16GateStage(Stage):
    name = "fp16_gate"
    settings = ("target",)
    needs = ("convert",)
    marker = "qnn_sdk"
    route = "classic"

    def run(self, ctx: StageContext) -> StageResult:
        # the generated-source and _net.json readers: only when the stage runs
        from qnn_ci.sdk.fp16_audit import Fp16Report, audit_fp16, gate_fp16, incomplete_text

        export = ctx.export
        convert = ctx.upstream["convert"]
        findings: list[Finding] = []
        reports: list[Fp16Report] = []
        for key in ("cpp", "net_json"):
            path = convert.artefacts.get(key)
            if not path or not Path(path).is_file():
                findings.append(Finding("fp16.missing", f"convert produced no {key} file "
                                        f"({path or 'not listed'}); it was not audited",
                                        Severity.WARNING, subject=key))
                continue
            try:
                reports.append(audit_fp16(Path(path)))
            except UserError as exc:      # e.g. a _net.json cut off mid-way: not JSON
                findings.append(Finding("fp16.incomplete", f"{exc.oneline()}; the FP16 "
                                        f"audit is incomplete", Severity.ERROR, subject=key))
        soc = None
        if export.target.soc:
            soc = get_soc(export.target.soc, file=export.manifest, line=export.line,
                          key="target.soc")
        names = sorted({n for r in reports for n in r.tensors})
        total = max((r.total_tensors for r in reports), default=0)
        if not reports:
            findings.append(Finding("fp16.unreadable", "neither the generated source nor the "
                                    "_net.json could be audited", Severity.ERROR))
        elif soc is None:
            findings += [Finding("fp16.incomplete", incomplete_text(r), Severity.ERROR,
                                 subject=Path(r.source).name) for r in reports if r.incomplete]
            findings.append(Finding("fp16.no_soc", f"{len(names)} FP16 tensor(s); no "
                                    f"target.soc in the manifest, so nothing is gated",
                                    Severity.WARNING))
            findings += [Finding("fp16.parse", f"{Path(r.source).name}: {p}",
                                 Severity.WARNING, subject=Path(r.source).name)
                         for r in reports for p in r.problems]
        else:
            per_file = [f for r in reports for f in gate_fp16(r, soc)]
            # The same tensor in source and _net.json is one problem, not two.
            seen: set[str] = set()
            for f in per_file:
                if f.check == "fp16.tensor":
                    if f.subject in seen:
                        continue
                    seen.add(f.subject or "")
                findings.append(f)

        failed = any(f.severity == Severity.ERROR for f in findings)
        where = f"{soc.name}, HTP {soc.arch_name}" if soc else "no target SoC"
        incomplete = [f for f in findings if f.check == "fp16.incomplete"]
        if failed and names and soc is not None and not soc.fp16:
            summary = (f"{len(names)} FP16 tensor(s) of {total}: {soc.name} (HTP "
                       f"{soc.arch_name}) has no FP16, the context binary build would abort")
        elif incomplete:
            summary = incomplete[0].message
        elif failed:
            summary = next(f.message for f in findings if f.severity == Severity.ERROR)
        else:
            summary = f"{len(names)} FP16 tensor(s) of {total} ({where})"
        report_path = ctx.workdir / "fp16_gate.json"
        report_path.write_text(json.dumps({
            "soc": soc.name if soc else None, "htp_arch": soc.arch_name if soc else None,
            "fp16_supported": soc.fp16 if soc else None, "fp16_tensors": names,
            "files": [r.to_dict() for r in reports],
            "findings": [f.to_dict() for f in findings]}, indent=2), "utf-8")
        return StageResult(
            self.name, Status.FAILED if failed else Status.PASSED, summary, findings,
            properties={"fp16_tensors": len(names), "soc": soc.name if soc else "",
                        "htp_arch": soc.arch_name if soc else ""},
            artefacts={"report": str(report_path)},
            data={"fp16_tensors": names, "total_tensors": total},
        )

