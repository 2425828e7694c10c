"""The recipe advisor on a real model whose middle conv's per-tensor 8-bit weights
collapse (tests/diagnose/graphs.py), quantized by onnxruntime, prepared for the
SoC and measured on the real HTP simulator: per_channel is the fix, measured
there, prepared, passing, first; 16-bit weights are rejected by the v68 HTP and
never proposed; nothing "passes" from a CPU number; a recipe that changes nothing
costs no simulator time; the budget and combinations say what they did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from qnn_ci.diagnose.advisor import advise, nothing_passes
from qnn_ci.diagnose.model import (
    CPU,
    FAILS_CPU,
    NO_CHANGE,
    PASSES,
    REJECTED,
    SIMULATOR,
    UNVERIFIED,
    recipe_line,
)
from qnn_ci.diagnose.recipe_measure import parameters, same_parameters
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.sdk.encodings import read_encodings
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from qnn_ci.sim.sessions import cpu_session, run_all
from qnn_ci.tables import get_soc
from tests.diagnose.graphs import COLLAPSE_NODE, collapse_model, collapse_samples
from tests.sim.conftest import needs_sim

pytestmark = needs_sim
FOCUS = [COLLAPSE_NODE, "relu_b"]     # the first divergence's node and a worst jump


def _cosine(a: Any, b: Any) -> float:
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
            "baseline": {"cosine": baseline}, "folder": folder, "qdq": base.model}


def _advise(m: dict[str, Any], out: str, *, soc: str = "QCS6490", budget_s: float = 600.0,
            simulate: bool = True, thresholds: Thresholds | None = None,
            base: QuantSettings | None = None, progress: Any = None,
            model: Path | None = None, baseline_model: Path | None = None) -> list[Any]:
    return advise(float_model=model or m["model"], calibration=m["calibration"],
                  held_out=m["held_out"], base=base or QuantSettings(), soc=get_soc(soc),
                  thresholds=thresholds or Thresholds(), focus_nodes=FOCUS,
                  baseline=m["baseline"], out_dir=m["folder"] / out, budget_s=budget_s,
                  simulate=simulate, progress=progress,
                  baseline_model=baseline_model or m["qdq"])


@pytest.fixture(scope="module")
def qcs6490(material: dict[str, Any]) -> dict[str, Any]:
    lines: list[str] = []
    recipes = _advise(material, "qcs6490", progress=lines.append)
    return {"recipes": recipes, "by": {r.name: r for r in recipes}, "lines": lines}


def test_per_channel_is_first_measured_on_the_simulator_prepared_and_passing(
        qcs6490: dict[str, Any], material: dict[str, Any]) -> None:
    recipes, pc = qcs6490["recipes"], qcs6490["by"]["per_channel"]
    assert recipes[0] is pc
    assert pc.passes and pc.verdict == PASSES and pc.measured_on == SIMULATOR
    assert pc.prepared is True and pc.soc == "QCS6490" and pc.cost == "none"
    assert pc.worst["cosine"] > 0.99 > material["baseline"]["cosine"]
    assert pc.cpu_worst["cosine"] > 0.99 and pc.cpu_passes is True
    assert Path(pc.files["simulator"]).is_dir()
    assert yaml.safe_load(pc.yaml) == {"quantization": {"per_channel": True}}
    assert pc.flags == ["--use_per_channel_quantization"]
    line = recipe_line(pc)
    assert "on the QCS6490 simulator (QDQ on CPU worst cosine" in line
    assert line.endswith("— passes [no run-time cost]")
    d = pc.to_dict()
    assert (d["measured_on"], d["prepared"], d["passes"]) == ("simulator", True, True)


def test_applying_the_first_recipe_makes_sim_numerics_pass(qcs6490: dict[str, Any],
                                                           material: dict[str, Any],
                                                           tmp_path: Path) -> None:
    """The recipe's settings, applied as an export would: quantize, prepare for
    QCS6490, simulate the held-out samples: within the export's bounds."""
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.numerics import simulate_and_compare

    best = qcs6490["recipes"][0]
    settings = QuantSettings(per_channel=best.settings["quantization.per_channel"])
    soc = sim_target("QCS6490")
    report = check_htp(material["model"], tmp_path, soc, material["calibration"], settings)
    assert report.passed and report.prepare is not None and report.prepare.ctx_model
    assert report.quantize is not None
    numerics = simulate_and_compare(material["model"], report.quantize.model,
                                    report.prepare.ctx_model, soc, material["held_out"],
                                    Thresholds(), tmp_path / "numerics", processes=1)
    assert numerics.passed


