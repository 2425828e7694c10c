"""A numeric stage's diagnosis in the reports: the failure text, the terminal table,
the job summary (from the result's data on the ``qnn-ci run`` path, from the
``diagnosis.*`` properties on the pytest path), and a diagnosis that itself fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from qnn_ci.calibration.sources import Expected
from qnn_ci.diagnose.board import load_feeds
from qnn_ci.diagnose.model import Diagnosis, FirstDivergence, LayerMetrics, Recipe
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.report.diagnosis_summary import markdown_block
from qnn_ci.report.summary import Row, markdown_summary, terminal_table
from qnn_ci.stages.diagnosis_common import attach, guarded


def _diagnosis(root: Path, tensor: str = "b") -> Diagnosis:
    layers = [LayerMetrics(0, "a", "conv_a", "Conv", cosine=0.99998),
              LayerMetrics(1, tensor, "conv_b", "Conv", cosine=0.9997, worst_channel=1,
                           worst_channel_cosine=0.0, crosses=True, jump=0.99998)]
    recipes = [
        Recipe("per_channel", {"quantization.per_channel": True},
               ["--use_per_channel_quantization"], {"cosine": 0.987}, True,
               baseline={"cosine": 0.145}, measured_on="simulator", prepared=True,
               cpu_worst={"cosine": 0.994}, cpu_baseline={"cosine": 0.151}, verdict="passes",
               soc="QCS6490", yaml="quantization:\n  per_channel: true\n"),
        Recipe("act_calibration=mse", {"quantization.act_calibration": "mse"},
               ["--act_quantizer_calibration", "mse"], {"cosine": 0.2}, False,
               baseline={"cosine": 0.151}, measured_on="cpu", prepared=True,
               cpu_worst={"cosine": 0.2}, cpu_baseline={"cosine": 0.151},
               verdict="fails on CPU", soc="QCS6490",
               yaml="quantization:\n  act_calibration: mse\n"),
    ]
    folder = root / "work" / "e" / "sim_numerics" / "diagnosis"
    return Diagnosis(
        "quantization", "QDQ on CPU worst cosine 0.151 vs simulator 0.145 on 'logits'",
        "qdq-cpu", FirstDivergence(tensor, "conv_b", "Conv", 1, "worst_channel_cosine",
                                   0.0, 0.99, 0.9997, 1, 0.0),
        layers, [layers[1]], recipes, {"sweep_s": 0.5},
        {"csv": str(folder / "layers.csv"), "json": str(folder / "diagnosis.json")})


def _failed(tmp_path: Path, tensor: str = "b") -> StageResult:
    r = StageResult("sim_numerics", Status.FAILED,
                    "QCS6490 simulator vs fp32 CPU on 2 held-out sample(s): worst cosine "
                    "0.145 on 'logits' (bound 0.99)",
                    [Finding("compare.cosine", "logits: cosine 0.145 < 0.99")])
    return attach(r, _diagnosis(tmp_path, tensor))


def test_failure_text_carries_the_headline_and_the_yaml_to_paste(tmp_path: Path) -> None:
    r = _failed(tmp_path)
    text = r.failure_text()
    lines = text.splitlines()
    assert lines[0] == r.summary and lines[1].startswith("- [compare.cosine]")
    assert lines[2].startswith("diagnosis: quantization loss (QDQ on CPU worst cosine")
    assert "first divergence at 'b' (Conv 'conv_b')" in lines[2]
    assert ("fix: per_channel: true → worst cosine 0.145 → 0.987 on the QCS6490 simulator "
            "(QDQ on CPU worst cosine 0.151 → 0.994) — passes [no run-time cost]") in lines[2]
    pasted = text.split("paste into the export in qnn-ci.yaml:\n", 1)[1]
    pasted = pasted.split("\nconverter flags:", 1)[0]
    assert yaml.safe_load(pasted) == {"quantization": {"per_channel": True}}
    assert "converter flags: --use_per_channel_quantization" in text
    # a stage without a diagnosis reads as before
    plain = StageResult("x", Status.FAILED, "s", [Finding("c", "m")])
    assert plain.failure_text() == "s\n- [c] m"


def test_job_summary_from_the_result_data(tmp_path: Path) -> None:
    r = _failed(tmp_path)
    ok = StageResult("sim_npu", Status.PASSED, "all nodes on the HTP")
    md = markdown_summary([Row(tmp_path / "qnn-ci.yaml", "e", 3, ok),
                           Row(tmp_path / "qnn-ci.yaml", "e", 3, r)], root=tmp_path)
    block = md.split("**Diagnosis of `sim_numerics`**", 1)[1]
    assert "- **attribution**: quantization — QDQ on CPU worst cosine 0.151" in block
    assert ("- **first divergence**: `b` (Conv `conv_b`): worst_channel_cosine 0 vs bound "
            "0.99, worst channel 1 cosine 0") in block
    assert "- **worst jumps**: `b` (Conv) −0.99998" in block
    assert ("  1. `per_channel: true → worst cosine 0.145 → 0.987 on the QCS6490 simulator "
            "(QDQ on CPU worst cosine 0.151 → 0.994) — passes [no run-time cost]`") in block
    assert ("  2. `act_calibration: mse → QDQ on CPU worst cosine 0.151 → 0.2 — fails on CPU "
            "[no run-time cost]`") in block
    assert "```yaml\nquantization:\n  per_channel: true\n```" in block
    assert ("[layers.csv](work/e/sim_numerics/diagnosis/layers.csv) · "
            "[diagnosis.json](work/e/sim_numerics/diagnosis/diagnosis.json)") in block
    assert "sim_npu" not in block                     # only failed stages are diagnosed
    # outside the root: the absolute path, never a ../ climb
    outside = markdown_block(r, root=tmp_path / "elsewhere")
    assert any(f"]({tmp_path}/work/e/" in line for line in outside)


def test_job_summary_from_properties_only(tmp_path: Path) -> None:
    """The pytest plugin's report rows carry the item's properties, not its data."""
    r = _failed(tmp_path)
    row_result = StageResult(r.stage, r.status, r.summary, r.findings,
                             properties={k: v for k, v in r.properties.items()
                                         if k.startswith("diagnosis.")})
    lines = markdown_block(row_result, root=tmp_path)
    text = "\n".join(lines)
    assert lines[0] == "**Diagnosis of `sim_numerics`**"
    assert "diagnosis: quantization loss" in text and "first divergence at 'b'" in text
    assert "1. `per_channel: true → worst cosine 0.145 → 0.987 on the QCS6490 simulator" in text
    assert "per_channel: true\n" in text and "--use_per_channel_quantization" in text
    assert "[layers.csv](work/e/sim_numerics/diagnosis/layers.csv)" in text
    assert "diagnosis: quantization loss" in terminal_table(
        [Row(tmp_path / "m.yaml", "e", 1, row_result)])


def test_hostile_tensor_names_stay_on_one_line(tmp_path: Path) -> None:
    r = _failed(tmp_path, tensor="evil\n## heading | x")
    block = markdown_block(r, root=tmp_path)
    (line,) = [x for x in block if x.startswith("- **first divergence**")]
    assert "evil ## heading | x" in line
    assert not any(x.startswith("## heading") for x in block)


def test_a_failing_diagnosis_leaves_the_failure_standing(tmp_path: Path) -> None:
    r = StageResult("htp_vs_cpu", Status.FAILED, "HTP vs CPU: worst cosine 0.5",
                    [Finding("compare.cosine", "logits: cosine 0.5 < 0.99")])
    missing = tmp_path / "gone.raw"
    out = guarded(r, lambda: load_feeds({"x": missing}, [Expected("x", "float32",
                                                                  (1, 3, 4, 4))]))
    assert out.status == Status.FAILED
    (warning,) = [f for f in out.findings if f.check == "diagnosis.failed"]
    assert warning.severity == Severity.WARNING
    assert warning.message.startswith("diagnosis failed: ") and "gone.raw" in warning.message
    assert "\n" not in warning.message
    assert "diagnosis:" not in out.failure_text() and "diagnosis" not in out.data
    assert out.properties["diagnosis.error"] in warning.message


def test_load_feeds_reads_onnx_order(tmp_path: Path) -> None:
    x = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)
    x.tofile(tmp_path / "x.raw")
    feeds = load_feeds({"x": tmp_path / "x.raw"}, [Expected("x", "float32", (1, 3, 4, 4))])
    np.testing.assert_array_equal(feeds["x"], x)
    with pytest.raises(ValueError):
        load_feeds({"x": tmp_path / "x.raw"}, [Expected("x", "float32", (1, 3, 4, 5))])


def test_no_fix_says_so_plainly_everywhere(tmp_path: Path) -> None:
    d = _diagnosis(tmp_path)
    for r in d.recipes:
        r.passes, r.verdict = False, "fails on the simulator"
    d.advice = ["nothing tried passes on QCS6490; best: per_channel (worst cosine 0.987, on "
                "the QCS6490 simulator)", "left to try: AIMET encodings for this graph",
                "or suspect the graph: check the rewrite with `original:`"]
    r = attach(StageResult("sim_numerics", Status.FAILED, "worst cosine 0.145",
                           [Finding("compare.cosine", "logits: cosine 0.145 < 0.99")]), d)
    text = r.failure_text()
    assert "no fix: nothing tried passes on QCS6490; best: per_channel" in text
    assert "left to try: AIMET encodings" in text and "paste into" not in text
    block = "\n".join(markdown_block(r, root=tmp_path))
    assert "- **no fix**: nothing tried passes on QCS6490" in block
    assert "  - or suspect the graph" in block and "```yaml" not in block
    assert r.properties["diagnosis.advice"].startswith("nothing tried passes on QCS6490")
