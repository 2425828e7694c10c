"""The diagnosis on the simulator path, end to end on real models: the collapse
model (the issue's "done when"), on demand on a passing check, a genuine
HTP-only loss (the PP-OCR classifier with its BatchNormalization left unfused),
and the per-layer sweep of the real classifier."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import onnx
import pytest

from qnn_ci.diagnose.intermediates import float_tensors
from qnn_ci.diagnose.model import HTP, NONE, QUANTIZATION
from qnn_ci.diagnose.sim import diagnose_sim
from qnn_ci.diagnose.sweep import float_model_of
from qnn_ci.engine.bounds import Thresholds
from tests.diagnose.conftest import Checked, check
from tests.diagnose.graphs import COLLAPSE_NODE, collapse_samples
from tests.sim.conftest import Unfused, needs_sim

pytestmark = needs_sim
HAS_ADVISOR = importlib.util.find_spec("qnn_ci.diagnose.advisor") is not None


def run(c: Checked, out: Path, **kw):  # type: ignore[no-untyped-def]
    lines: list[str] = []
    d = diagnose_sim(float_model=c.model, qdq_model=c.qdq, ctx_model=c.ctx, soc=c.soc,
                     numerics=c.numerics, calibration=c.calibration, held_out=c.held_out,
                     settings=c.settings, thresholds=Thresholds(), out_dir=out,
                     budget_s=kw.pop("budget_s", 120.0), progress=lines.append, **kw)
    return d, lines


def check_artefacts(d, out: Path) -> None:  # type: ignore[no-untyped-def]
    assert set(d.artefacts) == {"csv", "json", "png"}
    rows = list(csv.DictReader((out / "layers.csv").open(encoding="utf-8")))
    assert [r["tensor"] for r in rows] == [m.tensor for m in d.layers]
    saved = json.loads((out / "diagnosis.json").read_text("utf-8"))
    assert saved == json.loads(json.dumps(d.to_dict()))
    assert {"attribution", "first_divergence", "layers", "recipes"} <= set(saved)
    assert (out / "layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_collapsed_layer_is_quantization_named_and_fixed(collapse_checked: Checked,
                                                         tmp_path: Path) -> None:
    c = collapse_checked
    assert not c.numerics.passed and not c.numerics.qdq_cpu.passed     # the premise
    d, lines = run(c, tmp_path / "diag")
    assert d.attribution == QUANTIZATION and d.path == "qdq-cpu"
    assert "QDQ on CPU worst cosine" in d.detail and "'logits'" in d.detail
    fd = d.first_divergence
    assert fd is not None
    assert (fd.node, fd.op_type, fd.tensor) == (COLLAPSE_NODE, "Conv", "b_relu")
    assert fd.metric == "worst_channel_cosine" and fd.value is not None and fd.value < 0.5
    assert d.worst_jumps[0].node == COLLAPSE_NODE
    check_artefacts(d, tmp_path / "diag")
    assert d.cost["sweep_s"] > 0 and d.cost["fp32_plus_qdq_s_per_sample"] > 0
    assert any(line.startswith("attribution: quantization") for line in lines)
    assert any("per-layer sweep" in line for line in lines)
    props = d.properties()
    assert props["diagnosis.attribution"] == QUANTIZATION
    assert props["diagnosis.first_divergence.node"] == COLLAPSE_NODE
    if not HAS_ADVISOR:
        assert any("advisor not available" in n for n in d.notes)
        return
    passing = [r for r in d.recipes if r.passes]
    assert passing and passing[0].settings == {"quantization.per_channel": True}
    best = passing[0]
    assert best.worst["cosine"] > 0.99 > (best.baseline["cosine"] or 0.0)
    assert "per_channel: true" in d.headline() and "passes" in d.headline()


@pytest.fixture(scope="module")
def collapse_per_channel(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    from qnn_ci.sim.quantize import QuantSettings
    from tests.diagnose.graphs import collapse_model

    folder = tmp_path_factory.mktemp("collapse_pc")
    model = collapse_model(folder / "collapse.onnx")
    return check(model, folder / "pc", collapse_samples(8, seed=1), collapse_samples(2, seed=2),
                 QuantSettings(per_channel=True))


def test_on_demand_on_a_passing_check(collapse_per_channel: Checked, tmp_path: Path) -> None:
    c = collapse_per_channel
    assert c.numerics.passed
    d, _ = run(c, tmp_path / "diag")
    assert d.attribution == NONE and d.detail == "nothing failed its bound"
    assert d.path == "qdq-cpu" and d.first_divergence is None and d.layers
    assert not d.recipes and "recipe advisor not run: nothing failed" in d.notes
    check_artefacts(d, tmp_path / "diag")
    # what `qnn-ci sim --diagnose` prints: nothing lost, so no "first divergence"
    # under it, but the tensor nearest its bound, named as such
    from qnn_ci.diagnose.model import closest_to_bound
    from qnn_ci.diagnose.text import text_lines

    lines = text_lines(d)
    assert lines[0] == "diagnosis: no loss found (nothing failed its bound)"
    assert not [line for line in lines if "divergence" in line], lines
    assert d.bounds == {"cosine": 0.99}
    near = closest_to_bound(d.layers, d.bounds)
    assert near is not None
    m, metric, value, bound = near
    lowest = min(v for layer in d.layers for v in (layer.cosine, layer.worst_channel_cosine)
                 if v is not None)
    assert value == lowest >= bound == 0.99
    assert f"  closest to its bound: {m.tensor!r} ({m.op_type} {m.node!r}, tensor " \
           f"{m.index}): {metric} " in "\n".join(lines)
    assert "first divergence" not in d.headline()


@pytest.fixture(scope="module")
def cls_unfused(cls_unfused_run: Unfused) -> Checked:
    """The classifier with its BatchNormalization left unfused: the QDQ model on CPU
    is fine, the HTP simulator is not (a real HTP-only loss). Quantized, prepared and
    simulated once per run (tests/conftest.py), shared with tests/sim."""
    from qnn_ci.sim.quantize import QuantSettings

    u = cls_unfused_run
    return Checked(u.model, u.quantize.model, u.prepare.ctx_model, u.soc, u.calibration,
                   u.held_out, QuantSettings(), u.numerics, u.folder)


@pytest.mark.slow
def test_htp_only_loss_is_bisected_on_the_simulator(cls_unfused: Checked,
                                                    tmp_path: Path) -> None:
    c = cls_unfused
    assert not c.numerics.passed and c.numerics.qdq_cpu.passed        # the premise
    d, lines = run(c, tmp_path / "diag", advisor=False)
    assert d.attribution == HTP and d.path == "sim-bisection"
    assert 1 <= d.cost["simulated_runs"] <= 6 and d.cost["bisect_s"] > 0
    fd = d.first_divergence
    assert fd is not None and fd.value is not None and fd.value < 0.99
    # every probed tensor before the first departure agrees with the QDQ model on CPU
    before = [m for m in d.layers if m.index < fd.index]
    assert before and all(not m.crosses for m in before)
    assert [m.index for m in d.layers] == sorted(m.index for m in d.layers)
    assert sum(line.startswith("bisection round") for line in lines) == d.cost["simulated_runs"]
    check_artefacts(d, tmp_path / "diag")


@pytest.fixture(scope="module")
def cls_quantized(cls_pinned: Path, text_lines, tmp_path_factory: pytest.TempPathFactory):
    from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp

    samples = text_lines(6)
    folder = tmp_path_factory.mktemp("cls_q")
    q = quantize_for_htp(cls_pinned, folder / "cls.qdq.onnx", samples[:4], QuantSettings())
    return q.model, samples[4:]


def test_real_model_sweep_covers_every_float_tensor(cls_pinned: Path, cls_quantized,
                                                    tmp_path: Path) -> None:
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.quantize import QuantSettings

    qdq, held = cls_quantized
    d = diagnose_sim(float_model=cls_pinned, qdq_model=qdq, ctx_model=None,
                     soc=sim_target("QCS6490"), numerics=None, calibration=[], held_out=held,
                     settings=QuantSettings(), thresholds=Thresholds(),
                     out_dir=tmp_path / "diag", budget_s=60, advisor=False)
    assert d.attribution == NONE and d.path == "qdq-cpu"
    expected = [i.tensor for i in float_tensors(onnx.load(str(float_model_of(qdq))))]
    assert len(expected) > 150
    assert [m.tensor for m in d.layers] == expected
    assert [m.index for m in d.layers] == list(range(len(expected)))
    compared = [m for m in d.layers if m.cosine is not None]
    assert len(compared) > 0.5 * len(expected)
    assert all(m.note for m in d.layers if m.cosine is None)
    assert any(m.worst_channel_cosine is not None for m in compared)
    check_artefacts(d, tmp_path / "diag")
