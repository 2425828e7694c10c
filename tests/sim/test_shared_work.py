"""Work shared across exports of one work folder: two exports that differ only in
target.soc compute calibration and the QDQ quantization once; an export with
another activation bitwidth gets its own QDQ model. Real engine, real stages,
real onnxruntime-qnn."""

from __future__ import annotations

from pathlib import Path

from qnn_ci.engine.pipeline import Pipeline, content_digest
from qnn_ci.engine.results import Status
from qnn_ci.engine.shared_results import SHARED_DIR
from qnn_ci.engine.spec import CalibrationSpec, ExportSpec, InputSpec, QuantizationSpec, TargetSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.registry import load_stages
from tests.sim.conftest import needs_sim, write_samples

pytestmark = needs_sim
STAGES = ("static_shapes", "calibration", "sim_npu")


def _export(name: str, model: Path, lst: Path, tmp: Path, soc: str,
            act_bitwidth: int = 16) -> ExportSpec:
    return ExportSpec(name, model, tmp / "qnn-ci.yaml", 1,
                      inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")},
                      calibration=CalibrationSpec(input_list=lst, held_out=1),
                      quantization=QuantizationSpec(act_bitwidth=act_bitwidth),
                      target=TargetSpec(soc=soc))


def test_exports_differing_only_in_soc_share_calibration_and_quantization(
        graphs: dict[str, Path], tmp_path: Path, conv_feeds) -> None:
    lst = write_samples(tmp_path / "data", conv_feeds(5), "input_list")
    exports = [_export("a", graphs["conv"], lst, tmp_path, "SM8550"),
               _export("b", graphs["conv"], lst, tmp_path, "SM8650"),
               _export("a8", graphs["conv"], lst, tmp_path, "SM8550", act_bitwidth=8)]
    work = tmp_path / "work"
    pipe = Pipeline(exports, Environment(workdir=work), stages=load_stages(STAGES))
    res = {e.name: {r.stage: r for r in pipe.run_export(e.name)} for e in exports}
    for name, by_stage in res.items():
        assert all(r.status == Status.PASSED for r in by_stage.values()), \
            (name, {s: r.failure_text() for s, r in by_stage.items()})
    a, b, a8 = res["a"], res["b"], res["a8"]

    # The first export computed both; the second reused both, and says from where.
    assert "shared_from" not in a["calibration"].properties
    assert "quantization_shared_from" not in a["sim_npu"].properties
    assert b["calibration"].properties["shared_from"].startswith("a (content key ")
    assert b["sim_npu"].properties["quantization_shared_from"] == "a"
    # Another act_bitwidth: the same calibration data, its own QDQ model.
    assert a8["calibration"].properties["shared_from"].startswith("a ")
    assert "quantization_shared_from" not in a8["sim_npu"].properties
    assert len(list((work / SHARED_DIR / "sim_quantize").glob("*/meta.json"))) == 2
    assert len(list((work / SHARED_DIR / "calibration").glob("*/meta.json"))) == 1

    # What the second export holds is its own: lists naming its own raw files, with
    # the same bytes, the same QDQ model bytes, prepared for its own SoC.
    cal_a, cal_b = a["calibration"], b["calibration"]
    for key in ("input_list", "held_out_list"):
        text = Path(cal_b.artefacts[key]).read_text()
        assert str(work / "b" / "calibration" / "raw") in text and "/a/" not in text
    raw_a = sorted(Path(cal_a.artefacts["raw_dir"]).iterdir())
    raw_b = sorted(Path(cal_b.artefacts["raw_dir"]).iterdir())
    assert [p.name for p in raw_a] == [p.name for p in raw_b] and len(raw_a) == 5
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(raw_a, raw_b, strict=True))
    same = {k: v for k, v in cal_a.data.items() if k != "content_digest"}
    assert same == {k: v for k, v in cal_b.data.items() if k != "content_digest"}
    assert cal_a.summary == cal_b.summary
    qdq_a, qdq_b = (Path(r["sim_npu"].artefacts["qdq_model"]) for r in (a, b))
    assert qdq_b.parent == work / "b" / "sim_npu"
    assert qdq_a.read_bytes() == qdq_b.read_bytes()
    assert qdq_a.read_bytes() != Path(a8["sim_npu"].artefacts["qdq_model"]).read_bytes()
    assert b["sim_npu"].properties["binary_soc_type"] == "SM8650"
    assert a["sim_npu"].properties["binary_soc_type"] == "SM8550"
    # Same findings and counts as computing it: folded/fused notes carried over.
    assert a["sim_npu"].properties["nodes_total"] == b["sim_npu"].properties["nodes_total"]
    assert [f.check for f in a["sim_npu"].findings] == [f.check for f in b["sim_npu"].findings]


def test_a_damaged_or_other_runs_entry_is_recomputed(graphs: dict[str, Path], tmp_path: Path,
                                                     conv_feeds) -> None:
    """An entry whose file is gone is not trusted; with the cache off, another run's
    entry is not reused (this run's is)."""
    lst = write_samples(tmp_path / "data", conv_feeds(3), "input_list")
    work = tmp_path / "work"
    first = Pipeline([_export("a", graphs["conv"], lst, tmp_path, "SM8550")],
                     Environment(workdir=work), stages=load_stages(STAGES))
    cal_a = first.result("a", "calibration")
    assert cal_a.status == Status.PASSED
    (entry,) = (work / SHARED_DIR / "calibration").glob("*/meta.json")
    next((entry.parent / "raw").iterdir()).unlink()
    second = Pipeline([_export("b", graphs["conv"], lst, tmp_path, "SM8650")],
                      Environment(workdir=work), stages=load_stages(STAGES))
    cal_b = second.result("b", "calibration")
    assert cal_b.status == Status.PASSED and "shared_from" not in cal_b.properties
    assert content_digest(cal_b) != ""                     # recomputed, republished
    assert len(list((entry.parent / "raw").iterdir())) == 3

    exports = [_export(n, graphs["conv"], lst, tmp_path, "SM8550") for n in ("c", "d")]
    other_run = Pipeline(exports, Environment(workdir=work, use_cache=False,
                                              run_token="run-2"), stages=load_stages(STAGES))
    c = other_run.result("c", "calibration")
    d = other_run.result("d", "calibration")
    assert "shared_from" not in c.properties          # made by another run: recomputed
    assert d.properties["shared_from"].startswith("c ")  # made by this run: reused
