"""The recipe catalogue and the per-layer overrides files: which recipes exist
for a SoC, the manifest YAML and converter flags each means, and the encodings
files read back by ``read_encodings`` and applied by the simulator path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import numpy_helper

from qnn_ci.diagnose.recipe_encodings import (
    float_encodings,
    int16_weight_encodings,
    resolve_focus,
    write_overrides,
)
from qnn_ci.diagnose.recipes import (
    CONVERTER_CALIBRATIONS,
    LAYERS_FLOAT,
    Candidate,
    catalogue,
    combine,
    flags_for,
    yaml_for,
)
from qnn_ci.errors import UserError
from qnn_ci.sdk.encodings import read_encodings
from qnn_ci.sim.overrides import overrides_from_encodings
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from qnn_ci.tables import SOCS, get_soc
from tests.diagnose.graphs import COLLAPSE_NODE, collapse_model, collapse_samples


@pytest.fixture(scope="module")
def collapse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collapse_model(tmp_path_factory.mktemp("recipes") / "collapse.onnx")


def _by_name(cands: list[Candidate]) -> dict[str, Candidate]:
    return {c.name: c for c in cands}


# ------------------------------------------------------------------ catalogue

def test_catalogue_lists_every_converter_calibration_and_measures_only_onnxruntimes() -> None:
    cands = _by_name(catalogue(QuantSettings(), get_soc("SM8550"), has_focus=True))
    # min-max is the export's own (None means min-max): not offered again
    assert "calibration_min-max" not in cands
    for method in set(CONVERTER_CALIBRATIONS) - {"min-max"}:
        c = cands[f"calibration_{method}"]
        assert c.settings == {"quantization.act_calibration": method}
        assert c.measurable == (method == "percentile")
        if not c.measurable:
            assert "not measurable on the simulator path" in c.note
    # entropy says why: onnxruntime's calibrator could only choose min-max's ranges
    assert "128 histogram bins for 128 quantized bins" in cands["calibration_entropy"].note
    assert cands["per_channel"].settings == {"quantization.per_channel": True}
    # W8A16 by default: 16-bit activations are no recipe
    assert "act_bitwidth_16" not in cands
    a8 = _by_name(catalogue(QuantSettings(act_bitwidth=8, per_channel=True,
                                          act_calibration="entropy"),
                            get_soc("SM8550"), has_focus=False))
    assert "per_channel" not in a8 and "calibration_entropy" not in a8
    assert "calibration_min-max" in a8 and a8["act_bitwidth_16"].settings == {
        "quantization.act_bitwidth": 16}
    assert "weights_16bit" not in a8 and LAYERS_FLOAT not in a8   # no focus layers


def test_cost_classes_put_free_recipes_first() -> None:
    from qnn_ci.diagnose.model import COST_16BIT, COST_FLOAT, COST_NONE
    from qnn_ci.diagnose.recipes import cost_rank

    cands = _by_name(catalogue(QuantSettings(act_bitwidth=8), get_soc("SM8550"),
                               has_focus=True))
    assert cands["per_channel"].cost == cands["calibration_percentile"].cost == COST_NONE
    assert cands["act_bitwidth_16"].cost == cands["weights_16bit"].cost == COST_16BIT
    assert cands[LAYERS_FLOAT].cost == COST_FLOAT
    assert cost_rank(COST_NONE) < cost_rank(COST_16BIT) < cost_rank(COST_FLOAT)
    pair = combine(cands["per_channel"], cands["weights_16bit"])
    assert pair is not None and pair.cost == COST_16BIT            # the dearest part's


def test_the_known_16bit_weights_rule() -> None:
    from qnn_ci.tables import int16_weights_refusal

    assert "v68 refuses" in (int16_weights_refusal(68, 16) or "")
    assert "v69 refuses" in (int16_weights_refusal(69, 16) or "")
    assert int16_weights_refusal(73, 16) is None and int16_weights_refusal(75, 16) is None
    assert "only with 16-bit activations" in (int16_weights_refusal(75, 8) or "")


@pytest.mark.parametrize("soc", [s.name for s in SOCS])
def test_float_layers_only_where_the_htp_has_fp16(soc: str) -> None:
    info = get_soc(soc)
    c = _by_name(catalogue(QuantSettings(), info, has_focus=True))[LAYERS_FLOAT]
    assert c.measurable == info.fp16
    if not info.fp16:
        assert c.settings == {} and "no FP16" in c.note and info.arch_name in c.note


def test_flags_and_yaml_mean_the_manifest_keys() -> None:
    settings = {"quantization.per_channel": True, "quantization.act_calibration": "mse",
                "quantization.overrides": "/w/recipes/weights_16bit.encodings"}
    assert flags_for(settings) == ["--use_per_channel_quantization",
                                   "--act_quantizer_calibration", "mse",
                                   "--quantization_overrides",
                                   "/w/recipes/weights_16bit.encodings"]
    assert yaml.safe_load(yaml_for(settings)) == {"quantization": {
        "per_channel": True, "act_calibration": "mse",
        "overrides": "/w/recipes/weights_16bit.encodings"}}
    assert yaml_for({"quantization.per_channel": True}) == "quantization:\n  per_channel: true\n"
    assert yaml_for({}) == "" and flags_for({"quantization.per_channel": False}) == []


def test_flags_are_the_ones_the_converter_command_passes() -> None:
    """The same flag names as qnn_ci.sdk.converter_cmd for the same manifest keys."""
    src = (Path(__file__).resolve().parents[2] / "qnn_ci" / "sdk" / "converter_cmd.py"
           ).read_text()
    flags = [f for f in flags_for({"quantization.per_channel": True,
                                   "quantization.act_calibration": "entropy",
                                   "quantization.act_bitwidth": 16,
                                   "quantization.overrides": "x"}) if f.startswith("--")]
    assert flags == ["--use_per_channel_quantization", "--act_quantizer_calibration",
                     "--act_bitwidth", "--quantization_overrides"]
    for flag in flags:
        # spelled literally there, or through the canonical bitwidth name
        assert f'"{flag}"' in src or f'f.bitwidth("{flag[2:]}"' in src, flag


def test_combine_joins_different_groups_only() -> None:
    cands = _by_name(catalogue(QuantSettings(), get_soc("SM8550"), has_focus=True))
    both = combine(cands["per_channel"], cands["calibration_percentile"])
    assert both is not None and both.name == "per_channel+calibration_percentile"
    assert both.settings == {"quantization.per_channel": True,
                             "quantization.act_calibration": "percentile"}
    assert combine(cands["calibration_entropy"], cands["calibration_percentile"]) is None
    assert combine(cands["weights_16bit"], cands[LAYERS_FLOAT]) is None
    assert combine(cands["per_channel"], cands["calibration_mse"]) is None  # not measurable
    assert combine(both, cands["calibration_percentile"]) is None
    assert combine(both, cands["weights_16bit"]) is not None


def test_16bit_weights_only_for_nodes_that_have_weights(collapse: Path) -> None:
    model = onnx.load(str(collapse))
    # flatten has no weights and no weighted producer within two nodes
    plan = resolve_focus(model, ["flatten"])
    assert plan.node_names == ["flatten"] and not plan.weights
    assert int16_weight_encodings(plan, per_channel=False) == {}
    # a weightless node two steps after a conv stands for it, named as the owner
    plan = resolve_focus(model, ["relu_b", "gap"])
    assert plan.weight_nodes == {"wb": "conv_b", "wc": "conv_c"}


# ------------------------------------------------------------ focus layers

def test_resolve_focus_by_node_tensor_or_unnamed_index(collapse: Path) -> None:
    model = onnx.load(str(collapse))
    plan = resolve_focus(model, ["conv_b", "b", "Conv#0", "Relu#9", "nowhere"])
    assert plan.node_names == ["conv_b", "conv_a"]           # "b" is conv_b again
    assert plan.unknown == ["Relu#9", "nowhere"]
    assert set(plan.weights) == {"wb", "wa"}                 # biases left out
    # a weightless focus node (relu_b) stands for the conv before it
    assert set(resolve_focus(model, ["relu_b"]).weights) == {"wb"}


def test_16bit_weights_file_reads_back_and_becomes_a_signed_16bit_override(
        collapse: Path, tmp_path: Path) -> None:
    model = onnx.load(str(collapse))
    plan = resolve_focus(model, [COLLAPSE_NODE])
    params = int16_weight_encodings(plan, per_channel=False)
    dst = tmp_path / "w16.encodings"
    assert write_overrides(dst, {}, params) == ""
    enc = read_encodings(dst)
    assert set(enc.params) == {"wb"} and enc.params["wb"][0].bitwidth == 16
    o = overrides_from_encodings(enc, model)
    from onnxruntime.quantization import QuantType

    (ov,) = o.overrides["wb"]
    assert ov["quant_type"] == QuantType.QInt16 and int(ov["zero_point"]) == 0
    wb = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "wb"))
    assert float(ov["scale"]) == pytest.approx(float(np.abs(wb).max()) / 32767)
    # per channel for a Conv when the export quantizes per channel
    pc = int16_weight_encodings(plan, per_channel=True)["wb"]
    assert len(pc) == wb.shape[0]
    write_overrides(dst, {}, {"wb": pc})
    o = overrides_from_encodings(read_encodings(dst), model)
    assert len(o.overrides["wb"]) == wb.shape[0] and o.overrides["wb"][0]["axis"] == 0


def test_float_file_keeps_the_layer_float_in_the_qdq_model(collapse: Path,
                                                            tmp_path: Path) -> None:
    model = onnx.load(str(collapse))
    acts, params = float_encodings(resolve_focus(model, [COLLAPSE_NODE]), model)
    assert set(acts) == {"b"} and set(params) == {"wb", "bb"}
    dst = tmp_path / "float.encodings"
    write_overrides(dst, acts, params)
    enc = read_encodings(dst)
    assert all(e[0].dtype == "float" for _, e in enc.entries())
    res = quantize_for_htp(collapse, tmp_path / "q" / "m.qdq.onnx", collapse_samples(2),
                           QuantSettings(overrides=dst))
    assert "sim.overrides.float" in {f.check for f in res.findings}
    assert res.overrides is not None and set(res.overrides.float_tensors) == {"b", "wb", "bb"}
    qdq = onnx.load(str(res.model))
    conv_b = next(n for n in qdq.graph.node if n.name == COLLAPSE_NODE)
    inits = {i.name: i for i in qdq.graph.initializer}
    assert conv_b.input[1] == "wb" and inits["wb"].data_type == onnx.TensorProto.FLOAT
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] == "b" for n in qdq.graph.node)


def test_float_node_without_a_name_is_named_to_be_excluded(tmp_path: Path) -> None:
    src = collapse_model(tmp_path / "m.onnx")
    model = onnx.load(str(src))
    model.graph.node[2].name = ""                             # conv_b, unnamed
    onnx.save(model, str(src))
    dst = tmp_path / "f.encodings"
    acts, params = float_encodings(resolve_focus(model, ["Conv#2"]), model)
    write_overrides(dst, acts, params)
    res = quantize_for_htp(src, tmp_path / "q" / "m.qdq.onnx", collapse_samples(2),
                           QuantSettings(overrides=dst))
    qdq = onnx.load(str(res.model))
    conv_b = next(n for n in qdq.graph.node if n.name == "Conv__b")
    assert conv_b.input[1] == "wb"


# ---------------------------------------------------------------- merging

def _existing_061(path: Path) -> Path:
    path.write_text(json.dumps({
        "version": "0.6.1",
        "activation_encodings": {"x": [{"bitwidth": 16, "dtype": "int", "is_symmetric": "False",
                                        "min": -4.0, "max": 4.0, "offset": -32768,
                                        "scale": 8.0 / 65535}]},
        "param_encodings": {"wb": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "True",
                                    "min": -1.0, "max": 1.0, "offset": -128,
                                    "scale": 2.0 / 255}]}}))
    return path


def test_merge_keeps_the_exports_entries_and_replaces_the_same_tensor(
        collapse: Path, tmp_path: Path) -> None:
    model = onnx.load(str(collapse))
    params = int16_weight_encodings(resolve_focus(model, [COLLAPSE_NODE]), per_channel=False)
    base = _existing_061(tmp_path / "mine.encodings")
    note = write_overrides(tmp_path / "out.encodings", {}, params, base=base)
    assert "mine.encodings" in note and "1 of its entries kept" in note and "replaced: wb" in note
    enc = read_encodings(tmp_path / "out.encodings")
    assert set(enc.activations) == {"x"} and enc.params["wb"][0].bitwidth == 16


def test_merge_into_a_100_layout_file_keeps_its_layout(collapse: Path, tmp_path: Path) -> None:
    model = onnx.load(str(collapse))
    acts, params = float_encodings(resolve_focus(model, [COLLAPSE_NODE]), model)
    base = tmp_path / "v1.encodings"
    base.write_text(json.dumps({"version": "1.0.0", "activation_encodings": [
        {"name": "x", "dtype": "INT", "enc_type": "PER_TENSOR", "bw": 16, "is_sym": False,
         "scale": [1e-4], "offset": [-32768]}], "param_encodings": []}))
    note = write_overrides(tmp_path / "out.encodings", acts, params, base=base)
    assert "1 of its entries kept" in note and "replaced" not in note
    raw = json.loads((tmp_path / "out.encodings").read_text())
    assert raw["version"] == "1.0.0" and isinstance(raw["param_encodings"], list)
    enc = read_encodings(tmp_path / "out.encodings")
    assert set(enc.activations) == {"x", "b"} and enc.activations["b"][0].dtype == "float"
    assert set(enc.params) == {"wb", "bb"}


def test_merge_refuses_a_200_layout_and_a_broken_file(tmp_path: Path) -> None:
    base = tmp_path / "v2.encodings"
    base.write_text(json.dumps({"version": "2.0.0", "encodings": [
        {"name": "x", "output_dtype": "uint16", "y_scale": 1e-4}]}))
    with pytest.raises(UserError, match=r"2\.0\.0 layout"):
        write_overrides(tmp_path / "out.encodings", {}, {"w": [{"bitwidth": 16}]}, base=base)
    broken = tmp_path / "broken.encodings"
    broken.write_text("{not json")
    with pytest.raises(UserError) as info:
        write_overrides(tmp_path / "out.encodings", {}, {}, base=broken)
    assert "broken.encodings" in info.value.oneline()


def test_overrides_skip_encodings_that_are_no_grid(collapse: Path) -> None:
    """Non-finite or non-positive scales, infinite offsets, empty ranges: skipped with
    a reason (they used to raise OverflowError), never an override."""
    from qnn_ci.sdk.encodings import Enc, Encodings

    model = onnx.load(str(collapse))
    enc = Encodings("f.encodings", "0.6.1", activations={
        "a": [Enc(16, scale=1e-4, offset=float("inf"))],
        "b": [Enc(16, scale=float("nan"), offset=0)],
        "c": [Enc(16, scale=0.0, offset=0)],
        "a_relu": [Enc(16, min=float("-inf"), max=1.0)],
        "b_relu": [Enc(16, min=2.0, max=1.0)],
        "c_relu": [Enc(16, scale=1e-4, offset=0)]})
    o = overrides_from_encodings(enc, model)
    assert o.applied == ["c_relu"]
    assert set(o.skipped) == {"a", "b", "c", "a_relu", "b_relu"}
    assert "finite offset" in o.skipped["a"] and "no range" in o.skipped["b_relu"]
