"""Each QAIRT era the stand-in draws, held structurally against the real file of the
nearest era (``../shared/reference/real-outputs``): record separator and keys,
source layout, ``_net.json`` keys; plus the era facts of formats page section 7
that no file here shows (2.22.6 sources, 2.33 ``_net.json``, 2.45 stamps)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_sdk
from tests.standin_sdk.conftest import RECORD, convert, real_output, record_of, write_samples

ANY_RECORD = re.compile(r"/\* Command Line used:\n(.*?)\n\*/", re.S)
STAMP = re.compile(r'char\* QNN_SDK_VERSION = "qaisw-v(\d+\.\d+\.\d+)\.(\d{12})(_\d+)?";')


def record_keys(record: str) -> tuple[str, set[str]]:
    """(separator, keys) of a record, split only before ``key=`` tokens."""
    sep = "; " if "; " in record else " "
    parts = record.split(sep)[1:] if sep == "; " else \
        re.split(r" (?=[A-Za-z_][A-Za-z0-9_]*=)", record)[1:]
    return sep, {p.split("=", 1)[0] for p in parts}


def real_record(name: str) -> str:
    path = real_output(name)
    if name.endswith(".json"):
        return json.loads(path.read_text())["converter_command"]
    match = RECORD.search(path.read_text())
    assert match, name
    return match.group(1)


_SDKS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def sdk_of(tmp_path_factory: pytest.TempPathFactory):
    def make(version: str, **options: object) -> Path:
        key = version + repr(sorted(options.items()))
        if key not in _SDKS:
            _SDKS[key] = make_sdk(tmp_path_factory.mktemp("era") / "qairt", version,
                                  **options)  # type: ignore[arg-type]
        return _SDKS[key]
    return make


@pytest.fixture(scope="module")
def tiny_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_samples(tmp_path_factory.mktemp("era_cal"), {"x": ((1, 3, 8, 8), "float32")},
                         2)


_RUNS: dict[tuple[str, tuple[str, ...]], Path] = {}


@pytest.fixture(scope="module")
def converted(sdk_of, models: dict[str, Path], tiny_samples: Path,
              tmp_path_factory: pytest.TempPathFactory):
    """version -> the quantized tiny model's source path (one run per version/flags)."""
    def run(version: str, *flags: str, name: str = "tiny_model") -> Path:
        key = (version, (*flags, name))
        if key not in _RUNS:
            cpp = tmp_path_factory.mktemp("era_out") / f"{name}.cpp"
            result = convert(sdk_of(version), "-i", models["tiny"], "-d", "x", "1,3,8,8",
                             "-o", cpp, "--input_list", tiny_samples, *flags)
            assert result.code == 0, result.text
            _RUNS[key] = cpp
        return _RUNS[key]
    return run


def net_json_of(cpp: Path) -> dict:
    return json.loads(cpp.with_name(cpp.stem + "_net.json").read_text())


# ------------------------------------------------------------------ the record

@pytest.mark.parametrize(("version", "real"), [
    ("2.10.0", "mobilenetv2-qairt2.10_net.json"),
    ("2.18.0", "resnet18_int8-qairt2.18.cpp"),
    ("2.27.0", "passthrough-qairt2.27-head.cpp"),
    ("2.29.0", "vector_search-qairt2.29.cpp"),
    ("2.31.0", "naf_block_sota-qairt2.31.cpp"),
])
def test_record_has_the_separator_and_keys_of_the_real_record(converted, version: str,
                                                              real: str) -> None:
    ours = record_of(converted(version))
    real_text = real_record(real)
    assert record_keys(ours) == record_keys(real_text)
    assert ours.split(record_keys(ours)[0])[0] == real_text.split(record_keys(real_text)[0])[0]
    assert "overwrite_model_prefix=False" in ours and "overwrite_model_prefix=False" in real_text


@pytest.mark.parametrize(("version", "nearest", "sep"), [
    ("2.22.6", "resnet18_int8-qairt2.18.cpp", " "),           # act_bitwidth next to act_bw
    ("2.25.0", "passthrough-qairt2.27-head.cpp", "; "),       # one spelling per bitwidth
    ("2.26.2", "passthrough-qairt2.27-head.cpp", "; "),
])
def test_records_between_real_files_follow_section_7(converted, version: str, nearest: str,
                                                     sep: str) -> None:
    got_sep, keys = record_keys(record_of(converted(version)))
    assert got_sep == sep
    assert keys == record_keys(real_record(nearest))[1]
    assert not {"input_network", "output_path"} & keys