def test_16bit_weights_are_rejected_by_the_v68_htp_and_never_proposed(
        qcs6490: dict[str, Any]) -> None:
    r = qcs6490["by"]["weights_16bit"]
    assert r.verdict == REJECTED and r.prepared is False and not r.passes
    assert r.rejection.startswith("rejected by QCS6490 HTP: QNN error 3110 on node 'conv_b'")
    assert "v68 refuses 16-bit weights with 16-bit activations" in r.note
    assert "weights of conv_b at 16 bits" in r.note
    assert r.measured_on is None and not r.worst and not r.cpu_worst   # no time spent on it
    assert recipe_line(r).endswith(r.rejection)
    assert qcs6490["recipes"].index(r) > qcs6490["recipes"].index(qcs6490["by"]["per_channel"])


def test_no_recipe_passes_from_a_cpu_number(qcs6490: dict[str, Any]) -> None:
    for r in qcs6490["recipes"]:
        assert not r.passes or (r.measured_on == SIMULATOR and r.prepared), r.name
        if r.measured_on == CPU:
            assert r.verdict in (UNVERIFIED, FAILS_CPU) and "QDQ on CPU" in recipe_line(r)


def test_listing_says_why_a_recipe_has_no_number(qcs6490: dict[str, Any]) -> None:
    by = qcs6490["by"]
    assert "no FP16" in by["float_layers"].note and not by["float_layers"].worst
    for name in ("calibration_mse", "calibration_sqnr", "calibration_entropy"):
        assert "not measurable on the simulator path" in by[name].note
        assert by[name].flags[:1] == ["--act_quantizer_calibration"]
    # percentile is measured, on CPU first: it fails there, so no simulator time
    pct = by["calibration_percentile"]
    assert pct.verdict == FAILS_CPU and pct.prepared is True and pct.measured_on == CPU
    log = (Path(pct.files["qdq_model"]).parent / "quantize.log").read_text()
    assert "percentile" in log.lower()                 # onnxruntime's calibrator said so


def test_progress_one_line_per_step_start_and_end(qcs6490: dict[str, Any]) -> None:
    lines = qcs6490["lines"]
    assert all(x.startswith("advisor: ") and "s elapsed)" in x for x in lines)
    for r in qcs6490["recipes"]:
        if r.prepared is None:
            continue
        mine = [x for x in lines if f"] {r.name}: " in x]
        assert len(mine) == 2 and "start" in mine[0], r.name
    sim = [x for x in lines if "simulator per_channel: " in x]
    assert len(sim) == 2 and "passes" in sim[1]
    assert "done: 1 measured on the QCS6490 simulator, 1 passing there" in lines[-1]


def test_a_cheaper_passing_recipe_ranks_before_a_dearer_one(material: dict[str, Any]) -> None:
    """SM8550 (v73) takes 16-bit weights: weights_16bit and float_layers prepare and
    pass on CPU, but per_channel costs nothing at run time: it is verified first and
    ranked first; the dearer ones are not verified on the simulator, and say so."""
    recipes = _advise(material, "sm8550", soc="SM8550")
    by = {r.name: r for r in recipes}
    assert recipes[0].name == "per_channel" and recipes[0].passes
    for name in ("weights_16bit", "float_layers"):
        r = by[name]
        assert r.prepared is True and r.cpu_passes is True and not r.passes
        assert r.verdict == UNVERIFIED and "per_channel passed there first" in r.note
    assert [r.name for r in recipes[1:3]] == ["weights_16bit", "float_layers"]  # by cost
    qdq = onnx.load(by["float_layers"].files["qdq_model"])
    conv_b = next(n for n in qdq.graph.node if n.name == COLLAPSE_NODE)
    weight = next(i for i in qdq.graph.initializer if i.name == conv_b.input[1])
    assert weight.data_type == TensorProto.FLOAT                     # kept float
    enc = read_encodings(Path(by["weights_16bit"].files["overrides"]))
    assert set(enc.params) == {"wb"} and enc.params["wb"][0].bitwidth == 16


def test_cpu_screen_only_never_passes(material: dict[str, Any]) -> None:
    recipes = _advise(material, "cpu", simulate=False)
    assert not any(r.passes for r in recipes)
    pc = next(r for r in recipes if r.name == "per_channel")
    assert pc.verdict == UNVERIFIED and pc.prepared is None and pc.measured_on == CPU
    assert "not verified on the simulator" in recipe_line(pc)
    assert recipes[0] is pc                 # still the best candidate, and says what it is


