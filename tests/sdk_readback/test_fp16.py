"""FP16 audit and gate."""

from __future__ import annotations

from pathlib import Path

from qnn_ci.results import Severity
from qnn_ci.sdk.fp16_audit import audit_fp16, gate_fp16
from qnn_ci.tables import get_soc
from tests.sdk_readback.conftest import FP16_TENSORS, RECORD_FP16, source_text


def test_real_231_has_zero_fp16_and_passes_on_v68(cpp_231: Path) -> None:
    report = audit_fp16(cpp_231)
    # the header says float_bitwidth=32 / float_bw=32: never counted
    assert (report.count, report.total_tensors, report.problems) == (0, 73, [])
    findings = gate_fp16(report, get_soc("QCS6490"))
    assert [(f.check, f.severity) for f in findings] == [("fp16.count", Severity.INFO)]
    assert "0 FP16 tensor(s) of 73" in findings[0].message


def test_source_with_fp16_fails_on_v68_one_finding_per_tensor(tmp_path: Path) -> None:
    src = tmp_path / "model"                       # no .cpp extension: sniffed as source
    src.write_text(source_text(RECORD_FP16, tensors=FP16_TENSORS), "utf-8")
    report = audit_fp16(src)
    assert report.tensors == ["x_fp16", "w"] and report.total_tensors == 4
    findings = gate_fp16(report, get_soc("QCS6490"))
    assert [(f.check, f.subject, f.severity) for f in findings] == [
        ("fp16.tensor", "x_fp16", Severity.ERROR), ("fp16.tensor", "w", Severity.ERROR)]
    msg = findings[0].message
    assert "x_fp16" in msg and "v68" in msg and "exit 134" in msg and "--float_fallback" in msg


def test_fp16_capable_soc_passes_with_count(tmp_path: Path) -> None:
    src = tmp_path / "model.cpp"
    src.write_text(source_text(RECORD_FP16, tensors=FP16_TENSORS), "utf-8")
    findings = gate_fp16(audit_fp16(src), get_soc("SM8550"))
    assert [(f.check, f.severity) for f in findings] == [("fp16.count", Severity.INFO)]
    assert "2 FP16 tensor(s) of 4" in findings[0].message and "v73" in findings[0].message


def test_net_json_code_534(fp16_net_json: Path) -> None:
    report = audit_fp16(fp16_net_json)
    assert report.kind == "json" and report.tensors == ["x_fp16", "w"]
    errors = [f for f in gate_fp16(report, get_soc("SM7325")) if f.severity == Severity.ERROR]
    assert [f.subject for f in errors] == ["x_fp16", "w"]


def test_onnxruntime_qnn_dump(ort_qnn_fp16_json: Path) -> None:
    report = audit_fp16(ort_qnn_fp16_json)
    assert sorted(report.tensors) == ["t", "w", "xh"] and report.total_tensors == 5
    assert len([f for f in gate_fp16(report, get_soc("QCS6490"))
                if f.check == "fp16.tensor"]) == 3


def test_unreadable_graph_cannot_pass(tmp_path: Path) -> None:
    src = tmp_path / "empty.cpp"
    src.write_text("/* nothing here */\n", "utf-8")
    findings = gate_fp16(audit_fp16(src), get_soc("SM8550"))
    assert findings[0].check == "fp16.unreadable" and findings[0].severity == Severity.ERROR


def test_partly_readable_warns(cpp_231: Path, tmp_path: Path) -> None:
    src = tmp_path / "cut.cpp"
    text = cpp_231.read_text("utf-8")
    src.write_text(text[: len(text) // 2], "utf-8")
    findings = gate_fp16(audit_fp16(src), get_soc("QCS6490"))
    checks = [f.check for f in findings]
    assert "fp16.parse" in checks and checks[-1] == "fp16.count"
    assert all(f.severity != Severity.ERROR for f in findings)