def test_old_record_values_as_real_records(converted) -> None:
    rec_218 = dict(p.split("=", 1) for p in
                   re.split(r" (?=[A-Za-z_][A-Za-z0-9_]*=)", record_of(converted("2.18.0")))[1:])
    real_218 = dict(p.split("=", 1) for p in re.split(
        r" (?=[A-Za-z_][A-Za-z0-9_]*=)", real_record("resnet18_int8-qairt2.18.cpp"))[1:])
    for key in ("debug", "dry_run", "float_bias_bitwidth", "float_bias_bw", "act_bw",
                "act_bitwidth", "preserve_io", "overwrite_model_prefix"):
        assert rec_218[key] == real_218[key], key
    rec_210 = record_of(converted("2.10.0"))
    assert "use_per_channel_quantization=[False]" in rec_210
    assert "use_per_channel_quantization=[False]" in real_record(
        "mobilenetv2-qairt2.10_net.json")


def test_2_18_long_and_short_flags_both_work(converted) -> None:
    long_rec = record_of(converted("2.18.0", "--act_bitwidth", "16", "--bias_bitwidth", "32"))
    short_rec = record_of(converted("2.18.0", "--act_bw", "16", "--bias_bw", "32"))
    for rec in (long_rec, short_rec):
        assert "act_bitwidth=16 act_bw=16" in rec and "bias_bitwidth=32 bias_bw=32" in rec
    data = net_json_of(converted("2.18.0", "--act_bitwidth", "16"))
    assert data["graph"]["tensors"]["_relu_Relu_output_0"]["data_type"] == 1046  # UFIXED_16


@pytest.mark.parametrize(("version", "flag"), [
    ("2.10.0", "--float_fallback"), ("2.10.0", "--act_bitwidth"),
    ("2.18.0", "--act_quantizer_calibration"), ("2.18.0", "--model_version"),
])
def test_flags_an_era_does_not_record_are_unrecognized(sdk_of, models: dict[str, Path],
                                                       tmp_path: Path, version: str,
                                                       flag: str) -> None:
    value = {"--float_fallback": [], "--act_bitwidth": ["16"],
             "--act_quantizer_calibration": ["sqnr"], "--model_version": ["1.0"]}[flag]
    run = convert(sdk_of(version), "-i", models["tiny"], "-d", "x", "1,3,8,8",
                  "-o", tmp_path / "m.cpp", flag, *value)
    assert run.code == 2 and f"unrecognized arguments: {flag}" in run.stderr


def test_user_values_seen_in_real_records(converted) -> None:
    rec = record_of(converted("2.31.0", "--preserve_io", "layout", "--model_version", "1.0"))
    assert "; preserve_io=[['layout']]; " in rec
    assert "; model_version=1.0; " in rec
    assert "model_version=1.0" in real_record("vector_search-qairt2.29.cpp")


# ------------------------------------------------------------------ header variants

def test_windows_tool_path_pytorch_tool_and_extra_comment(sdk_of, models: dict[str, Path],
                                                         tmp_path: Path) -> None:
    sdk = sdk_of("2.22.6", tool_path_style="windows", extra_comment="Generated for a test",
                 record_values={"quantizer_log_level": "LogLevel.NONE"})
    cpp = tmp_path / "w.cpp"
    assert convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp).code == 0
    text = cpp.read_text()
    match = ANY_RECORD.search(text)
    assert match
    rec = match.group(1)
    assert re.match(r"C:\\Qualcomm\\AIStack\\QAIRT\\2\.22\.6\.\d{6}\\bin\\x86_64-windows-msvc"
                    r"\\qnn-onnx-converter act_bitwidth=8 act_bw=8 ", rec), rec[:140]
    assert " quantizer_log_level=LogLevel.NONE " in rec
    head = text[:text.index("/* Command Line used:")]
    assert head.startswith("/* COPYRIGHT HEADER GOES HERE")
    assert "/*\nGenerated for a test\n*/" in head
    assert json.loads(cpp.with_name("w_net.json").read_text())["converter_command"] == rec

    torch = sdk_of("2.40.0", tool_name="qnn-pytorch-converter",
                   record_values={"float_bitwidth": "8"})
    cpp2 = tmp_path / "t.cpp"
    assert convert(torch, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp2).code == 0
    match2 = ANY_RECORD.search(cpp2.read_text())
    assert match2
    rec2 = match2.group(1)
    assert rec2.startswith("qnn-pytorch-converter; act_bitwidth=8; ")
    assert "; float_bitwidth=8; float_bw=32; " in rec2            # a disagreeing pair (2.40)


# ------------------------------------------------------------------ the source

