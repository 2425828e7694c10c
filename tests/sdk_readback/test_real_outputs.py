"""Every real converter output and AIMET export in ../shared/reference/real-outputs,
read in place by `namespace`, `fp16` and `encodings`, with the exact values an
independent reading of each file gives (skipped when the folder is absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.cli import main
from qnn_ci.sdk.cpp_model import read_cpp_model
from qnn_ci.sdk.encodings import read_encodings
from qnn_ci.sdk.encodings_coverage import coverage, load_model
from qnn_ci.sdk.fp16_audit import audit_fp16
from qnn_ci.sdk.net_json import read_net_json
from qnn_ci.sdk.record import parse_record_text, read_record
from qnn_ci.stages.contract import compare
from tests.sdk_readback.conftest import make_export, real_file

# file -> (tool, separator era, arguments, SDK version, where it came from,
#          act/weights/bias/float bitwidths, alias conflicts, FP16 tensors of total)
RECORDS = {
    "mobilenetv2-qairt2.10_net.json": ("space", 59, None, None, (8, 8, 32, 32), [], 172),
    "resnet18_int8-qairt2.18.cpp": ("space", 74, None, None, (8, 8, 8, 32),
                                    ["float_bias_bitwidth"], 142),
    "resnet18_int8-qairt2.18_net.json": ("space", 74, None, None, (8, 8, 8, 32),
                                         ["float_bias_bitwidth"], 75),
    "vector_search-qairt2.29.cpp": ("semicolon", 95, "2.29.0", "QNN_SDK_VERSION",
                                    (8, 8, 8, 32), [], 3),
    "vector_search-qairt2.29_net.json": ("semicolon", 95, None, None, (8, 8, 8, 32), [], 3),
    "naf_block_sota-qairt2.31.cpp": ("semicolon", 96, "2.31.0", "QNN_SDK_VERSION",
                                     (8, 8, 32, 32), [], 73),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_real_record_fp16_and_namespace(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    era, count, version, source, bws, conflicts, total = RECORDS[name]
    path = real_file(name)
    rec = read_record(path)
    assert (rec.tool, rec.tool_path, rec.era, len(rec.raw_args)) == \
        ("qnn-onnx-converter", None, era, count)
    assert (rec.sdk_version, rec.sdk_version_source) == (version, source)
    assert tuple(rec.value(k) for k in ("act_bitwidth", "weights_bitwidth", "bias_bitwidth",
                                        "float_bitwidth")) == bws
    assert [c.canonical for c in rec.conflicts] == conflicts and rec.problems == []
    assert rec.value("overwrite_model_prefix") is False
    report = audit_fp16(path)
    assert (report.count, report.total_tensors, report.incomplete) == (0, total, None)
    assert main(["fp16", str(path), "--soc", "QCS6490"]) == 0
    assert f"{path}: 0 FP16 tensor(s) of {total}" in capsys.readouterr().out
    assert main(["namespace", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["sdk_version"], shown["sdk_version_source"]) == (version, source)


def test_real_sources_without_a_stamp_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    path = real_file("resnet18_int8-qairt2.18.cpp")
    assert main(["namespace", str(path)]) == 0
    out = capsys.readouterr().out
    assert "SDK version: unknown (no QNN_SDK_VERSION stamp and no version in the tool path)" \
        in out
    assert "warning: float_bias_bitwidth: alias spellings disagree" in out


def test_real_2_31_stamp_is_named_as_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namespace", str(real_file("naf_block_sota-qairt2.31.cpp"))]) == 0
    assert "SDK version: 2.31.0 (qaisw-v2.31.0.250130151446_114721, from QNN_SDK_VERSION)" \
        in capsys.readouterr().out


def test_real_2_18_values() -> None:
    rec = read_record(real_file("resnet18_int8-qairt2.18.cpp"))
    assert rec.value("input_encoding") == [["input_data", "other", "bgr"]]
    assert rec.raw_value("quantization_overrides") == "aimet_export/resnet18/resnet18.encodings"
    assert rec.value("debug") is None and rec.value("batch") == 32
    assert rec.spellings("act_bitwidth") == ["act_bitwidth", "act_bw"]


def test_real_2_18_v1_source_and_old_net_json() -> None:
    cpp = read_cpp_model(real_file("resnet18_int8-qairt2.18.cpp"))
    assert cpp.problems == [] and cpp.truncated is None
    assert cpp.graphs == ["resnet18_int8"] and len(cpp.nodes) == 32
    assert cpp.compose_function == "QnnModel_composeGraphs" and cpp.prefixed is False
    assert cpp.data_type_counts() == {"QNN_DATATYPE_UFIXED_POINT_8": 75,
                                      "QNN_DATATYPE_UINT_32": 67}
    net = read_net_json(real_file("resnet18_int8-qairt2.18_net.json"))
    assert net.problems == []
    first = {t.name: t for t in net.tensors}["input_data"]
    assert first.dims == [32, 224, 224, 3] and first.quant["is_overridden"] is True


def test_real_2_10_net_json_layout() -> None:
    net = read_net_json(real_file("mobilenetv2-qairt2.10_net.json"))
    assert net.problems == [] and len(net.tensors) == 172
    assert all(t.dims for t in net.tensors)                 # "dims", no current_dims


def test_real_2_10_list_valued_boolean_matches(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = real_file("mobilenetv2-qairt2.10_net.json")
    assert main(["namespace", str(path), "--expect", "use_per_channel_quantization=False",
                 "--expect", "act_bw=8"]) == 0
    assert "ok: use_per_channel_quantization = [False]" in capsys.readouterr().out
    assert main(["namespace", str(path), "--expect", "use_per_channel_quantization=True"]) == 1
    rec = read_record(path)
    findings = compare(rec, make_export(tmp_path, tmp_path / "m.onnx"), None, tmp_path)
    assert "contract.use_per_channel_quantization" not in {f.check for f in findings}


def test_real_head_only_file_is_refused_as_cut_off(capsys: pytest.CaptureFixture[str]) -> None:
    path = real_file("passthrough-qairt2.27-head.cpp")
    assert main(["fp16", str(path), "--soc", "QCS6490"]) == 2
    assert "no QnnModel_composeGraphs function" in capsys.readouterr().err


# -- AIMET exports ------------------------------------------------------------

def test_real_resnet18_aimet_061_read() -> None:
    enc = read_encodings(real_file("resnet18-aimet0.6.1.encodings"))
    assert (enc.version, len(enc.activations), len(enc.params), enc.bitwidths) == \
        ("0.6.1", 32, 21, {8})


# version -> (entries, covered activations, covered params, derived by role)
PPOCR = {
    "0.6.1": (401, 222, 179, {"data_movement": 3, "fused": 10, "bias": 19, "batchnorm": 105}),
    "1.0.0": (401, 222, 179, {"data_movement": 3, "fused": 10, "bias": 19, "batchnorm": 105}),
    "2.0.0": (458, 243, 215, {"fused": 10, "batchnorm": 70}),
}


@pytest.fixture(scope="module")
def ppocr_cls(cls_model: Path):
    return load_model(cls_model)


@pytest.mark.parametrize("version", sorted(PPOCR))
def test_real_ppocr_aimet_exports_make_no_noise(version: str, cls_model: Path, ppocr_cls,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    entries, acts, params, derived = PPOCR[version]
    path = real_file(f"aimet/ppocr_cls-aimet2.42-v{version}.encodings")
    enc = read_encodings(path)
    assert enc.version == version and enc.notes == []
    cov = coverage(enc, ppocr_cls)
    assert (cov.counts["file_entries"], cov.counts["known"], cov.unknown) == (entries, entries,
                                                                               [])
    assert (cov.counts["model_activations"], cov.counts["model_params"]) == (253, 285)
    assert (cov.counts["covered_activations"], cov.counts["covered_params"]) == (acts, params)
    assert cov.derived_counts() == derived
    assert cov.uncovered_activations == [] and cov.uncovered_params == []
    assert cov.derived["save_infer_model/scale_0.tmp_1"] == "data_movement" \
        if version != "2.0.0" else True                          # the Identity graph output
    assert cov.derived["conv1_bn_mean"] == "batchnorm"
    assert cov.derived["linear_1.tmp_0"] == "fused"              # MatMul + bias Add
    assert main(["encodings", str(path), "--model", str(cls_model)]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out
    assert f"derived by the converter (no encoding needed): {sum(derived.values())}" in out
    assert "left to --input_list calibration: 0" in out


def test_real_2_0_0_export_holds_32_bit_biases() -> None:
    enc = read_encodings(real_file("aimet/ppocr_cls-aimet2.42-v2.0.0.encodings"))
    assert enc.bitwidths == {8, 16, 32}


def test_a_record_with_a_linux_tool_path_gives_the_version() -> None:
    rec = parse_record_text("/opt/qcom/aistack/qairt/2.20.0.240223/bin/x86_64-linux-clang/"
                            "qnn-onnx-converter act_bitwidth=8 act_bw=8")
    assert (rec.tool, rec.tool_path) == (
        "qnn-onnx-converter",
        "/opt/qcom/aistack/qairt/2.20.0.240223/bin/x86_64-linux-clang/qnn-onnx-converter")