def test_tiny_budget_leaves_recipes_unverified_and_names_them(
        material: dict[str, Any]) -> None:
    lines: list[str] = []
    recipes = _advise(material, "tiny", budget_s=0.0, progress=lines.append)
    screened = [r for r in recipes if r.prepared is not None]
    assert [r.name for r in screened] == ["per_channel"]          # the first always runs
    pc = screened[0]
    assert not pc.passes and pc.verdict == UNVERIFIED
    assert "not verified on the simulator: budget (0 s) spent" in pc.note
    skipped = {r.name for r in recipes if r.note == "not tried: budget (0 s) spent"}
    assert {"calibration_percentile", "weights_16bit"} <= skipped
    assert any("calibration_percentile: skipped, budget spent" in x for x in lines)
    assert nothing_passes(recipes, get_soc("QCS6490"))[0].startswith(
        "nothing tried passes on QCS6490; best: per_channel (worst cosine")


def test_when_nothing_passes_pairs_are_tried_and_the_answer_is_plain(
        material: dict[str, Any]) -> None:
    strict = Thresholds(default={"cosine": 0.9999999})
    recipes = _advise(material, "strict", thresholds=strict, soc="SM8550")
    assert not any(r.passes for r in recipes)
    pairs = [r for r in recipes if "+" in r.name]
    assert 1 <= len(pairs) <= 3
    singles = {r.name: r for r in recipes if "+" not in r.name}
    for pair in pairs:
        a, b = pair.name.split("+")
        assert pair.settings == {**singles[a].settings, **singles[b].settings}
    advice = nothing_passes(recipes, get_soc("SM8550"))
    assert advice[0].startswith("nothing tried passes on SM8550; best: ")
    assert any("AIMET encodings" in x for x in advice)
    assert any("suspect the graph" in x and "original:" in x for x in advice)


def test_export_overrides_are_merged_into_the_layer_recipe(material: dict[str, Any],
                                                           tmp_path: Path) -> None:
    own = tmp_path / "own.encodings"
    own.write_text('{"version": "0.6.1", "activation_encodings": {"x": [{"bitwidth": 16, '
                   '"dtype": "int", "is_symmetric": "False", "min": -5.0, "max": 5.0, '
                   '"offset": -32768, "scale": 0.000152590219}]}, "param_encodings": {}}')
    recipes = _advise(material, "merged", base=QuantSettings(overrides=own), soc="SM8550",
                      simulate=False)
    r = next(r for r in recipes if r.name == "weights_16bit")
    assert "merged with the export's overrides own.encodings (1 of its entries kept" in r.note
    enc = read_encodings(Path(r.files["overrides"]))
    assert set(enc.activations) == {"x"} and set(enc.params) == {"wb"}
    assert r.cpu_worst.get("cosine") is not None


def _silu(path: Path) -> Path:
    """x -> Sigmoid -> Mul(x, .) -> y: a graph without weights."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    graph = helper.make_graph(
        nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 32, 32])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_recipe_that_changes_nothing_costs_no_simulator_time(material: dict[str, Any],
                                                                tmp_path: Path) -> None:
    """Per-channel weights on a graph that has no weights quantize exactly like the
    baseline: "no change from the baseline", never prepared or simulated."""
    model = _silu(tmp_path / "silu.onnx")
    base = quantize_for_htp(model, tmp_path / "base" / "silu.qdq.onnx", material["calibration"],
                            QuantSettings())
    lines: list[str] = []
    recipes = _advise(material, "silu", model=model, baseline_model=base.model,
                      progress=lines.append)
    pc = next(r for r in recipes if r.name == "per_channel")
    assert pc.verdict == NO_CHANGE and pc.prepared is None and pc.measured_on is None
    assert "same scales and zero points as the export's" in pc.note
    assert recipe_line(pc).endswith("no change from the baseline")
    assert not any("simulator per_channel" in x for x in lines)
    assert recipes.index(pc) > recipes.index(next(r for r in recipes
                                                  if r.name == "calibration_percentile"))


def test_parameters_tell_quantizations_apart(material: dict[str, Any], tmp_path: Path) -> None:
    again = quantize_for_htp(material["model"], tmp_path / "again" / "m.qdq.onnx",
                             material["calibration"], QuantSettings())
    base = parameters(material["qdq"])
    assert base and same_parameters(again.model, base) == len(base)
    pc = quantize_for_htp(material["model"], tmp_path / "pc" / "m.qdq.onnx",
                          material["calibration"], QuantSettings(per_channel=True))
    assert same_parameters(pc.model, base) is None