def _source_features(text: str) -> dict[str, object]:
    graph = re.search(r"  QnnModel (\w+);", text)
    return {
        "sdk_version_line": "QNN_SDK_VERSION" in text,
        "tensor_version": set(re.findall(r"\.version= (QNN_TENSOR_VERSION_\d)", text)),
        "data_format": set(re.findall(r"\.dataFormat= (QNN_TENSOR_DATA_FORMAT_\w+)", text)),
        "functions": bool(re.search(r"static ModelError_t addTensor_\w+\(QnnModel& model\)",
                                    text)),
        "add_tensor_comment": set(re.findall(r'addTensor\("\w+", // (\w+ Name)', text)),
        "graph_var_adds": bool(graph and f"{graph.group(1)}.addTensor(" in text),
        "compose": re.findall(r"ModelError_t (\w+)_composeGraphs\(", text),
    }


@pytest.mark.parametrize(("version", "real"), [
    ("2.18.0", "resnet18_int8-qairt2.18.cpp"),
    ("2.27.0", "passthrough-qairt2.27-head.cpp"),
    ("2.29.0", "vector_search-qairt2.29.cpp"),
    ("2.31.0", "naf_block_sota-qairt2.31.cpp"),
])
def test_source_has_the_features_of_the_real_source(converted, version: str,
                                                    real: str) -> None:
    ours = _source_features(converted(version).read_text())
    theirs = _source_features(real_output(real).read_text())
    if real.endswith("-head.cpp"):          # only the first lines: no composeGraphs
        ours.pop("compose")
        theirs.pop("compose")
    assert ours == theirs


def test_2_22_source_is_per_function_without_a_version_line(converted) -> None:
    features = _source_features(converted("2.22.6").read_text())
    assert features["functions"] and features["tensor_version"] == {"QNN_TENSOR_VERSION_2"}
    assert not features["sdk_version_line"]
    assert features["add_tensor_comment"] == {"Tensor Name"}


@pytest.mark.parametrize("version", ["2.18.0", "2.31.0"])
def test_overwrite_model_prefix_names_the_entry_points_after_the_graph(converted,
                                                                      version: str) -> None:
    cpp = converted(version, "--overwrite_model_prefix", name="ElementwiseAdd")
    text = cpp.read_text()
    assert "ModelError_t ElementwiseAdd_composeGraphs(" in text
    assert "ModelError_t ElementwiseAdd_freeGraphsInfo(" in text
    assert "QnnModel_composeGraphs" not in text and "QnnModel_freeGraphsInfo" not in text
    assert "overwrite_model_prefix=True" in record_of(cpp)
    plain = converted(version).read_text()
    assert "ModelError_t QnnModel_composeGraphs(" in plain


@pytest.mark.parametrize(("version", "suffix", "decimals"), [
    ("2.31.0", True, 16), ("2.45.0", False, 40),
])
def test_stamp_suffix_and_scale_decimals(converted, version: str, suffix: bool,
                                         decimals: int) -> None:
    text = converted(version).read_text()
    match = STAMP.search(text)
    assert match and match.group(1) == version and bool(match.group(3)) == suffix
    scales = re.findall(r"\.scale= -?\d+\.(\d+)f", text)
    assert scales and {len(s) for s in scales} == {decimals}
    real = STAMP.search(real_output("naf_block_sota-qairt2.31.cpp").read_text())
    assert real and real.group(3)


# ------------------------------------------------------------------ _net.json

def _net_features(data: dict) -> dict[str, object]:
    tensors = data["graph"]["tensors"].values()
    nodes = data["graph"]["nodes"].values()
    quant = [t["quant_params"] for t in tensors if "scale_offset" in t["quant_params"]]
    return {
        "top": set(data),
        "static_keys": {frozenset(t) for t in tensors if t["type"] == 4},
        "other_keys": {frozenset(t) for t in tensors if t["type"] != 4},
        "quant_keys": {frozenset(q) for q in quant},
        "scale_offset_keys": {frozenset(q["scale_offset"]) for q in quant},
        "node_keys": {frozenset(n) - {"macs_per_inference"} for n in nodes},
        "macs_type": {type(n["macs_per_inference"]) for n in nodes if "macs_per_inference" in n},
        "dynamic_dims": {repr(t.get("is_dynamic_dims")) for t in tensors},
    }


