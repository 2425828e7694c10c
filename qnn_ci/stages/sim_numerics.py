"""Stage `sim_numerics`: run the graph `sim_npu` prepared on the HTP simulator
for a few held-out samples and compare with fp32 onnxruntime CPU, with the
same metrics, thresholds and messages as the board comparison. The simulator
is slow, so the count is capped (manifest `sim.samples`). A failed comparison is
diagnosed (``diagnosis.enabled``, the default: ``qnn_ci.diagnose.sim``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.stage import StageContext
from qnn_ci.errors import UserError
from qnn_ci.stages.diagnosis_common import guarded, progress_logger
from qnn_ci.stages.sim_common import SimStage

log = logging.getLogger(__name__)


class SimNumericsStage(SimStage):
    name = "sim_numerics"
    settings = ("target", "thresholds", "sim", "diagnosis")
    needs = ("sim_npu", "calibration")
    version = 1


    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.compare import metric_properties
        from qnn_ci.sim.ep import sim_target
        from qnn_ci.sim.numerics import simulate_and_compare
        from qnn_ci.sim.parallel import WorkerKilled
        from qnn_ci.sim.samples import inputs_from_data, load_samples

        export = ctx.export
        soc = sim_target(export.target.soc, file=export.manifest, line=export.line,
                         key="target.soc")
        npu, cal = ctx.upstream["sim_npu"], ctx.upstream["calibration"]
        findings: list[Finding] = []
        held = cal.artefacts.get("held_out_list")
        if held:
            source, which = Path(held), "held-out"
        else:
            source, which = Path(cal.artefacts["input_list"]), "calibration"
            findings.append(Finding(
                "sim.no_held_out", "no held-out samples: compared on calibration samples, "
                "which flatters the quantized model (keep some back: calibration.held_out)",
                Severity.WARNING))
        cap = max(1, export.sim.samples)
        samples = load_samples(source, inputs_from_data(cal.data["inputs"]), limit=cap)
        qdq = npu.artefacts.get("qdq_model")
        try:
            result = simulate_and_compare(
                Path(npu.data["float_model"]), Path(qdq) if qdq else None,
                Path(npu.artefacts["ctx_model"]), soc, samples, export.thresholds,
                ctx.workdir)
        except WorkerKilled as exc:
            return self._killed(exc)
        findings += result.findings
        report_path = ctx.workdir / "sim_numerics.json"
        report_path.write_text(json.dumps(result.to_dict(), indent=2, default=str), "utf-8")
        status = Status.PASSED if result.passed and not any(
            f.severity == Severity.ERROR for f in findings) else Status.FAILED
        summary = (f"{soc.name} simulator vs fp32 CPU on {result.samples} {which} sample(s): "
                   f"{result.comparison.summary_line()}")
        properties: dict[str, Any] = {
            "soc": soc.name, "samples": result.samples, "sample_source": which,
            "sim_s_per_inference": round(result.sim_s_per_inference, 3),
            "cpu_s_per_inference": round(result.cpu_s_per_inference, 4),
        } | metric_properties(result.comparison, "sim_vs_fp32", thresholds=export.thresholds)
        artefacts = {"report": str(report_path), "reference": str(result.reference_dir),
                     "sim_outputs": str(result.sim_dir)}
        if result.qdq_cpu_dir is not None:
            artefacts["qdq_cpu_outputs"] = str(result.qdq_cpu_dir)
        stage_result = StageResult(self.name, status, summary, findings=findings,
                                   properties=properties, artefacts=artefacts,
                                   data={"comparison": result.comparison.to_dict()})
        if status == Status.FAILED and not result.passed and export.diagnosis.enabled:
            stage_result = guarded(stage_result, lambda: self._diagnose(
                ctx, soc, result, samples, inputs_from_data(cal.data["inputs"])))
        return stage_result

    def _killed(self, exc: Exception) -> StageResult:
        """A simulator worker killed by a signal (the OOM killer's SIGKILL): an error
        of this stage, one line naming it; never cached (it may not repeat)."""
        from qnn_ci.engine.pipeline import NO_CACHE

        text = exc.oneline() if isinstance(exc, UserError) else str(exc)
        msg = f"stage {self.name}: {text}"
        log.error("%s", msg)
        return StageResult(self.name, Status.ERROR, msg,
                           findings=[Finding("sim.worker_killed", msg, Severity.ERROR)],
                           data={NO_CACHE: True})

    def _diagnose(self, ctx: StageContext, soc: Any, numerics: Any, held_out: list[Any],
                  inputs: Any) -> Any:
        """Attribution, first diverging layer and (within the budget) the recipe
        advisor for this failure (``qnn_ci.diagnose.sim``); artefacts in
        ``<stage folder>/diagnosis``."""
        from qnn_ci.diagnose.sim import diagnose_sim
        from qnn_ci.sim.quantize import QuantSettings
        from qnn_ci.sim.samples import load_samples

        export = ctx.export
        npu, cal = ctx.upstream["sim_npu"], ctx.upstream["calibration"]
        calibration = load_samples(Path(cal.artefacts["input_list"]), inputs)
        qdq = npu.artefacts.get("qdq_model")
        if not qdq:
            raise ValueError("sim_npu made no QDQ model (artefact qdq_model) to diagnose with")
        return diagnose_sim(
            float_model=Path(npu.data["float_model"]), qdq_model=Path(qdq),
            ctx_model=Path(npu.artefacts["ctx_model"]), soc=soc, numerics=numerics,
            calibration=calibration, held_out=held_out,
            settings=QuantSettings.from_spec(export.quantization),
            thresholds=export.thresholds, out_dir=ctx.workdir / "diagnosis",
            budget_s=export.diagnosis.budget_s, advisor=export.diagnosis.advisor,
            progress=progress_logger(export.name, self.name, ctx.env.progress))
