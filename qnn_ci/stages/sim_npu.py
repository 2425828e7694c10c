"""Stage `sim_npu`: will the export run on the target SoC's HTP? Quantize the
pinned model with the export's calibration data (QDQ, the manifest's
bitwidths), prepare it on onnxruntime-qnn's HTP graph preparer for the SoC's
numeric id with CPU fallback disabled, read the SoC/arch back from the context
binary, and audit the QNN graph for FP16. No board, no SDK."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.cache import file_digest
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages.sim_common import SimStage

if TYPE_CHECKING:
    from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)


class SimNpuStage(SimStage):
    name = "sim_npu"
    settings = ("quantization", "target")
    needs = ("static_shapes", "calibration")
    gates = ("matches_original",)     # nothing is quantized before the surgery is checked
    version = 3                       # 2: pre-quantized models refused; float overrides kept float
    #                                   3: the context binary's facts (context.* properties)

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        fp = super().fingerprint(ctx)
        overrides = ctx.export.quantization.overrides
        if overrides is not None and Path(overrides).is_file():
            fp["overrides"] = file_digest(Path(overrides))
        return fp

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.sim.check import check_htp
        from qnn_ci.sim.ep import sim_target
        from qnn_ci.sim.prepare import NODES_COUNTED
        from qnn_ci.sim.quantize import QuantSettings
        from qnn_ci.sim.samples import inputs_from_data, load_samples
        from qnn_ci.sim.shared_quantize import shared_quantizer

        export = ctx.export
        soc = sim_target(export.target.soc, file=export.manifest, line=export.line,
                         key="target.soc")
        model = Path(ctx.upstream["static_shapes"].artefacts["model"])
        cal = ctx.upstream["calibration"]
        samples = load_samples(Path(cal.artefacts["input_list"]),
                               inputs_from_data(cal.data["inputs"]))
        report = check_htp(model, ctx.workdir, soc, samples,
                           QuantSettings.from_spec(export.quantization),
                           quantizer=shared_quantizer(ctx.env, export.name))
        p, q = report.prepare, report.quantize
        artefacts: dict[str, str] = {}
        context_props: dict[str, Any] = {}
        if p is not None and p.prepared and p.ctx_binary is not None:
            context_props, context_findings, info_path = _context_facts(
                ctx.workdir, p.ctx_binary, model, soc)
            report.findings += context_findings
            if info_path is not None:
                artefacts["context_info"] = str(info_path)
        report_path = ctx.workdir / "sim_npu.json"
        report_path.write_text(json.dumps(report.to_dict(), indent=2), "utf-8")
        artefacts["report"] = str(report_path)
        if q is not None:
            artefacts["qdq_model"] = str(q.model)
        if p is not None:
            artefacts["ep_log"] = str(p.ep_log)
            for key, path in (("ctx_model", p.ctx_model), ("ctx_binary", p.ctx_binary),
                              ("qnn_json", p.qnn_json[0] if p.qnn_json else None),
                              ("op_trace", p.op_trace)):
                if path is not None:
                    artefacts[key] = str(path)
        properties: dict[str, Any] = {
            "soc": soc.name, "arch": soc.arch_name, "sim_soc_id": soc.sim_soc_id,
            "nodes_on_htp": p.nodes_on_htp if p else None,
            "nodes_total": p.nodes_total if p else None,
            "constants_folded": q.constants_folded if q else None,
            "durations": {k: round(v, 3) for k, v in report.durations.items()},
        }
        if q is not None and q.shared_from:
            properties["quantization_shared_from"] = q.shared_from
        if p is not None and p.context is not None:
            properties["binary_soc_type"] = p.context.soc_type
            properties["binary_arch"] = p.context.arch
        properties.update(context_props)
        if p is not None and p.rejected:
            # every node not on the HTP: nodes_rejected (a reason logged) + nodes_other
            properties["nodes_not_on_htp"] = len(p.rejected)
            codes = sorted({r.error_code for r in p.rejected if r.error_code is not None})
            if codes:
                properties["qnn_error_codes"] = codes
        if p is not None and p.nodes_total is not None:
            # on HTP + rejected + other = total, all from the session's assignment record
            properties["nodes_counted"] = NODES_COUNTED
            properties["nodes_rejected"] = p.nodes_rejected
            properties["nodes_other"] = p.nodes_other
            properties["nodes_inserted_by_ep"] = len(p.inserted)
        findings = report.findings
        status = Status.PASSED if report.passed else Status.FAILED
        summary = report.summary_line()
        folded = q.constants_folded if q else 0
        if folded:
            summary += f"; {folded} Constant weight(s) folded first"
        warn = sum(f.severity == Severity.WARNING for f in findings)
        if warn:
            summary += f"; {warn} warning(s)"
        return StageResult(self.name, status, summary, findings=findings,
                           properties=properties, artefacts=artefacts,
                           data={"soc": soc.name, "float_model": str(model),
                                 "report": report.to_dict()})


def _context_facts(workdir: Path, binary: Path, model: Path, soc: SocInfo
                   ) -> tuple[dict[str, Any], list[Finding], Path | None]:
    """What the simulator's context binary says it is (``context.*`` properties,
    ``context_info.json``) and ``check_context`` against the target SoC and the pinned
    model's I/O names. An unreadable binary is a WARNING, never the stage's failure."""
    from qnn_ci.errors import UserError
    from qnn_ci.model.onnx_io import model_signature
    from qnn_ci.sdk.context_info import ExpectedTensor, check_context, dumps, read_context_info

    try:
        info = read_context_info(binary)
        signature = model_signature(model)
    except UserError as exc:
        return {}, [Finding("context.unreadable", f"cannot read what the simulator's context "
                            f"binary says it is ({exc.oneline()}); the prepare itself passed",
                            Severity.WARNING, subject=binary.name)], None
    path = workdir / "context_info.json"
    path.write_text(dumps(info), "utf-8")
    expected = [ExpectedTensor(n, None, None, True) for n in signature.inputs] + \
        [ExpectedTensor(n, None, None, False) for n in signature.outputs]
    findings = check_context(info, soc=soc, expected=expected, runtime_qnn_version=None,
                             subject=binary.name)
    return {"context.soc": info.soc, "context.htp_arch": info.htp_arch,
            "context.vtcm_bytes": info.vtcm_bytes, "context.qnn_version": info.qnn_version,
            "context.bytes": info.size_bytes}, findings, path
