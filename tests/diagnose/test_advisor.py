"""The recipe advisor on a real model whose middle conv's per-tensor 8-bit weights
collapse (tests/diagnose/graphs.py), quantized by onnxruntime and run on
onnxruntime CPU (and once on the HTP simulator): per_channel fixes it, is
measured and ranked first; float layers only where the SoC has FP16; the 16-bit
layer recipe's file changes the QDQ model; the budget skips recipes by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml

from qnn_ci.diagnose.advisor import advise
from qnn_ci.diagnose.model import recipe_line
from qnn_ci.sdk.encodings import read_encodings
from qnn_ci.sim.numerics import cpu_session, run_all
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from qnn_ci.spec import Thresholds
from qnn_ci.tables import get_soc
from tests.diagnose.graphs import COLLAPSE_NODE, collapse_model, collapse_samples
from tests.sim.conftest import needs_sim

FOCUS = [COLLAPSE_NODE, "relu_b"]     # the first divergence's node and a worst jump


def _cosine(a: Any, b: Any) -> float:
    import numpy as np

    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b / (na * nb)) if na and nb else 0.0


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The model, its samples and the export's own (failing) baseline on QDQ CPU."""
    folder = tmp_path_factory.mktemp("advisor")
    model = collapse_model(folder / "collapse.onnx")
    calibration, held_out = collapse_samples(8, seed=1), collapse_samples(3, seed=2)
    base = quantize_for_htp(model, folder / "base" / "m.qdq.onnx", calibration, QuantSettings())
    ref = run_all(cpu_session(model), held_out)[0]
    qdq = run_all(cpu_session(base.model), held_out)[0]
    baseline = min(_cosine(r["logits"], q["logits"]) for r, q in zip(ref, qdq, strict=True))
    assert baseline < 0.99                  # the export's own settings fail
    return {"model": model, "calibration": calibration, "held_out": held_out,
            "baseline": {"cosine": baseline}, "folder": folder}


def _advise(m: dict[str, Any], out: str, *, soc: str = "SM8550", budget_s: float = 600.0,
            simulate: bool = False, thresholds: Thresholds | None = None,
            base: QuantSettings | None = None, progress: Any = None) -> list[Any]:
    return advise(float_model=m["model"], calibration=m["calibration"],
                  held_out=m["held_out"], base=base or QuantSettings(), soc=get_soc(soc),
                  thresholds=thresholds or Thresholds(), focus_nodes=FOCUS,
                  baseline=m["baseline"], out_dir=m["folder"] / out, budget_s=budget_s,
                  simulate=simulate, progress=progress)


@pytest.fixture(scope="module")
def sm8550(material: dict[str, Any]) -> dict[str, Any]:
    lines: list[str] = []
    recipes = _advise(material, "sm8550", progress=lines.append)
    return {"recipes": recipes, "by": {r.name: r for r in recipes}, "lines": lines}


def test_per_channel_passes_is_measured_better_and_ranked_first(
        sm8550: dict[str, Any], material: dict[str, Any]) -> None:
    recipes, pc = sm8550["recipes"], sm8550["by"]["per_channel"]
    assert pc.passes and pc.measured_on == "qdq-cpu"
    assert pc.worst["cosine"] > 0.99 > material["baseline"]["cosine"]
    assert pc.baseline == material["baseline"]
    assert next(r.name for r in recipes if r.passes) == "per_channel"
    assert recipes[0] is pc                                  # passing recipes first
    assert yaml.safe_load(pc.yaml) == {"quantization": {"per_channel": True}}
    assert pc.flags == ["--use_per_channel_quantization"]
    assert pc.settings == {"quantization.per_channel": True}
    line = recipe_line(pc)
    assert line.startswith("per_channel: true → worst cosine ") and line.endswith("passes")
    assert pc.duration_s > 0 and Path(pc.files["qdq_model"]).is_file()


def test_ranking_passes_first_then_the_failing_metric(sm8550: dict[str, Any]) -> None:
    measured = [r for r in sm8550["recipes"] if r.worst]
    verdicts = [r.passes for r in measured]
    assert verdicts == sorted(verdicts, reverse=True)
    for group in (True, False):
        values = [r.worst["cosine"] for r in measured if r.passes is group]
        assert values == sorted(values, reverse=True)
    # recipes without a number come last, each saying why
    tail = sm8550["recipes"][len(measured):]
    assert {r.name for r in tail} == {"calibration_mse", "calibration_sqnr"}
    assert all(not r.worst and not r.passes and "not measurable" in r.note for r in tail)
    assert all(r.flags[:1] == ["--act_quantizer_calibration"] for r in tail)


def test_calibration_recipes_are_measured_with_their_method(sm8550: dict[str, Any]) -> None:
    for name in ("calibration_entropy", "calibration_percentile"):
        r = sm8550["by"][name]
        assert r.worst.get("cosine") is not None, r.note
        log = (Path(r.files["qdq_model"]).parent / "quantize.log").read_text()
        assert name.split("_")[1] in log.lower()        # onnxruntime's calibrator said so


def test_float_layers_tried_on_a_soc_with_fp16(sm8550: dict[str, Any]) -> None:
    r = sm8550["by"]["float_layers"]
    assert get_soc("SM8550").fp16
    assert r.worst.get("cosine") is not None and r.passes, r.note
    assert r.flags[0] == "--quantization_overrides" and "kept float" in r.note
    qdq = onnx.load(r.files["qdq_model"])
    conv_b = next(n for n in qdq.graph.node if n.name == COLLAPSE_NODE)
    weight = next(i for i in qdq.graph.initializer if i.name == conv_b.input[1])
    assert weight.data_type == onnx.TensorProto.FLOAT               # not quantized


