"""Converter output files: names and places, the .cpp shape (against a real 2.31
file), the .bin tar, ``_net.json`` keys and the dequantisation rule, log lines."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tests.standin_sdk.conftest import (
    ADD_NODE,
    ADD_TENSOR_FN,
    LOG_LINE,
    TENSOR_FIELDS,
    convert,
    real_output,
    tensors_of,
    write_samples,
)

# Decimal data type codes from the formats page table.
CODES = {"FLOAT_32": 562, "FLOAT_16": 534, "UFIXED_POINT_8": 1032, "UFIXED_POINT_16": 1046,
         "SFIXED_POINT_32": 818, "UINT_32": 306, "INT_32": 50, "INT_64": 100}
UNDEFINED = 2147483647


@pytest.fixture(scope="module")
def quantized(sdk: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, object]:
    out = tmp_path_factory.mktemp("q")
    samples = write_samples(out / "calib", {"x": ((1, 3, 8, 8), "float32")}, 3, style="plain")
    target = out / "qnn_model_dynamic"          # no extension on purpose
    run = convert(sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", target,
                  "--input_list", samples, "--act_bitwidth", "16", "--bias_bitwidth", "32")
    assert run.code == 0, run.text
    return {"run": run, "out": out, "cpp": target, "samples": samples}


def test_output_path_without_extension_is_used_as_is(quantized: dict) -> None:
    out = quantized["out"]
    assert (out / "qnn_model_dynamic").is_file()
    assert not (out / "qnn_model_dynamic.cpp").exists()
    assert (out / "qnn_model_dynamic.bin").is_file()
    assert (out / "qnn_model_dynamic_net.json").is_file()


def test_without_output_path_files_land_beside_the_input(sdk: Path, models: dict[str, Path],
                                                          tmp_path: Path) -> None:
    model = tmp_path / "beside.onnx"
    model.write_bytes(models["tiny"].read_bytes())
    run = convert(sdk, "-i", model, "-d", "x", "1,3,8,8", cwd=tmp_path.parent)
    assert run.code == 0, run.text
    for name in ("beside.cpp", "beside.bin", "beside_net.json"):
        assert (tmp_path / name).is_file(), name


def test_log_lines_and_success_lines(quantized: dict) -> None:
    lines = [ln for ln in quantized["run"].text.splitlines() if ln.strip()]
    assert lines and all(LOG_LINE.match(ln) for ln in lines), lines
    cpp = Path(quantized["cpp"]).resolve()
    assert f"INFO - Model CPP saved at: {cpp} " in lines[-3] and lines[-3].endswith(" ")
    assert "INFO - Model BIN saved at: " in lines[-2] and lines[-2].endswith(".bin ")
    assert lines[-1].endswith("INFO - Conversion complete!")


def test_cpp_has_the_shape_of_real_converter_output(quantized: dict) -> None:
    real = real_output("naf_block_sota-qairt2.31.cpp").read_text()
    ours = Path(quantized["cpp"]).read_text()
    for text in (real, ours):
        assert ADD_TENSOR_FN.search(text)
        assert ADD_NODE.search(text)
        kinds = {t for t, _ in tensors_of(text).values()}
        assert {"APP_WRITE", "STATIC", "NATIVE"} <= kinds
        assert "QnnModel_composeGraphs" in text and "QNN_API" in text
    # every tensor block in our file has the same field sequence as the real one
    assert len(TENSOR_FIELDS.findall(ours)) == ours.count(".dataType= QNN_DATATYPE_")
    assert set(ADD_TENSOR_FN.findall(ours)) == {"x", "conv1_weight", "conv1_bias"}
    assert ADD_NODE.findall(ours) == ["_conv1_Conv", "_relu_Relu", "gap", "flatten", "softmax"]


def test_tensor_names_are_sanitised(quantized: dict) -> None:
    names = tensors_of(Path(quantized["cpp"]).read_text())
    assert "_conv1_Conv_output_0" in names and "_relu_Relu_output_0" in names
    assert "conv1_weight" in names
    assert all(re.fullmatch(r"\w+", n) for n in names)


def test_bin_is_a_ustar_tar_of_the_static_tensors(quantized: dict) -> None:
    out = quantized["out"]
    statics = {n for n, (kind, _) in tensors_of(Path(quantized["cpp"]).read_text()).items()
               if kind == "STATIC" and not n.endswith(("_dilation", "_pad_amount", "_stride",
                                                       "_filter_size"))}
    for path in (out / "qnn_model_dynamic.bin", real_output("naf_block_sota-qairt2.31.bin")):
        raw = path.read_bytes()
        assert raw[257:263] == b"ustar\0", path       # POSIX ustar magic
        with tarfile.open(path) as tar:
            members = tar.getmembers()
            assert members and all(m.isfile() and m.name.endswith(".raw") for m in members)
    with tarfile.open(out / "qnn_model_dynamic.bin") as tar:
        sizes = {m.name: m.size for m in tar.getmembers()}
    assert set(sizes) == {f"{n}.raw" for n in statics}
    assert sizes["conv1_weight.raw"] == 8 * 3 * 3 * 3          # uint8 weights
    assert sizes["conv1_bias.raw"] == 8 * 4                    # int32 bias (bias bw 32)


def test_net_json_keys_and_codes(quantized: dict) -> None:
    data = json.loads((quantized["out"] / "qnn_model_dynamic_net.json").read_text())
    assert {"model.cpp", "model.bin", "converter_command", "copyright_str", "op_types",
            "graph"} <= set(data)
    assert {"tensors", "nodes"} <= set(data["graph"])
    tensors = data["graph"]["tensors"]
    for entry in tensors.values():
        assert {"id", "type", "dataFormat", "data_type", "dims", "quant_params"} <= set(entry)
        assert entry["type"] in (0, 1, 3, 4)
        assert isinstance(entry["data_type"], int)
    assert tensors["x"]["type"] == 0 and tensors["output"]["type"] == 1
    assert tensors["conv1_weight"]["type"] == 4 and tensors["_relu_Relu_output_0"]["type"] == 3
    assert tensors["x"]["data_type"] == CODES["UFIXED_POINT_16"]
    assert tensors["conv1_weight"]["data_type"] == CODES["UFIXED_POINT_8"]
    assert tensors["conv1_bias"]["data_type"] == CODES["SFIXED_POINT_32"]
    assert tensors["x"]["dims"] == [1, 8, 8, 3]          # spatial-first, as real files show
    # offsets are stored negative (zero representable), even for the all-positive softmax
    defined = [e["quant_params"]["scale_offset"] for e in tensors.values()
               if e["quant_params"]["definition"] == 1]
    assert len(defined) == 8 and all(so["offset"] <= 0 for so in defined)
    assert tensors["output"]["quant_params"]["definition"] == 1
    node = data["graph"]["nodes"]["_conv1_Conv"]
    assert {"package", "type", "tensor_params", "scalar_params", "input_names",
            "output_names", "macs_per_inference"} <= set(node)
    assert node["input_names"] == ["x", "conv1_weight", "conv1_bias"]


def test_weights_dequantise_with_negative_offsets(quantized: dict, models: dict[str, Path]
                                                  ) -> None:
    out = quantized["out"]
    enc = json.loads((out / "qnn_model_dynamic_net.json").read_text())["graph"]["tensors"][
        "conv1_weight"]["quant_params"]
    assert enc["definition"] == 1 and enc["encoding"] == 0
    scale, offset = enc["scale_offset"]["scale"], enc["scale_offset"]["offset"]
    assert scale > 0 and offset < 0
    with tarfile.open(out / "qnn_model_dynamic.bin") as tar:
        member = tar.extractfile("conv1_weight.raw")
        assert member is not None
        q = np.frombuffer(member.read(), dtype=np.uint8).reshape(3, 3, 3, 8)
    init = {i.name: numpy_helper.to_array(i) for i in onnx.load(models["tiny"]).graph.initializer}
    hwio = np.transpose(init["conv1.weight"], (2, 3, 1, 0))
    real = (q.astype(np.float64) + offset) * scale
    assert np.max(np.abs(real - hwio)) <= scale * 0.51


def _covers(so: dict, lo: float, hi: float, bits: int) -> bool:
    enc_lo = so["offset"] * so["scale"]
    enc_hi = (so["offset"] + (1 << bits) - 1) * so["scale"]
    return enc_lo <= lo + so["scale"] and enc_hi >= hi - so["scale"]


def test_activation_encodings_cover_the_calibration_data(quantized: dict,
                                                         models: dict[str, Path]) -> None:
    raws = sorted((quantized["out"] / "calib").glob("x_*.raw"))
    xs = [np.fromfile(p, dtype=np.float32).reshape(1, 3, 8, 8) for p in raws]
    session = ort.InferenceSession(str(models["tiny"]), providers=["CPUExecutionProvider"])
    ys = np.concatenate([session.run(["output"], {"x": x})[0].ravel() for x in xs])
    x_all = np.concatenate([x.ravel() for x in xs])
    tensors = json.loads((quantized["out"] / "qnn_model_dynamic_net.json").read_text())[
        "graph"]["tensors"]
    x_enc = tensors["x"]["quant_params"]["scale_offset"]
    y_enc = tensors["output"]["quant_params"]["scale_offset"]
    assert x_enc["bitwidth"] == y_enc["bitwidth"] == 16
    assert _covers(x_enc, float(x_all.min()), float(x_all.max()), 16)
    assert _covers(y_enc, float(ys.min()), float(ys.max()), 16)   # softmax: all positive
    # min-max: the range is not wider than the data plus zero
    span = float(x_all.max()) - min(float(x_all.min()), 0.0)
    assert x_enc["scale"] * 65535 <= span * 1.01


def test_no_static_tensors_no_bin(sdk: Path, models: dict[str, Path], tmp_path: Path) -> None:
    run = convert(sdk, "-i", models["nostatic"], "-o", tmp_path / "ns.cpp")
    assert run.code == 0, run.text
    assert (tmp_path / "ns.cpp").is_file() and not (tmp_path / "ns.bin").exists()
    assert re.search(r" - WARNING - .*static", run.text)
    assert "Model BIN saved at" not in run.text


def test_numeric_names_get_a_leading_underscore_as_in_real_231(sdk: Path,
                                                               tmp_path: Path) -> None:
    real = real_output("naf_block_sota-qairt2.31.cpp").read_text()
    assert "out_names=['73']" in real and tensors_of(real)["_73"][0] == "APP_READ"
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["input.1"], ["73"], name="Relu_0")], "numeric",
        [onnx.helper.make_tensor_value_info("input.1", onnx.TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("73", onnx.TensorProto.FLOAT, [1, 4])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "numeric.onnx")
    run = convert(sdk, "-i", tmp_path / "numeric.onnx", "-o", tmp_path / "numeric.cpp")
    assert run.code == 0, run.text
    cpp = (tmp_path / "numeric.cpp").read_text()
    assert "out_names=['73']" in cpp
    assert tensors_of(cpp) == {"input_1": ("APP_WRITE", "FLOAT_32"),
                               "_73": ("APP_READ", "FLOAT_32")}