@pytest.mark.parametrize(("version", "real"), [
    ("2.10.0", "mobilenetv2-qairt2.10_net.json"),
    ("2.18.0", "resnet18_int8-qairt2.18_net.json"),
    ("2.29.0", "vector_search-qairt2.29_net.json"),
])
def test_net_json_has_the_keys_of_the_real_file(converted, version: str, real: str) -> None:
    ours = net_json_of(converted(version))
    theirs = json.loads(real_output(real).read_text())
    assert _net_features(ours) == _net_features(theirs)
    # the indentation of the real file (2 spaces in 2.10, tabs later)
    ours_text = converted(version).with_name("tiny_model_net.json").read_text()
    real_text = real_output(real).read_text()
    assert ours_text.splitlines()[1][:1] == real_text.splitlines()[1][:1]


def test_net_json_2_33_adds_permute_order_and_dynamic_dims_lists(converted) -> None:
    tensors = net_json_of(converted("2.33.0"))["graph"]["tensors"]
    for t in tensors.values():
        assert t["is_dynamic_dims"] == []
        assert sorted(t["permute_order_to_src"]) == list(range(len(t["dims"])))
    assert tensors["x"]["permute_order_to_src"] == [0, 3, 1, 2]       # NHWC back to NCHW
    assert "permute_order_to_src" not in json.dumps(net_json_of(converted("2.31.0")))


# ------------------------------------------------------------------ integer inputs

@pytest.fixture(scope="module")
def int_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_samples(tmp_path_factory.mktemp("int_cal"), {
        "a": ((1, 4), "float32"), "b": ((1, 4), "float32"), "ids": ((1, 4), "int64")}, 2)


def _ids(sdk: Path, model: Path, samples: Path, out: Path, *flags: str) -> tuple[str, dict]:
    cpp = out / "ns.cpp"
    run = convert(sdk, "-i", model, "-o", cpp, "--input_list", samples, *flags)
    assert run.code == 0, run.text
    dtype = re.search(r'\.name= "ids",\s*\n\s*\.type= \w+,\s*\n\s*\.dataFormat= \w+,\s*\n\s*'
                      r"\.dataType= QNN_DATATYPE_(\w+),", cpp.read_text())
    assert dtype
    return dtype.group(1), json.loads((out / "ns_net.json").read_text())["graph"]["tensors"]["ids"]


@pytest.mark.parametrize("version", ["2.10.0", "2.18.0", "2.31.0", "2.33.0"])
@pytest.mark.parametrize(("flags", "expected", "code"), [
    ([], "UFIXED_POINT_16", 1046),                            # the trap: quantized
    (["--input_dtype", "ids", "int32"], "INT_32", 50),         # real 2.33 run
    (["--input_encoding", "ids", "other"], "INT_32", 50),
])
def test_integer_input_quantized_or_kept_per_era(sdk_of, models: dict[str, Path],
                                                 int_samples: Path, tmp_path: Path,
                                                 version: str, flags: list[str],
                                                 expected: str, code: int) -> None:
    bw = ["--act_bitwidth", "16"] if version >= "2.14" else ["--act_bw", "16"]
    dtype, entry = _ids(sdk_of(version), models["nostatic"], int_samples, tmp_path,
                        *bw, *flags)
    assert dtype == expected and entry["data_type"] == code
    if version != "2.10.0":
        assert entry["is_quantizable"] is (expected != "INT_32")
        assert entry["unquantized_data_type"] == 50


def test_overrides_naming_an_input_quantize_it_despite_other(sdk: Path,
                                                             models: dict[str, Path],
                                                             int_samples: Path,
                                                             tmp_path: Path) -> None:
    """A real 2.18 run: ``input_encoding=[['input_data', 'other', 'bgr']]`` with AIMET
    overrides that name the input, and the input is UFIXED_POINT_8, is_overridden."""
    real = json.loads(real_output("resnet18_int8-qairt2.18_net.json").read_text())
    real_in = real["graph"]["tensors"]["input_data"]
    assert real_in["data_type"] == 1032 and real_in["quant_params"]["is_overridden"] is True
    assert "input_encoding=[['input_data', 'other', 'bgr']]" in real["converter_command"]
    enc = tmp_path / "ids.encodings"
    enc.write_text(json.dumps({"version": "0.6.1", "activation_encodings": {"ids": [{
        "bitwidth": 8, "dtype": "int", "is_symmetric": "False", "max": 99.0, "min": 0.0,
        "offset": 0, "scale": 0.3882}]}, "param_encodings": {}, "quantizer_args": {}}))
    dtype, entry = _ids(sdk, models["nostatic"], int_samples, tmp_path,
                        "--input_encoding", "ids", "other", "--quantization_overrides", enc)
    assert dtype == "UFIXED_POINT_8" and entry["quant_params"]["is_overridden"] is True
    assert entry["quant_params"]["scale_offset"]["scale"] == 0.3882
