"""The diagnosis in the pipeline, simulator path: a failing ``sim_numerics`` on the
collapse model (one layer's per-tensor 8-bit weights collapse) says
"quantization", names that layer's output as the first divergence, proposes the
fix — in its JUnit properties, its failure text and its data — and
``diagnosis.enabled: false`` turns it off. Real engine, real stages, real
onnxruntime-qnn."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    DiagnosisSpec,
    ExportSpec,
    InputSpec,
    SimSpec,
    TargetSpec,
)
from qnn_ci.engine.stage import Environment
from qnn_ci.report import junit
from qnn_ci.report.summary import Row, markdown_summary, terminal_table
from qnn_ci.stages.registry import load_stages
from tests.diagnose.graphs import (
    COLLAPSE_INPUT,
    COLLAPSE_LAYER,
    COLLAPSE_NODE,
    COLLAPSE_SHAPE,
    collapse_model,
    collapse_samples,
)
from tests.sim.conftest import needs_sim, write_samples

pytestmark = needs_sim
STAGES = ("static_shapes", "calibration", "sim_npu", "sim_numerics")


PROGRESS: list[str] = []      # the shell's progress sink (qnn-ci run prints it on stderr)


def _run(tmp: Path, diagnosis: DiagnosisSpec) -> tuple[StageResult, ExportSpec]:
    model = collapse_model(tmp / "collapse.onnx")
    lst = write_samples(tmp / "data", collapse_samples(10, seed=1) + collapse_samples(2, seed=9),
                        "input_list")
    export = ExportSpec("collapse", model, tmp / "qnn-ci.yaml", 3,
                        inputs={COLLAPSE_INPUT: InputSpec(COLLAPSE_INPUT, COLLAPSE_SHAPE,
                                                          "float32")},
                        calibration=CalibrationSpec(input_list=lst, held_out=2),
                        target=TargetSpec(soc="QCS6490"), sim=SimSpec(samples=1),
                        diagnosis=diagnosis)
    pipe = Pipeline([export], Environment(workdir=tmp / "work", progress=PROGRESS.append),
                    stages=load_stages(STAGES))
    results = {r.stage: r for r in pipe.run_export("collapse")}
    assert results["sim_npu"].status == Status.PASSED, results["sim_npu"].failure_text()
    return results["sim_numerics"], export


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory: pytest.TempPathFactory) -> tuple[StageResult, ExportSpec]:
    return _run(tmp_path_factory.mktemp("diag"), DiagnosisSpec(budget_s=300.0))


def test_failing_sim_numerics_is_diagnosed(diagnosed: tuple[StageResult, ExportSpec]
                                           ) -> None:
    r, export = diagnosed
    assert r.status == Status.FAILED                      # the diagnosis never passes it
    p = r.properties
    assert p["diagnosis.attribution"] == "quantization", p.get("diagnosis.error")
    # conv_b's output (the quantizer fuses its Relu into it: the fused value is
    # compared under the Relu's output name)
    first = p["diagnosis.first_divergence.tensor"]
    assert first in (COLLAPSE_LAYER, f"{COLLAPSE_LAYER}_relu")
    assert p["diagnosis.first_divergence.node"] == COLLAPSE_NODE
    assert p["diagnosis.first_divergence.op_type"] == "Conv"
    assert "QDQ on CPU worst cosine" in p["diagnosis.detail"]
    d = r.data["diagnosis"]
    assert d["attribution"] == "quantization" and d["first_divergence"]["tensor"] == first
    for kind in ("csv", "json"):
        assert Path(r.artefacts[f"diagnosis_{kind}"]).is_file()
        assert Path(p[f"diagnosis.artefact.{kind}"]).parent == \
            Path(r.artefacts["report"]).parent / "diagnosis"
    text = r.failure_text()
    assert text.startswith(r.summary)
    assert "diagnosis: quantization loss" in text
    assert f"first divergence at {first!r} (Conv {COLLAPSE_NODE!r})" in text
    # the advisor's best passing recipe: per-channel weights, with the YAML to paste
    best = next(x for x in d["recipes"] if x["passes"])
    assert best["settings"] == {"quantization.per_channel": True}
    assert "fix: per_channel: true" in text and "paste into the export" in text
    pasted = text.split("paste into the export in qnn-ci.yaml:\n", 1)[1].split("\nconverter")[0]
    assert yaml.safe_load(pasted) == {"quantization": {"per_channel": True}}
    assert "--use_per_channel_quantization" in p["diagnosis.fix"]
    assert p["diagnosis.recipe.0"].startswith("per_channel: true → worst cosine")
    # JUnit, the terminal table and the job summary carry it too
    props = junit.testcase(export.manifest, export.name, export.line, r).properties  # type: ignore[attr-defined]
    assert props["qnn.diagnosis.attribution"] == "quantization"
    assert props["qnn.diagnosis.first_divergence.tensor"] == first
    row = Row(export.manifest, export.name, export.line, r)
    assert "diagnosis: quantization loss" in terminal_table([row])
    md = markdown_summary([row])
    assert "- **attribution**: quantization" in md and "```yaml" in md
    assert "per_channel: true" in md and "[layers.csv](" in md
    # progress on long work reached the shell, one line per phase / recipe
    mine = [ln for ln in PROGRESS if ln.startswith("collapse::sim_numerics: diagnosis: ")]
    assert len(mine) >= 3 and any("per_channel" in ln for ln in mine), PROGRESS


def test_diagnosis_disabled_runs_nothing(tmp_path: Path) -> None:
    r, _ = _run(tmp_path, DiagnosisSpec(enabled=False))
    assert r.status == Status.FAILED
    assert not [k for k in r.properties if k.startswith("diagnosis.")]
    assert "diagnosis" not in r.data and "diagnosis:" not in r.failure_text()
    assert not (tmp_path / "work" / "collapse" / "sim_numerics" / "diagnosis").exists()
