"""The `sim_npu` and `sim_numerics` stages, driven through a hand-built
StageContext with upstream results pointing at files written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.engine.results import Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec, SimSpec, TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.errors import UserError
from qnn_ci.stages.sim_npu import SimNpuStage
from qnn_ci.stages.sim_numerics import SimNumericsStage
from tests.sim.conftest import needs_sim, write_samples

pytestmark = needs_sim


def _export(model: Path, soc: str | None, tmp: Path, samples: int = 2) -> ExportSpec:
    return ExportSpec("e", model, tmp / "qnn-ci.yaml", 7, target=TargetSpec(soc=soc),
                      sim=SimSpec(samples=samples))


def _upstream(model: Path, cal_list: Path, held_list: Path | None,
              shapes: dict[str, list[int]]) -> dict[str, StageResult]:
    artefacts = {"input_list": str(cal_list)}
    if held_list is not None:
        artefacts["held_out_list"] = str(held_list)
    return {
        "static_shapes": StageResult("static_shapes", Status.PASSED,
                                     artefacts={"model": str(model)}),
        "calibration": StageResult("calibration", Status.PASSED, artefacts=artefacts,
                                   data={"inputs": {n: {"dtype": "float32", "shape": s}
                                                    for n, s in shapes.items()}}),
    }


def _ctx(export: ExportSpec, tmp: Path, stage: str, upstream: dict[str, StageResult]
         ) -> StageContext:
    workdir = tmp / "work" / export.name / stage
    workdir.mkdir(parents=True)
    return StageContext(export, Environment(workdir=tmp / "work"), workdir, upstream)


def test_sim_npu_then_sim_numerics_on_the_classifier(cls_pinned: Path, tmp_path: Path,
                                                     text_lines) -> None:
    lines = text_lines(11)
    cal = write_samples(tmp_path / "cal", lines[:8], "input_list")
    held = write_samples(tmp_path / "cal", lines[8:], "held_out_list")   # 3 held out
    up = _upstream(cls_pinned, cal, held, {"x": [1, 3, 48, 192]})
    export = _export(cls_pinned, "QCS6490", tmp_path, samples=2)

    npu = SimNpuStage().run(_ctx(export, tmp_path, "sim_npu", up))
    assert npu.status == Status.PASSED, npu.failure_text()
    props = npu.properties
    assert (props["soc"], props["arch"], props["sim_soc_id"]) == ("QCS6490", "v68", 93)
    assert (props["binary_soc_type"], props["binary_arch"]) == ("QCS6490", 68)
    assert props["nodes_on_htp"] == props["nodes_total"] > 500
    assert props["constants_folded"] == 308
    assert set(props["durations"]) == {"quantize_s", "prepare_s"}
    assert {"qdq_model", "ctx_model", "ctx_binary", "qnn_json", "op_trace", "ep_log"} <= \
        set(npu.artefacts)
    assert all(Path(p).exists() for p in npu.artefacts.values())
    assert "308 Constant weight(s) folded first" in npu.summary
    json.dumps(npu.to_dict())                      # cacheable as JSON

    up_num = {"sim_npu": npu, "calibration": up["calibration"]}
    num = SimNumericsStage().run(_ctx(export, tmp_path, "sim_numerics", up_num))
    assert num.status == Status.PASSED, num.failure_text()
    assert num.properties["samples"] == 2                   # capped at sim.samples
    assert num.properties["sample_source"] == "held-out"
    assert "2 held-out sample(s)" in num.summary and "worst cosine" in num.summary
    assert Path(num.artefacts["sim_outputs"], "Result_1").is_dir()
    assert not Path(num.artefacts["sim_outputs"], "Result_2").exists()
    # per-output worst metric and the bound it was held to, for the JUnit report
    (bound,) = [k for k in num.properties if k.endswith(".cosine.min")]
    assert bound.startswith("sim_vs_fp32.")
    assert num.properties[bound] == export.thresholds.default["cosine"]
    assert num.properties[bound.removesuffix(".min")] >= num.properties[bound]
    json.dumps(num.to_dict())


def test_sim_numerics_without_held_out_samples_warns(graphs: dict[str, Path], tmp_path: Path,
                                                     conv_feeds) -> None:
    cal = write_samples(tmp_path / "cal", conv_feeds(3), "input_list")
    up = _upstream(graphs["conv"], cal, None, {"x": [1, 3, 8, 8]})
    export = _export(graphs["conv"], "SM8550", tmp_path, samples=1)
    npu = SimNpuStage().run(_ctx(export, tmp_path, "sim_npu", up))
    assert npu.status == Status.PASSED, npu.failure_text()
    num = SimNumericsStage().run(_ctx(export, tmp_path, "sim_numerics",
                                      {"sim_npu": npu, "calibration": up["calibration"]}))
    warn = [f for f in num.findings if f.check == "sim.no_held_out"]
    assert len(warn) == 1 and warn[0].severity == Severity.WARNING
    assert num.properties["sample_source"] == "calibration" and num.properties["samples"] == 1
    assert num.status == Status.PASSED, num.failure_text()


def test_sim_npu_fails_on_fp16_for_qcs6490_naming_the_node(graphs: dict[str, Path],
                                                           tmp_path: Path) -> None:
    sample = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)}
    cal = write_samples(tmp_path / "cal", [sample], "input_list")
    up = _upstream(graphs["fp16"], cal, None, {"x": [1, 16]})
    res = SimNpuStage().run(_ctx(_export(graphs["fp16"], "QCS6490", tmp_path), tmp_path,
                                 "sim_npu", up))
    assert res.status == Status.FAILED
    assert "prepare FAILED" in res.summary
    text = res.failure_text()
    assert "'cast_in'" in text and "error code 3110" in text
    assert res.properties["nodes_not_on_htp"] >= 2
    props = res.properties
    assert props["nodes_on_htp"] + props["nodes_rejected"] + props["nodes_other"] == \
        props["nodes_total"]
    assert props["nodes_rejected"] == props["nodes_not_on_htp"] == 2
    assert props["nodes_inserted_by_ep"] >= 1
    assert "ctx_model" not in res.artefacts and Path(res.artefacts["ep_log"]).is_file()


@pytest.mark.parametrize(("soc", "words"), [("QCS6491", "unknown SoC 'QCS6491'")])
def test_bad_target_soc_is_a_user_error_naming_the_manifest(graphs: dict[str, Path],
                                                            tmp_path: Path, soc: str,
                                                            words: str) -> None:
    up = _upstream(graphs["conv"], tmp_path / "none.txt", None, {"x": [1, 3, 8, 8]})
    export = _export(graphs["conv"], soc, tmp_path)
    with pytest.raises(UserError) as err:
        SimNpuStage().run(_ctx(export, tmp_path, "sim_npu", up))
    assert words in err.value.oneline()
    assert err.value.key == "target.soc" and err.value.line == 7
    assert err.value.file == str(tmp_path / "qnn-ci.yaml")


def test_no_target_soc_skips_with_a_reason(graphs: dict[str, Path], tmp_path: Path) -> None:
    export = _export(graphs["conv"], None, tmp_path)
    env = Environment(workdir=tmp_path)
    assert "no target.soc" in (SimNpuStage().unavailable(export, env) or "")
    assert "no target.soc" in (SimNumericsStage().unavailable(export, env) or "")
    assert SimNpuStage().unavailable(_export(graphs["conv"], "QCS6490", tmp_path), env) is None
