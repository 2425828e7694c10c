"""Quantization behaviour: float without an input list, FP16 only when asked,
integer inputs, AIMET overrides in the three layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.standin_sdk.conftest import convert, record_of, tensors_of, write_samples

FP16_AUDIT = ("FLOAT_16", "float16", "QNN_DATATYPE_FLOAT_16")   # the seed's grep


def fp16_hits(cpp: Path) -> int:
    text = cpp.read_text().lower()
    return sum(text.count(word.lower()) for word in FP16_AUDIT[:2])


def data_types(cpp: Path) -> dict[str, str]:
    return {name: dt for name, (_, dt) in tensors_of(cpp.read_text()).items()}


@pytest.fixture(scope="module")
def tiny_list(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_samples(tmp_path_factory.mktemp("tl"), {"x": ((1, 3, 8, 8), "float32")}, 2)


def test_no_input_list_skips_quantization(sdk: Path, models: dict[str, Path],
                                          tmp_path: Path) -> None:
    cpp = tmp_path / "f.cpp"
    run = convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp)
    assert run.code == 0, run.text
    assert "Skipping quantization, no input_list provided" in run.text
    types = data_types(cpp)
    assert {dt for n, dt in types.items() if not n.startswith("_conv1_Conv_")
            and not n.startswith("gap_")} == {"FLOAT_32"}
    assert "input_list=None" in record_of(cpp)
    assert fp16_hits(cpp) == 0


def test_quantized_default_has_no_fp16(sdk: Path, models: dict[str, Path], tiny_list: Path,
                                       tmp_path: Path) -> None:
    cpp = tmp_path / "q.cpp"
    run = convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp,
                  "--input_list", tiny_list, "--float_fallback")
    assert run.code == 0, run.text
    assert fp16_hits(cpp) == 0
    assert "float_fallback=True" in record_of(cpp)


def test_float_fallback_fp16_on_the_real_classifier(sdk: Path, cls_model: Path,
                                                    tmp_path: Path) -> None:
    samples = write_samples(tmp_path / "calib", {"x": ((1, 3, 48, 192), "float32")}, 2)
    cpp = tmp_path / "cls.cpp"
    run = convert(sdk, "-i", cls_model, "-d", "x", "1,3,48,192", "-o", cpp,
                  "--input_list", samples, "--float_fallback", "--float_bw", "16")
    assert run.code == 0, run.text
    types = data_types(cpp)
    fp16 = {n for n, dt in types.items() if dt == "FLOAT_16"}
    # the stand-in keeps the Softmax output (the graph output after Identity) in float
    assert fp16 == {"save_infer_model_scale_0_tmp_1"}
    assert "UFIXED_POINT_8" in set(types.values())
    assert "float_bitwidth=16; float_bw=16" in record_of(cpp)


def test_float_bitwidth_16_without_quantization(sdk: Path, models: dict[str, Path],
                                                tmp_path: Path) -> None:
    cpp = tmp_path / "h.cpp"
    run = convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp,
                  "--float_bitwidth", "16")
    assert run.code == 0, run.text
    types = data_types(cpp)
    assert types["x"] == types["conv1_weight"] == types["output"] == "FLOAT_16"


def test_float16_graph_converts_to_fp16(sdk: Path, models: dict[str, Path],
                                        tmp_path: Path) -> None:
    cpp = tmp_path / "half.cpp"
    run = convert(sdk, "-i", models["half"], "-o", cpp)
    assert run.code == 0, run.text
    types = data_types(cpp)
    assert types["x"] == types["w"] == types["y"] == "FLOAT_16"


@pytest.mark.parametrize(("flags", "expected"), [
    ([], "UFIXED_POINT_8"),                                   # quantized like any activation
    (["--input_encoding", "ids", "other"], "INT_32"),
    (["--input_encoding", "ids", "other", "--keep_int64_inputs"], "INT_64"),
])
def test_integer_inputs(sdk: Path, models: dict[str, Path], tmp_path: Path, flags: list[str],
                        expected: str) -> None:
    samples = write_samples(tmp_path / "calib", {"a": ((1, 4), "float32"),
                                                 "b": ((1, 4), "float32"),
                                                 "ids": ((1, 4), "int64")}, 2, style="plain")
    lines = samples.read_text()
    samples.write_text("# out\n" + lines)                       # optional leading # line
    cpp = tmp_path / "ns.cpp"
    run = convert(sdk, "-i", models["nostatic"], "-o", cpp, "--input_list", samples, *flags)
    assert run.code == 0, run.text
    types = data_types(cpp)
    assert types["ids"] == expected
    assert types["a"] == "UFIXED_POINT_8"


ENCODINGS = {
    "0.6.1": {"version": "0.6.1",
              "activation_encodings": {"x": [{"bitwidth": 16, "dtype": "int",
                                              "is_symmetric": "False", "max": 6.0, "min": 0.0,
                                              "offset": 0, "scale": 9.155e-05}]},
              "param_encodings": {"conv1.weight": [
                  {"bitwidth": 8, "dtype": "int", "is_symmetric": "True", "max": 1.0,
                   "min": -1.0, "offset": -128, "scale": 0.0078}] * 8},
              "quantizer_args": {}},
    "1.0.0": {"version": "1.0.0",
              "activation_encodings": [{"name": "x", "dtype": "INT", "enc_type": "PER_TENSOR",
                                        "bw": 16, "is_sym": False, "scale": [9.155e-05],
                                        "offset": [0]}],
              "param_encodings": [{"name": "conv1.weight", "dtype": "INT",
                                   "enc_type": "PER_CHANNEL", "bw": 8, "is_sym": True,
                                   "scale": [0.0078] * 8, "offset": [-128] * 8}],
              "quantizer_args": {}},
    "2.0.0": {"version": "2.0.0", "producer": {"name": "aimet"},
              "encodings": [{"name": "x", "output_dtype": "uint16", "y_scale": 9.155e-05,
                             "y_zero_point": 0},
                            {"name": "conv1.weight", "output_dtype": "int8",
                             "y_scale": [0.0078] * 8, "axis": 0}]},
}


@pytest.mark.parametrize("version", sorted(ENCODINGS))
def test_quantization_overrides(sdk: Path, models: dict[str, Path], tiny_list: Path,
                                tmp_path: Path, version: str) -> None:
    enc_file = tmp_path / "model.encodings"
    enc_file.write_text(json.dumps(ENCODINGS[version]))
    cpp = tmp_path / "ov.cpp"
    run = convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp,
                  "--input_list", tiny_list, "--act_bw", "8",
                  "--quantization_overrides", enc_file)
    assert run.code == 0, run.text
    assert f"quantization_overrides={enc_file};" in record_of(cpp)
    tensors = json.loads((tmp_path / "ov_net.json").read_text())["graph"]["tensors"]
    x = tensors["x"]["quant_params"]["scale_offset"]
    assert (x["bitwidth"], x["scale"], x["offset"]) == (16, 9.155e-05, 0)
    weight = tensors["conv1_weight"]["quant_params"]
    assert weight["encoding"] == 1
    assert weight["axis_scale_offset"]["num_scale_offsets"] == 8
    assert {so["scale"] for so in weight["axis_scale_offset"]["scale_offsets"]} == {0.0078}
    # a tensor the file does not name is calibrated at --act_bw
    relu = tensors["_relu_Relu_output_0"]["quant_params"]["scale_offset"]
    assert relu["bitwidth"] == 8
