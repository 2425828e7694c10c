"""Count FP16 tensors in converter output and gate on the target SoC.

On an HTP without FP16 (v68: QCS6490, SM7325, ...) one FP16 op makes
``qnn-context-binary-generator`` abort (exit 134 seen), so the model cannot
load. The audit reads tensor data types only — ``.dataType=
QNN_DATATYPE_FLOAT_16`` in the source, ``data_type`` 534 in a ``_net.json``
or onnxruntime-qnn's QNN JSON graph — never the header comment (which
contains words like ``float_bitwidth=32``).

A source that is cut off (``CppModel.truncated``) or has tensors whose data
type cannot be read cannot prove "zero FP16": the report says why in
``incomplete`` and the gate fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.sdk.cpp_model import CPP_CAP, read_cpp_model
from qnn_ci.sdk.net_json import read_net_json
from qnn_ci.sdk.record import looks_like_json
from qnn_ci.tables import FP16_CODE, SocInfo
from qnn_ci.util.listing import cut_text
from qnn_ci.util.safe_read import open_regular

FP16_NAME = "QNN_DATATYPE_FLOAT_16"


@dataclass
class Fp16Report:
    """The FP16 audit of one converter output: FP16 tensors, total, why it is incomplete."""

    source: str
    tensors: list[str]                 # names of the FP16 tensors
    total_tensors: int
    problems: list[str] = field(default_factory=list)
    kind: str = "cpp"                  # "cpp" | "json"
    incomplete: str | None = None      # why the audit cannot be complete (truncated / edited)
    converter_output: bool = True      # False: nothing in the file looks like converter output

    @property
    def count(self) -> int:
        return len(self.tensors)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "fp16_tensors": list(self.tensors),
                "count": self.count, "total_tensors": self.total_tensors,
                "problems": list(self.problems), "incomplete": self.incomplete}


def audit_fp16(path: Path) -> Fp16Report:
    """FP16 tensors in a generated source (any extension; streamed) or a JSON graph.
    A missing, non-regular or oversized file is one line (UserError)."""
    path = Path(path)
    with open_regular(path, cap=CPP_CAP, what="converter output",
                      hint="pass the generated model source, its _net.json or a QNN JSON "
                           "graph") as fh:
        try:
            head = fh.read(4096)
        except OSError as exc:
            raise UserError(f"cannot read the file ({exc.strerror or exc})",
                            file=path) from None
    if looks_like_json(head.decode("utf-8", errors="replace"), path):
        net = read_net_json(path)
        names = [t.name for t in net.tensors if t.data_type_code == FP16_CODE]
        untyped = [t.name for t in net.tensors if t.data_type_code is None]
        incomplete = (f"{len(untyped)} tensor(s) without a data_type "
                      f"({cut_text(untyped, 5)})") if untyped else None
        return Fp16Report(str(path), names, len(net.tensors), list(net.problems), "json",
                          incomplete=incomplete, converter_output=bool(net.tensors))
    model = read_cpp_model(path)
    names = [t.name for t in model.tensors if t.data_type == FP16_NAME]
    return Fp16Report(str(path), names, len(model.tensors), list(model.problems), "cpp",
                      incomplete=model.incomplete(), converter_output=model.converter_output)


def incomplete_text(report: Fp16Report) -> str:
    """One line: why the audit of ``report``'s file is incomplete and what to do."""
    return (f"{Path(report.source).name}: {report.incomplete}: the file is truncated or "
            f"edited, so the FP16 audit is incomplete ({report.total_tensors} tensor(s) "
            f"read); regenerate it with qnn-onnx-converter")


def why_fp16_fails(soc: SocInfo) -> str:
    return (f"{soc.name} (HTP {soc.arch_name}) has no FP16: an FP16 op makes the "
            f"context binary build abort (exit 134). Convert all-quantized "
            f"(calibration --input_list, no --float_fallback, float bitwidth 32)")


def gate_fp16(report: Fp16Report, soc: SocInfo) -> list[Finding]:
    """Findings for one audited file: one error per FP16 tensor when the SoC has
    no FP16; an info finding with the count otherwise."""
    findings: list[Finding] = []
    name = Path(report.source).name
    if report.incomplete:
        findings.append(Finding("fp16.incomplete", incomplete_text(report), Severity.ERROR,
                                subject=name))
    if report.total_tensors == 0:
        if report.incomplete:
            return findings
        findings.append(Finding(
            "fp16.unreadable",
            f"{name}: no tensor definitions could be read, so zero FP16 cannot be "
            f"confirmed ({'; '.join(report.problems) or 'empty graph'})",
            Severity.ERROR, subject=name))
        return findings
    for problem in report.problems:
        findings.append(Finding("fp16.parse", f"{name}: {problem}", Severity.WARNING,
                                subject=name))
    if report.count and not soc.fp16:
        reason = why_fp16_fails(soc)
        for tensor in report.tensors:
            findings.append(Finding("fp16.tensor",
                                    f"tensor {tensor} in {name} is FLOAT_16; {reason}",
                                    Severity.ERROR, subject=tensor))
        return findings
    support = "executes FP16" if soc.fp16 else "has no FP16"
    findings.append(Finding(
        "fp16.count",
        f"{name}: {report.count} FP16 tensor(s) of {report.total_tensors}; "
        f"{soc.name} (HTP {soc.arch_name}) {support}",
        Severity.INFO, subject=name))
    return findings