def test_16bit_layer_recipe_writes_encodings_that_change_the_qdq_model(
        sm8550: dict[str, Any]) -> None:
    r = sm8550["by"]["weights_16bit"]
    path = Path(r.settings["quantization.overrides"])
    assert path.parent.name == "recipes" and path.name == "weights_16bit.encodings"
    assert r.files["overrides"] == str(path)
    enc = read_encodings(path)
    assert set(enc.params) == {"wb"} and enc.params["wb"][0].bitwidth == 16
    assert yaml.safe_load(r.yaml) == {"quantization": {"overrides": str(path)}}
    qdq = onnx.load(r.files["qdq_model"])
    conv_b = next(n for n in qdq.graph.node if n.name == COLLAPSE_NODE)
    producer = {o: n for n in qdq.graph.node for o in n.output}[conv_b.input[1]]
    assert producer.op_type == "DequantizeLinear"
    quantized = next(i for i in qdq.graph.initializer if i.name == producer.input[0])
    assert quantized.data_type in (onnx.TensorProto.INT16, onnx.TensorProto.UINT16)
    assert r.passes


def test_progress_one_line_per_recipe_start_and_end(sm8550: dict[str, Any]) -> None:
    lines = sm8550["lines"]
    measured = [r for r in sm8550["recipes"] if r.worst]
    for r in measured:
        mine = [x for x in lines if f" {r.name}: " in x]
        assert len(mine) == 2 and mine[0].endswith("elapsed)") and "start" in mine[0]
    assert all(x.startswith("advisor: ") and "s elapsed)" in x for x in lines)
    assert "done:" in lines[-1]


def test_float_never_proposed_without_fp16(material: dict[str, Any]) -> None:
    assert not get_soc("QCS6490").fp16
    recipes = _advise(material, "qcs6490", soc="QCS6490")
    r = next(r for r in recipes if r.name == "float_layers")
    assert not r.worst and not r.passes and r.settings == {} and r.flags == []
    assert "QCS6490" in r.note and "no FP16" in r.note
    assert not (material["folder"] / "qcs6490" / "recipes" / "float_layers").exists()
    assert next(r for r in recipes if r.passes).name == "per_channel"


def test_tiny_budget_skips_recipes_and_names_them(material: dict[str, Any]) -> None:
    lines: list[str] = []
    recipes = _advise(material, "tiny", budget_s=0.0, progress=lines.append)
    tried = [r for r in recipes if r.worst]
    skipped = [r for r in recipes if r.note == "not tried: budget (0 s) spent"]
    assert len(tried) == 1 and tried[0].name == "per_channel"     # the first always runs
    assert {r.name for r in skipped} >= {"calibration_entropy", "calibration_percentile",
                                         "weights_16bit", "float_layers"}
    assert all(not r.passes for r in skipped)
    w16 = next(r for r in skipped if r.name == "weights_16bit")     # no file, nothing to paste
    assert w16.settings == {} and w16.flags == [] and w16.yaml == ""
    assert any("calibration_entropy: skipped, budget spent" in x for x in lines)


def test_when_nothing_passes_the_best_two_are_combined(material: dict[str, Any]) -> None:
    strict = Thresholds(default={"cosine": 0.9999999})
    recipes = _advise(material, "strict", thresholds=strict)
    assert not any(r.passes for r in recipes)
    pairs = [r for r in recipes if "+" in r.name]
    assert len(pairs) == 1 and pairs[0].worst.get("cosine") is not None
    a, b = pairs[0].name.split("+")
    singles = {r.name: r for r in recipes}
    assert singles[a].worst and singles[b].worst
    assert pairs[0].settings == {**singles[a].settings, **singles[b].settings}


def test_export_overrides_are_merged_into_the_layer_recipe(material: dict[str, Any],
                                                           tmp_path: Path) -> None:
    own = tmp_path / "own.encodings"
    own.write_text('{"version": "0.6.1", "activation_encodings": {"x": [{"bitwidth": 16, '
                   '"dtype": "int", "is_symmetric": "False", "min": -5.0, "max": 5.0, '
                   '"offset": -32768, "scale": 0.000152590219}]}, "param_encodings": {}}')
    recipes = _advise(material, "merged", base=QuantSettings(overrides=own))
    r = next(r for r in recipes if r.name == "weights_16bit")
    assert "merged with the export's overrides own.encodings (1 of its entries kept" in r.note
    enc = read_encodings(Path(r.files["overrides"]))
    assert set(enc.activations) == {"x"} and set(enc.params) == {"wb"}
    assert r.worst.get("cosine") is not None


@needs_sim
def test_simulator_remeasures_the_best_passing_recipe(material: dict[str, Any]) -> None:
    recipes = _advise(material, "sim", simulate=True)
    best = recipes[0]
    assert best.name == "per_channel" and best.measured_on == "simulator" and best.passes
    assert best.qdq_worst.get("cosine") is not None and best.worst["cosine"] > 0.99
    assert "(QDQ on CPU " in recipe_line(best)
    assert Path(best.files["simulator"]).is_dir()
    assert all(r.measured_on == "qdq-cpu" for r in recipes[1:])
