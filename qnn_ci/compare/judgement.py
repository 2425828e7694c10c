"""A quantized graph's device run judged as onnxruntime's QNN EP tests judge the HTP:
against the same quantized graph on a CPU (the export's thresholds), that CPU run
against the fp32 truth (the quantization's own loss, the same thresholds), and the
accuracy rule (``qnn_ci.compare.accuracy``). One judgement for a board's HTP
(``htp_vs_cpu``: the QNN CPU backend) and an AI Hub device (``context_run``: the QDQ
model on onnxruntime's CPU); each stage labels the findings in its own words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qnn_ci.compare.accuracy import DEFAULT_TOLERANCE, accuracy_rule
from qnn_ci.compare.compare import Comparison, compare_sets, metric_properties
from qnn_ci.compare.outputs import OutputSet
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.results import Finding, Severity


@dataclass
class Judgement:
    """The three comparisons and the rule; the stage labels and gates them."""

    vs_cpu: Comparison            # the device against the CPU run (the gate)
    cpu_vs_truth: Comparison      # the CPU run against fp32 (gated by the same thresholds)
    device_vs_truth: Comparison   # the device against fp32 (for the record: no bounds)
    rule: list[Finding]           # the accuracy rule, one finding per output and sample

    def rule_findings(self) -> list[Finding]:
        """The rule's findings that say something (a pass per sample is INFO)."""
        return [f for f in self.rule if f.severity != Severity.INFO]

    def rule_text(self) -> str:
        held = sum(f.check == "compare.accuracy" and f.severity == Severity.INFO
                   for f in self.rule)
        checked = sum(f.check == "compare.accuracy" for f in self.rule)
        return f"held on {held} of {checked}"

    def properties(self, device: str, thresholds: Thresholds) -> dict[str, Any]:
        """``<device>_vs_cpu.*`` (with bounds), ``cpu_vs_fp32`` and ``<device>_vs_fp32``
        cosines."""
        return (metric_properties(self.vs_cpu, f"{device}_vs_cpu", thresholds=thresholds)
                | metric_properties(self.cpu_vs_truth, "cpu_vs_fp32", ("cosine",))
                | metric_properties(self.device_vs_truth, f"{device}_vs_fp32", ("cosine",)))

    def data(self, device: str) -> dict[str, Any]:
        return {"comparison": self.vs_cpu.to_dict(),
                "vs_fp32": {"cpu": self.cpu_vs_truth.to_dict(),
                            device: self.device_vs_truth.to_dict()}}


def judge_quantized(truth: OutputSet, cpu: OutputSet, device: OutputSet,
                    thresholds: Thresholds, *, expected: Mapping[str, Any] | None = None,
                    quant_steps: Mapping[str, float] | None = None) -> Judgement:
    return Judgement(
        compare_sets(cpu, device, thresholds, expected=expected, quant_steps=quant_steps),
        compare_sets(truth, cpu, thresholds, expected=expected, quant_steps=quant_steps),
        compare_sets(truth, device, Thresholds(default={}), expected=expected,
                     quant_steps=quant_steps),
        accuracy_rule(truth, cpu, device, DEFAULT_TOLERANCE))
