"""The ``sim_npu`` check end to end, shared by the stage and ``qnn-ci sim``:
quantize for the HTP -> prepare for one SoC -> FP16 audit of the QNN graph.

The node counts it reports are the nodes of the QDQ graph as onnxruntime
partitioned it (the session's assignment record: Q/DQ nodes included, and the
NHWC Transposes onnxruntime inserted for the EP). The stage and ``qnn-ci sim``
count the same graph because they quantize the same float model: one whose
every tensor has a static shape. A model with static inputs whose interior or
output dims are still symbolic (``qnn-ci sim`` pins inputs with onnx inference
only) is completed first the way the ``static_shapes`` stage does it
(``qnn_ci.shapes.analyse_and_pin``: an onnxruntime fill); quantized as it is,
onnxruntime's quantizer adds Shape/Reshape nodes around such tensors (the PP-OCR
classifier: 687 session nodes instead of 681).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.sim.prepare import PrepareResult, prepare_for_htp
from qnn_ci.sim.quantize import QuantizeResult, QuantSettings, quantize_for_htp
from qnn_ci.sim.samples import Feeds
from qnn_ci.tables import SocInfo
from qnn_ci.util.listing import cut_text

log = logging.getLogger(__name__)

# (float model, QDQ destination, samples, settings, quantizer log) -> the QDQ model
Quantizer = Callable[[Path, Path, Sequence[Feeds], QuantSettings, Path], QuantizeResult]


def quantize_here(src: Path, dst: Path, samples: Sequence[Feeds], settings: QuantSettings,
                  log_path: Path) -> QuantizeResult:
    return quantize_for_htp(src, dst, samples, settings, log_path=log_path)


@dataclass
class SimNpuReport:
    """The ``sim_npu`` check on one SoC: quantize and prepare results, FP16 audit, findings."""

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
        codes = _codes(p)
        if p.nodes_total is None:
            return (f"{head}: prepare FAILED, {counts}, {len(p.rejected)} node(s) rejected "
                    f"per the EP log{codes}")
        # All three from the same assignment record: they add up to the total.
        other = f", {p.nodes_other} not on HTP without a logged reason" if p.nodes_other \
            else ""
        return f"{head}: prepare FAILED, {counts}, {p.nodes_rejected} rejected{codes}{other}"

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


def _codes(p: PrepareResult) -> str:
    """`` (QNN error 3110)``: the error codes the EP log gives for the rejected nodes."""
    codes = sorted({r.error_code for r in p.rejected if r.error_code is not None})
    return f" (QNN error {', '.join(map(str, codes))})" if codes else ""


def static_model(model: Path, out_dir: Path, stem: str) -> tuple[Path, list[Finding]]:
    """``model``, or, when its inputs are static but some other tensor is not, the
    model completed as the ``static_shapes`` stage does it (``<stem>.filled.onnx``
    in ``out_dir``). Dynamic inputs are left for the prepare to report."""
    import onnx

    from qnn_ci.sim.prepare import dynamic_dims

    dyn = dynamic_dims(onnx.load(str(model), load_external_data=False))
    if not dyn or any(kind == "input" for kind, _, _ in dyn):
        return model, []
    from qnn_ci.shapes import analyse_and_pin

    names = cut_text([name for _, name, _ in dyn], 3, render=repr)
    report = analyse_and_pin(model, {}, opset=None, out_path=out_dir / f"{stem}.filled.onnx")
    if not report.ok or not report.output_model:
        return model, [Finding(
            "sim.static_shapes", f"{len(dyn)} tensor(s) keep symbolic dims ({names}) and "
            f"onnxruntime could not fill them ({report.summary()}); quantized as given, so "
            "the QDQ graph may differ from the pipeline's: pin every dim (`qnn-ci shapes`)",
            Severity.WARNING)]
    return Path(report.output_model), [Finding(
        "sim.static_shapes", f"{len(dyn)} tensor(s) with symbolic dims ({names}) filled from "
        "onnxruntime before quantizing, as the static_shapes stage does (quantized as they "
        "were, the QDQ graph would gain Shape/Reshape nodes the pipeline's has not)",
        Severity.INFO)]


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
    source, notes = static_model(model, out_dir, stem)
    report.findings += notes
    try:
        report.quantize = quantizer(source, out_dir / f"{stem}.qdq.onnx", samples, settings,
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
