"""AIMET .encodings: the three layouts, malformed files, coverage on a real model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from qnn_ci.errors import UserError
from qnn_ci.sdk.encodings import read_encodings
from qnn_ci.sdk.encodings_coverage import bitwidth_mismatches, coverage, float_entries, load_model


def write(tmp_path: Path, data: Any, name: str = "m.encodings") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, "utf-8")
    return path


def enc_061(acts: list[str], params: list[str], *, act_bw: int = 16, channels: int = 2
            ) -> dict[str, Any]:
    """0.6.1 layout from the page: dicts keyed by name, is_symmetric a STRING."""
    act = {"bitwidth": act_bw, "dtype": "int", "is_symmetric": "False", "max": 6.0,
           "min": 0.0, "offset": 0, "scale": 9.155e-05}
    par = {"bitwidth": 8, "dtype": "int", "is_symmetric": "True", "max": 0.5, "min": -0.5,
           "offset": -128, "scale": 0.0039}
    return {"version": "0.6.1",
            "activation_encodings": {n: [dict(act)] for n in acts},
            "param_encodings": {n: [dict(par) for _ in range(channels)] for n in params},
            "quantizer_args": {"activation_bitwidth": act_bw, "param_bitwidth": 8,
                               "dtype": "int", "is_symmetric": "True"}}


def enc_100(acts: list[str], params: list[str]) -> dict[str, Any]:
    return {"version": "1.0.0",
            "activation_encodings": [
                {"name": n, "dtype": "INT", "enc_type": "PER_TENSOR", "bw": 16,
                 "is_sym": False, "scale": [9.155e-05], "offset": [0]} for n in acts],
            "param_encodings": [
                {"name": n, "dtype": "INT", "enc_type": "PER_CHANNEL", "bw": 8,
                 "is_sym": True, "scale": [0.01, 0.02, 0.03], "offset": [-128, -128, -128]}
                for n in params],
            "quantizer_args": {}}


def enc_200(names: list[str]) -> dict[str, Any]:
    return {"version": "2.0.0", "producer": {"name": "aimet", "version": "2.9.0"},
            "encodings": [{"name": n, "output_dtype": "uint16", "y_scale": 0.01,
                           "y_zero_point": 41} for n in names]}


def test_061(tmp_path: Path) -> None:
    enc = read_encodings(write(tmp_path, enc_061(["x", "y"], ["conv.weight"], channels=3)))
    assert enc.version == "0.6.1"
    assert set(enc.activations) == {"x", "y"} and set(enc.params) == {"conv.weight"}
    a = enc.activations["x"][0]
    assert (a.bitwidth, a.symmetric, a.min, a.max, a.scale, a.offset) == (
        16, False, 0.0, 6.0, 9.155e-05, 0)
    w = enc.params["conv.weight"]
    assert len(w) == 3 and w[0].symmetric is True and w[0].enc_type == "PER_CHANNEL"
    assert enc.bitwidths == {8, 16}


def test_100_per_channel_block_lpbq(tmp_path: Path) -> None:
    data = enc_100(["x"], ["conv.weight"])
    data["param_encodings"] += [
        {"name": "fc.weight", "dtype": "INT", "enc_type": "PER_BLOCK", "bw": 4,
         "is_sym": True, "block_size": 64, "scale": [0.1, 0.2, 0.3, 0.4],
         "offset": [-8, -8, -8, -8]},
        {"name": "lm.weight", "dtype": "INT", "enc_type": "LPBQ", "bw": 4, "is_sym": True,
         "block_size": 64, "compressed_bw": 4, "per_block_int_scale": [3, 5],
         "scale": [0.001, 0.002], "offset": [-8, -8]}]
    enc = read_encodings(write(tmp_path, data))
    assert enc.version == "1.0.0"
    assert [e.scale for e in enc.params["conv.weight"]] == [0.01, 0.02, 0.03]
    assert enc.params["conv.weight"][0].enc_type == "PER_CHANNEL"
    assert enc.params["fc.weight"][0].block_size == 64 and len(enc.params["fc.weight"]) == 4
    assert enc.params["lm.weight"][0].enc_type == "LPBQ"
    assert enc.activations["x"][0].min is None          # no min/max in 1.0.0
    assert enc.bitwidths == {4, 8, 16}


def test_200_and_210(tmp_path: Path) -> None:
    data = enc_200(["x"])
    data["encodings"] += [
        {"name": "w", "output_dtype": "int8", "y_scale": [0.01, 0.02], "axis": 0},
        {"name": "b", "output_dtype": "int32", "y_scale": [0.01, 0.02],
         "y_zero_point": [0, 0], "axis": 0},
        {"name": "blk", "output_dtype": "int4", "y_scale": [[0.1, 0.2], [0.3, 0.4]],
         "axis": 1, "block_size": 32},
        {"name": "meta", "output_dtype": "int4", "axis": 1, "block_size": 32,
         "y_scale": {"x": [[3, 5]], "x_scale": [0.001], "axis": 0}},
        {"name": "h", "output_dtype": "float8e4m3fn", "y_scale": 1.0}]
    enc = read_encodings(write(tmp_path, data))
    assert enc.version == "2.0.0" and not enc.activations and not enc.params
    x = enc.unclassified["x"][0]
    assert (x.bitwidth, x.scale, x.offset) == (16, 0.01, -41)   # offset = -zero_point
    assert [e.axis for e in enc.unclassified["w"]] == [0, 0]
    assert enc.unclassified["w"][0].enc_type == "PER_CHANNEL"
    assert len(enc.unclassified["blk"]) == 4 and enc.unclassified["blk"][0].enc_type == "PER_BLOCK"
    assert enc.unclassified["meta"][0].enc_type == "LPBQ"
    assert enc.unclassified["h"][0].dtype == "float"
    assert enc.bitwidths == {4, 8, 16, 32}


def test_layout_without_version_is_read_by_layout(tmp_path: Path) -> None:
    data = enc_061(["x"], [])
    del data["version"]
    enc = read_encodings(write(tmp_path, data))
    assert enc.version == "0.6.1" and "no version key" in enc.notes[0]


@pytest.mark.parametrize("mutate, where, what", [
    (lambda d: d["activation_encodings"][3].__setitem__("bw", "8"),
     "activation_encodings[3].bw", "expected an integer"),
    (lambda d: d["param_encodings"][0].__setitem__("enc_type", "PER_GALAXY"),
     "param_encodings[0].enc_type", "expected one of"),
    (lambda d: d["param_encodings"][0].pop("scale"),
     "param_encodings[0].scale", "missing"),
    (lambda d: d["param_encodings"][0].__setitem__("offset", [1]),
     "param_encodings[0].offset", "1 values for 3 scales"),
    (lambda d: d["activation_encodings"][1].pop("name"),
     "activation_encodings[1].name", "missing"),
    (lambda d: d["activation_encodings"][2]["scale"].__setitem__(0, "big"),
     "activation_encodings[2].scale[0]", "expected a number"),
])
def test_malformed_100_names_json_path(tmp_path: Path, mutate: Any, where: str,
                                       what: str) -> None:
    data = enc_100(["a", "b", "c", "d"], ["conv.weight"])
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(UserError) as err:
        read_encodings(path)
    line = err.value.oneline()
    assert line.startswith(f"{path}: {where}: ") and what in line and "\n" not in line


def test_malformed_061_and_200(tmp_path: Path) -> None:
    data = enc_061(["x"], ["conv.weight"])
    data["param_encodings"]["conv.weight"][1]["is_symmetric"] = "maybe"
    with pytest.raises(UserError, match=r"param_encodings\['conv.weight'\]\[1\].is_symmetric"):
        read_encodings(write(tmp_path, data))
    data2 = enc_200(["x"])
    data2["encodings"][0]["output_dtype"] = "bogus"
    with pytest.raises(UserError, match=r"encodings\[0\].output_dtype: unknown data type"):
        read_encodings(write(tmp_path, data2))
    data3 = enc_200(["x"])
    del data3["encodings"][0]["y_scale"]
    with pytest.raises(UserError, match=r"encodings\[0\].y_scale: missing"):
        read_encodings(write(tmp_path, data3))


@pytest.mark.parametrize("content, what", [
    ("{not json", "not valid JSON"),
    ("[]", "expected an object"),
    ('{"version": "1.0.0"}', "not an AIMET encodings file"),
])
def test_not_an_encodings_file(tmp_path: Path, content: str, what: str) -> None:
    with pytest.raises(UserError, match=what):
        read_encodings(write(tmp_path, content))


def test_bad_json_message_is_about_encodings(tmp_path: Path) -> None:
    path = write(tmp_path, '{"version": "1.0.0",')
    with pytest.raises(UserError) as err:
        read_encodings(path)
    text = err.value.oneline()
    assert text.startswith(f"{path}: not valid JSON (line 1, column 21: ")
    assert "AIMET .encodings file" in text and "_net.json" not in text
    assert "generated source" not in text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="encodings file not found"):
        read_encodings(tmp_path / "nope.encodings")


# -- coverage on the real PP-OCR classifier ------------------------------------

@pytest.fixture(scope="module")
def cls(cls_model: Path) -> onnx.ModelProto:
    return load_model(cls_model)


def _cls_names(model: onnx.ModelProto) -> tuple[list[str], list[str], list[str]]:
    """Conv outputs, conv weights (Constant-node outputs), int64 constants."""
    g = model.graph
    convs = [n for n in g.node if n.op_type == "Conv"]
    ints = [n.output[0] for n in g.node if n.op_type == "Constant"
            and n.attribute[0].t.data_type == onnx.TensorProto.INT64]
    return [n.output[0] for n in convs], [n.input[1] for n in convs], ints


@pytest.mark.parametrize("layout", ["0.6.1", "1.0.0", "2.0.0"])
def test_coverage_matching_file(tmp_path: Path, cls: onnx.ModelProto, layout: str) -> None:
    conv_outs, conv_ws, int_consts = _cls_names(cls)
    acts, params = ["x", *conv_outs[:5]], conv_ws[:5]
    data = {"0.6.1": lambda: enc_061(acts, params), "1.0.0": lambda: enc_100(acts, params),
            "2.0.0": lambda: enc_200(acts + params)}[layout]()
    cov = coverage(read_encodings(write(tmp_path, data)), cls)
    assert cov.unknown == [] and not cov.none_match
    assert sorted(cov.file_activations) == sorted(acts)   # 2.0.0 sorted by the model
    assert sorted(cov.file_params) == sorted(params)
    assert cov.counts["covered_activations"] == 6 and cov.counts["covered_params"] == 5
    assert "x" not in cov.uncovered
    # a Conv output that a BatchNorm follows is folded away: derived, not a gap
    assert cov.derived[conv_outs[5]] == "fused" and conv_outs[5] not in cov.uncovered
    hardswish = [n.output[0] for n in cls.graph.node if n.op_type == "Div"]
    assert set(hardswish) <= set(cov.uncovered_activations)   # real gaps: calibrated
    assert conv_ws[5] in cov.uncovered_params
    assert not set(int_consts) & set(cov.uncovered)        # integer constants are not weights
    shape_out = next(n.output[0] for n in cls.graph.node if n.op_type == "Shape")
    assert shape_out not in cov.uncovered                  # an int64 activation: not quantized
    assert cov.counts["untyped"] == 0


def test_file_for_a_different_model(tmp_path: Path, cls: onnx.ModelProto) -> None:
    # names of the 2.31 NAF-block model (its ONNX input, weights, output)
    data = enc_100(["input.1", "73"], ["conv0.weight", "conv0.bias"])
    cov = coverage(read_encodings(write(tmp_path, data)), cls)
    assert cov.none_match
    assert cov.unknown == ["73", "conv0.bias", "conv0.weight", "input.1"]
    assert cov.counts["known"] == 0 and cov.counts["covered_activations"] == 0


def test_sanitised_names_are_recognised(tmp_path: Path, cls: onnx.ModelProto) -> None:
    out = cls.graph.output[0].name                           # save_infer_model/scale_0.tmp_1
    data = enc_061(["x", "save_infer_model_scale_0_tmp_1"], [])
    cov = coverage(read_encodings(write(tmp_path, data)), cls)
    assert cov.unknown == ["save_infer_model_scale_0_tmp_1"] and not cov.none_match
    assert cov.sanitised == {"save_infer_model_scale_0_tmp_1": out}


def test_bitwidth_mismatches_and_float(tmp_path: Path, cls: onnx.ModelProto) -> None:
    conv_outs, conv_ws, _ = _cls_names(cls)
    data = enc_061(["x", conv_outs[0]], conv_ws[:2], act_bw=8)
    data["activation_encodings"][conv_outs[1]] = [{"bitwidth": 16, "dtype": "float"}]
    enc = read_encodings(write(tmp_path, data))
    cov = coverage(enc, cls)
    mism = bitwidth_mismatches(enc, cov, act_bitwidth=16, weights_bitwidth=8, bias_bitwidth=32)
    assert [t for t, _ in mism] == ["x", conv_outs[0]]
    assert "activation x: encodings bitwidth 8, export asks 16" == mism[0][1]
    assert bitwidth_mismatches(enc, cov, act_bitwidth=8, weights_bitwidth=8,
                               bias_bitwidth=32) == []
    assert float_entries(enc) == [(conv_outs[1], 16)]


def test_bad_model_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="model not found"):
        load_model(tmp_path / "none.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(UserError, match="cannot read ONNX model"):
        load_model(bad)


# -- files that are not (plain) AIMET exports -----------------------------------

TORCH_SIDECAR = {"version": "0.6.1",
                 "activation_encodings": {"conv1": {"input": {"0": {"bitwidth": 8}},
                                                    "output": {"0": {"bitwidth": 8}}}},
                 "param_encodings": {"conv1.weight": [{"bitwidth": 8, "dtype": "int"}]},
                 "excluded_layers": [], "quantizer_args": {}}


@pytest.mark.parametrize("name, data", [
    ("m_torch.encodings", TORCH_SIDECAR),
    ("other_name.encodings", TORCH_SIDECAR),                       # recognised by content
    ("m_torch.encodings", {"version": "0.6.1", "activation_encodings": {},
                           "param_encodings": {"conv1.weight": [{"bitwidth": 8}]}})])
def test_pytorch_sidecar_is_named(tmp_path: Path, name: str, data: Any,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from qnn_ci.cli import main

    path = write(tmp_path, data, name)
    with pytest.raises(UserError) as err:
        read_encodings(path)
    assert err.value.oneline() == (
        f"{path}: this is AIMET's PyTorch sidecar (keyed by module names, not ONNX tensor "
        f"names), not an input of qnn-onnx-converter; pass the .encodings file exported "
        f"beside it")
    assert main(["encodings", str(path)]) == 2
    assert "PyTorch sidecar" in capsys.readouterr().err


def test_block_quantization_lists_are_read(tmp_path: Path) -> None:
    enc = read_encodings(write(tmp_path, {"version": "2.0.0", "encodings": [
        {"name": "w", "output_dtype": "int4", "y_scale": [[0.5, 0.25], [0.125, 1.0]],
         "y_zero_point": 0, "axis": [0, 1], "block_size": [1, 64]}]}))
    encs = enc.unclassified["w"]
    assert len(encs) == 4 and {e.enc_type for e in encs} == {"PER_BLOCK"}
    assert encs[0].axes == [0, 1] and encs[0].block_shape == [1, 64]
    assert encs[0].bitwidth == 4 and encs[2].scale == 0.125


def test_block_quantization_list_of_non_integers_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, {"version": "2.0.0", "encodings": [
        {"name": "w", "output_dtype": "int4", "y_scale": [0.5], "block_size": [1, "x"]}]})
    with pytest.raises(UserError) as err:
        read_encodings(path)
    assert err.value.oneline() == (f"{path}: encodings[0].block_size[1]: block quantization "
                                   f"block_size: expected an integer, got 'x'")


@pytest.mark.parametrize("data", [
    {"inputs": {"x": {"bitwidth": 8}}, "outputs": {}},
    {"activation_encodings": {}, "param_encodings": {}, "inputs": [], "outputs": []}])
def test_overrides_with_inputs_outputs_sections_are_not_read_as_empty(
        tmp_path: Path, data: Any) -> None:
    path = write(tmp_path, data)
    with pytest.raises(UserError) as err:
        read_encodings(path)
    text = err.value.oneline()
    assert "not an AIMET encodings file" in text or \
        "not an AIMET .encodings layout (0.6.1, 1.0.0, 2.0.0); read as 0.6.1 it would give " \
        "0 entries" in text
