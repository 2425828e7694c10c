"""FP16 audit and gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.engine.results import Severity
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


@pytest.mark.parametrize("soc", ["QCS6490", "SM8550"])
def test_half_a_real_file_fails_as_truncated(cpp_231: Path, tmp_path: Path, soc: str) -> None:
    # The second half (and the end of QnnModel_composeGraphs) is gone: an FP16 tensor
    # could be there, so "zero FP16" cannot be claimed.
    src = tmp_path / "cut.cpp"
    text = cpp_231.read_text("utf-8")
    src.write_text(text[: len(text) // 2], "utf-8")
    report = audit_fp16(src)
    assert report.count == 0 and 0 < report.total_tensors < 73
    assert report.incomplete and "QnnModel_composeGraphs" in report.incomplete
    findings = gate_fp16(report, get_soc(soc))
    errors = [f for f in findings if f.severity == Severity.ERROR]
    assert [f.check for f in errors] == ["fp16.incomplete"]
    assert "cut.cpp" in errors[0].message and "truncated or edited" in errors[0].message
    assert "audit is incomplete" in errors[0].message


@pytest.mark.parametrize("cut_at, after, why", [
    ('.name= "conv1_weight"', 100, "the definition of tensor 'conv1_weight' is cut short"),
    ("} // PREPARE_GRAPHS", 0, "QnnModel_composeGraphs does not end"),
    ("Command Line used:", 60, "an unterminated /* comment"),
])
def test_every_kind_of_cut_is_named(cpp_231: Path, tmp_path: Path, cut_at: str, after: int,
                                    why: str) -> None:
    text = cpp_231.read_text("utf-8")
    src = tmp_path / "cut.cpp"
    src.write_text(text[: text.index(cut_at) + after], "utf-8")
    report = audit_fp16(src)
    assert report.incomplete == why
    assert any(f.check == "fp16.incomplete" for f in gate_fp16(report, get_soc("SM8550")))


def test_hand_edited_data_type_makes_the_audit_incomplete(cpp_231: Path, tmp_path: Path) -> None:
    text = cpp_231.read_text("utf-8")
    src = tmp_path / "edited.cpp"
    src.write_text(text.replace(".dataType= QNN_DATATYPE_UFIXED_POINT_8,",
                                ".dataType= MY_TYPE,", 1), "utf-8")
    report = audit_fp16(src)
    assert report.incomplete == "1 tensor(s) without a readable .dataType (input_1)"
    assert [f.check for f in gate_fp16(report, get_soc("QCS6490"))
            if f.severity == Severity.ERROR] == ["fp16.incomplete"]


def test_net_json_tensor_without_data_type_is_incomplete(fp16_net_json: Path,
                                                         tmp_path: Path) -> None:
    data = json.loads(fp16_net_json.read_text("utf-8"))
    del data["graph"]["tensors"]["x"]["data_type"]
    edited = tmp_path / "edited_net.json"
    edited.write_text(json.dumps(data), "utf-8")
    assert audit_fp16(edited).incomplete == "1 tensor(s) without a data_type (x)"
    assert audit_fp16(fp16_net_json).incomplete is None
