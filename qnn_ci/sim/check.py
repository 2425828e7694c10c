"""The ``sim_npu`` check end to end, shared by the stage and ``qnn-ci sim``:
quantize for the HTP -> prepare for one SoC -> FP16 audit of the QNN graph."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.results import Finding, Severity
from qnn_ci.sim.prepare import PrepareResult, prepare_for_htp
from qnn_ci.sim.quantize import QuantizeResult, QuantSettings, quantize_for_htp
from qnn_ci.sim.samples import Feeds
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)

# (float model, QDQ destination, samples, settings, quantizer log) -> the QDQ model
Quantizer = Callable[[Path, Path, Sequence[Feeds], QuantSettings, Path], QuantizeResult]


def quantize_here(src: Path, dst: Path, samples: Sequence[Feeds], settings: QuantSettings,
                  log_path: Path) -> QuantizeResult:
    return quantize_for_htp(src, dst, samples, settings, log_path=log_path)


@dataclass
class SimNpuReport:
    soc: SocInfo
    model: Path
    out_dir: Path
    quantize: QuantizeResult | None = None
    prepare: PrepareResult | None = None
    fp16: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    random_calibration: bool = False
    durations: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.prepare and self.prepare.prepared) and not self.errors()

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def summary_line(self) -> str:
        head = f"{self.soc.name} ({self.soc.arch_name}, simulator id {self.soc.sim_soc_id})"
        p = self.prepare
        if p is None:
            return f"{head}: quantization failed"
        counts = (f"{p.nodes_on_htp}/{p.nodes_total} nodes on HTP"
                  if p.nodes_total is not None else "node counts unavailable")
        if self.passed:
            return f"{head}: prepared, {counts}"
        if p.prepared:
            return f"{head}: prepared, {counts}, {len(self.errors())} finding(s)"
        if p.nodes_total is None:
            return (f"{head}: prepare FAILED, {counts}, {len(p.rejected)} node(s) rejected "
                    "per the EP log")
        # All three from the same assignment record: they add up to the total.
        other = f", {p.nodes_other} not on HTP without a logged reason" if p.nodes_other \
            else ""
        return f"{head}: prepare FAILED, {counts}, {p.nodes_rejected} rejected{other}"

    def to_dict(self) -> dict[str, Any]:
        q = self.quantize
        return {
            "soc": self.soc.name, "arch": self.soc.arch_name, "sim_soc_id": self.soc.sim_soc_id,
            "model": str(self.model), "passed": self.passed, "summary": self.summary_line(),
            "random_calibration": self.random_calibration,
            "quantize": None if q is None else {
                "qdq_model": str(q.model), "constants_folded": q.constants_folded,
                "samples": q.samples, "opset": q.opset,
                "overrides_applied": len(q.overrides.applied) if q.overrides else 0},
            "prepare": self.prepare.to_dict() if self.prepare else None,
            "fp16": self.fp16, "findings": [f.to_dict() for f in self.findings],
            "durations": {k: round(v, 3) for k, v in self.durations.items()},
        }


def _fp16_audit(report: SimNpuReport, paths: list[Path]) -> None:
    from qnn_ci.sdk.fp16_audit import audit_fp16, gate_fp16

    for path in paths:
        try:
            audit = audit_fp16(path)
        except UserError as exc:
            report.findings.append(Finding("sim.fp16", f"cannot audit {path.name}: {exc}",
                                           Severity.WARNING, subject=path.name))
            continue
        report.fp16.append(audit.to_dict())
        report.findings += gate_fp16(audit, report.soc)


def check_htp(model: Path, out_dir: Path, soc: SocInfo, samples: Sequence[Feeds],
              settings: QuantSettings, *, random_calibration: bool = False,
              log_severity: int = 2, quantizer: Quantizer = quantize_here) -> SimNpuReport:
    """Quantize ``model`` (fp32, static shapes) with ``samples``, prepare it for
    ``soc`` and audit the QNN graph. Artefacts go to ``out_dir``. ``quantizer`` may
    reuse a QDQ model made for another export (``qnn_ci.sim.shared_quantize``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = model.name.removesuffix(".onnx")
    report = SimNpuReport(soc, model, out_dir, random_calibration=random_calibration)
    if random_calibration:
        report.findings.append(Finding(
            "sim.random_calibration", "quantized with RANDOM data (no calibration input "
            "list): the prepare answer holds, but no numbers are checked", Severity.WARNING))
    try:
        report.quantize = quantizer(model, out_dir / f"{stem}.qdq.onnx", samples, settings,
                                    out_dir / "quantize.log")
    except UserError:
        raise
    except Exception as exc:  # the quantizer's own failure: a finding, not a crash
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        report.findings.append(Finding("sim.quantize", f"quantization failed: {first} "
                                       f"(see {out_dir / 'quantize.log'})", Severity.ERROR))
        return report
    report.durations["quantize_s"] = report.quantize.duration_s
    report.findings += report.quantize.findings
    report.prepare = prepare_for_htp(report.quantize.model, out_dir, soc, stem=stem,
                                     log_severity=log_severity)
    report.durations["prepare_s"] = report.prepare.duration_s
    report.findings += report.prepare.findings
    _fp16_audit(report, report.prepare.qnn_json)
    return report
