"""`original:` — the adapted model must compute what the framework export before
surgery computes, on the calibration and held-out samples, before anything is
quantized (stage matches_original, qnn_ci.shapes.original_match). Real surgery on the
real PP-OCR classifier, through the real pipeline; and the engine's gate: the
quantizing stages do not run after a failure, and exports without `original:`
keep their cache keys."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.shapes.original_match import compare_arrays
from qnn_ci.sim.constants import fold_constants
from qnn_ci.stages.registry import load_stages
from tests.core.graphs import scale_model, two_input_model

pytest_plugins = ["pytester"]

CLS = "pkg:rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
OUT = "save_infer_model/scale_0.tmp_1"
GEN = '''
import numpy as np

def images(count):
    rng = np.random.default_rng(7)
    for _ in range(count):
        yield {"x": rng.random((1, 3, 48, 192), dtype=np.float32)}

def ids(count):
    rng = np.random.default_rng(9)
    for i in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32),
               "ids": np.full((1, 4), 2**40 if i == 2 else i, np.int64)}

def rows(count):
    rng = np.random.default_rng(8)
    for _ in range(count):
        yield {"x": (rng.normal(size=(1, 4)) + 1.0).astype(np.float32)}
'''


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def surgery(cls_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The classifier after a real equivalence-preserving surgery (every Constant
    folded into an initializer, every node renamed), and a copy of that with one
    depthwise conv's weights scaled by 1.5."""
    d = tmp_path_factory.mktemp("surgery")
    model = onnx.load(str(cls_model))
    assert fold_constants(model) == 308
    for i, node in enumerate(model.graph.node):
        node.name = f"adapted_{i}"
    adapted = _save(model, d / "adapted.onnx")
    inits = {t.name: t for t in model.graph.initializer}
    conv = [n for n in model.graph.node if n.op_type == "Conv"][10]
    w = inits[conv.input[1]]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * 1.5, w.name))
    perturbed = _save(model, d / "perturbed.onnx")
    return {"adapted": adapted, "perturbed": perturbed, "conv": Path(conv.name)}


def _pipeline(tmp_path: Path, model: Path, original: str, *, extra: str = "",
              stages: tuple[str, ...] = ("static_shapes", "calibration", "matches_original"),
              generator: str = "images", shape: str = "[1, 3, 48, 192]") -> Pipeline:
    (tmp_path / "gens.py").write_text(GEN)
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        exports:
          - name: a
            model: {model}
            original: {original}
            target: {{soc: QCS6490}}
            inputs: {{x: {{shape: {shape}}}}}
            calibration: {{generator: "gens:{generator}", samples: 2, held_out: 1}}
        """) + textwrap.indent(textwrap.dedent(extra), "    "))
    env = Environment(workdir=tmp_path / "work")
    return Pipeline(load_manifest(manifest).exports, env, stages=load_stages(stages))


def test_an_equivalent_surgery_matches(surgery: dict[str, Path], tmp_path: Path) -> None:
    res = _pipeline(tmp_path, surgery["adapted"], CLS).result("a", "matches_original")
    assert res.status == Status.PASSED, res.failure_text()
    assert res.summary == f"matches the original on 3 sample(s): worst cosine 1.000000 " \
                          f"(output {OUT!r})"
    assert res.properties[f"original.{OUT}.cosine"] >= 0.999999
    assert res.properties[f"original.{OUT}.passed"] is True
    assert res.properties["original.samples"] == 3
    assert res.data["outputs"][0]["worst_sample"] in (
        "calibration sample 1", "calibration sample 2", "held-out sample 1")


def test_a_perturbed_weight_fails_naming_the_output_and_blocks_quantizing(
        surgery: dict[str, Path], tmp_path: Path) -> None:
    p = _pipeline(tmp_path, surgery["perturbed"], CLS,
                  stages=("static_shapes", "calibration", "matches_original", "sim_npu"))
    res = p.result("a", "matches_original")
    assert res.status == Status.FAILED
    assert res.summary.startswith(f"output {OUT!r} cosine 0.")
    assert "< 0.999999 on " in res.summary and "sample" in res.summary
    assert "max_abs" in res.summary and "3 of 3 sample(s) fail" in res.summary
    # where to look: the first tensor both compute that differs, the perturbed conv's
    conv = str(surgery["conv"])
    assert "the first that differs (cosine 1.000000 on calibration sample 1)" in res.summary
    assert f"made by node {conv!r} (Conv) in the adapted model and node 'Conv@10' (Conv) " \
        "in the original" in res.summary
    assert res.properties[f"original.{OUT}.passed"] is False
    from qnn_ci.sim.availability import sim_unavailable

    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)
    sim = p.result("a", "sim_npu")
    assert sim.status == Status.SKIPPED
    assert sim.summary == "blocked by a::matches_original"
    assert not (tmp_path / "work" / "a" / "sim_npu").exists()      # never ran


def test_a_tighter_bound_is_read_from_the_manifest(tmp_path: Path) -> None:
    """``original: {model, cosine}``: a Relu made LeakyRelu (alpha 0.01) fails the
    default bound 0.999999 and passes a bound loosened to 0.9."""
    scale_model(tmp_path / "adapted.onnx", scale=2.0, dims=[1, 4])
    scale_model(tmp_path / "orig.onnx", scale=2.0, dims=["N", 4])
    m = onnx.load(str(tmp_path / "adapted.onnx"))
    m.graph.node[1].op_type = "LeakyRelu"          # negative inputs now leak through
    _save(m, tmp_path / "adapted.onnx")
    strict = _pipeline(tmp_path, tmp_path / "adapted.onnx", "orig.onnx", generator="rows",
                       shape="[1, 4]").result("a", "matches_original")
    assert strict.status == Status.FAILED
    loose = _pipeline(tmp_path, tmp_path / "adapted.onnx", "{model: orig.onnx, cosine: 0.9}",
                      generator="rows", shape="[1, 4]").result("a", "matches_original")
    assert loose.status == Status.PASSED, loose.failure_text()
    assert loose.properties["original.cosine_bound"] == 0.9


def test_renamed_inputs_and_outputs_are_matched_by_position(tmp_path: Path) -> None:
    scale_model(tmp_path / "adapted.onnx", dims=[1, 4])
    scale_model(tmp_path / "orig.onnx", in_name="input_0", out_name="logits", dims=["N", 4])
    res = _pipeline(tmp_path, tmp_path / "adapted.onnx", "orig.onnx", generator="rows",
                    shape="[1, 4]").result("a", "matches_original")
    assert res.status == Status.PASSED, res.failure_text()
    notes = [f.message for f in res.findings if f.check == "original.note"]
    assert notes == ["inputs matched by position (names differ): x -> input_0",
                     "outputs matched by position (names differ): y <- logits"]


def test_different_input_counts_fail_naming_both_lists(tmp_path: Path) -> None:
    scale_model(tmp_path / "adapted.onnx", dims=[1, 4])
    two_input_model(tmp_path / "orig.onnx")
    res = _pipeline(tmp_path, tmp_path / "adapted.onnx", "orig.onnx", generator="rows",
                    shape="[1, 4]").result("a", "matches_original")
    assert res.status == Status.FAILED
    assert res.summary == ("cannot compare with the original: the adapted model has 1 "
                           "input(s) (x), the original 2 (x, ids): give the original export "
                           "of this model (original:)")


def test_an_input_dtype_changed_by_the_surgery_is_cast_when_values_survive(
        tmp_path: Path) -> None:
    """The original takes int32 ids, the adapted model int64: cast for the original
    (said so) while every value fits; a value that does not fit int32 fails."""
    two_input_model(tmp_path / "adapted.onnx")
    m = onnx.load(str(tmp_path / "adapted.onnx"))
    m.graph.input[1].type.tensor_type.elem_type = onnx.TensorProto.INT32
    _save(m, tmp_path / "orig.onnx")
    (tmp_path / "gens.py").write_text(GEN)
    manifest = tmp_path / "qnn-ci.yaml"
    for held_out, want in ((0, Status.PASSED), (1, Status.FAILED)):
        manifest.write_text(textwrap.dedent(f"""\
            exports:
              - name: a
                model: adapted.onnx
                original: orig.onnx
                calibration: {{generator: "gens:ids", samples: 2, held_out: {held_out}}}
            """))
        env = Environment(workdir=tmp_path / f"work{held_out}")
        res = Pipeline(load_manifest(manifest).exports, env, stages=load_stages(
            ("static_shapes", "calibration", "matches_original"))).result("a", "matches_original")
        assert res.status == want, res.failure_text()
        notes = [f.message for f in res.findings if f.check == "original.note"]
        assert notes == ["input(s) cast for the original: ids int64 -> int32"]
    assert res.summary == ("cannot compare with the original: input 'ids' of held-out sample "
                           "1 does not survive the cast int64 -> int32 the original takes: the "
                           "surgery changed what the input can hold")


def test_no_original_no_item(tmp_path: Path) -> None:
    scale_model(tmp_path / "m.onnx", dims=[1, 4])
    (tmp_path / "qnn-ci.yaml").write_text(
        "exports:\n  - name: a\n    model: m.onnx\n    inputs: {x: {shape: [1, 4]}}\n")
    p = Pipeline(load_manifest(tmp_path / "qnn-ci.yaml").exports,
                 Environment(workdir=tmp_path / "work"), stages=load_stages())
    assert "matches_original" not in p.stage_names(p.exports["a"])
    assert "matches_original" in p.stages


def test_cosine_rules() -> None:
    z = np.zeros(4, np.float32)
    assert compare_arrays(z, z) == (1.0, 0.0, 0)
    assert compare_arrays(z, np.ones(4))[0] == 0.0
    nan = np.array([1.0, np.nan, 2.0])
    assert compare_arrays(nan, nan) == (1.0, 0.0, 0)
    assert compare_arrays(nan, np.array([1.0, 3.0, 2.0]))[2] == 1
    big = np.array([3e38, -3e38], np.float32)
    assert compare_arrays(big, big)[0] == pytest.approx(1.0)


# -- the engine's gate -----------------------------------------------------------

class _Step(Stage):
    outcome: ClassVar[str] = "pass"

    def run(self, ctx: StageContext) -> object:
        from qnn_ci.engine.results import StageResult

        with (ctx.env.workdir / "runs.log").open("a") as fh:
            fh.write(f"{self.name}\n")
        return StageResult(self.name, Status.FAILED if self.outcome == "fail" else
                           Status.PASSED, self.outcome)


def _stage(name: str, outcome: str = "pass", gates: tuple[str, ...] = (),
           unavailable: str | None = None) -> Stage:
    cls = type(name, (_Step,), {"name": name, "outcome": outcome, "gates": gates,
                                "unavailable": lambda self, e, env: unavailable})
    return cls()


def _run(tmp_path: Path, stages: list[Stage], work: str = "work"
         ) -> tuple[Pipeline, dict[str, str]]:
    export = ExportSpec(name="a", model=tmp_path / "m.onnx", manifest=tmp_path / "q.yaml",
                        line=1)
    (tmp_path / work).mkdir()
    p = Pipeline([export], Environment(workdir=tmp_path / work),
                 stages={s.name: s for s in stages})
    results = {r.stage: r.summary for r in p.run_export("a")}
    return p, results


def test_a_failed_gate_blocks_and_a_passed_or_absent_gate_leaves_the_key(
        tmp_path: Path) -> None:
    _p, res = _run(tmp_path, [_stage("matches_original", "fail"),
                              _stage("quantize", gates=("matches_original",))])
    assert res["quantize"] == "blocked by a::matches_original"
    assert (tmp_path / "work" / "runs.log").read_text().split() == ["matches_original"]
    keys = []
    for stages in ([_stage("matches_original"), _stage("quantize", gates=("matches_original",))],
                   [_stage("quantize", gates=("matches_original",))],
                   [_stage("quantize")]):
        p, res = _run(tmp_path, stages, work=f"work{len(keys)}")
        assert res["quantize"] == "pass"
        keys.append(p._keys[("a", "quantize")])
    assert keys[0] == keys[1] == keys[2]       # a gate is not an input


def test_a_skipped_gate_does_not_block(tmp_path: Path) -> None:
    _p, res = _run(tmp_path, [_stage("matches_original", unavailable="no calibration"),
                              _stage("quantize", gates=("matches_original",))])
    assert res == {"matches_original": "no calibration", "quantize": "pass"}


def test_quantizing_stages_are_gated() -> None:
    stages = load_stages()
    for name in ("sim_npu", "dry_run", "convert"):
        assert stages[name].gates == ("matches_original",)
    assert stages["matches_original"].marker is None


# -- the pytest plugin --------------------------------------------------------------

def test_pytest_item_needs_no_marked_resource(pytester: pytest.Pytester) -> None:
    """One item per export with `original:`, marked `qnn` only (onnxruntime is all
    it needs): it runs under `-m "not qnn_sim and not qnn_sdk and not qnn_board"`."""
    scale_model(pytester.path / "m.onnx", dims=[1, 4])
    scale_model(pytester.path / "orig.onnx", dims=["N", 4])
    (pytester.path / "gens.py").write_text(GEN)
    (pytester.path / "qnn-ci.yaml").write_text(textwrap.dedent("""\
        exports:
          - name: a
            model: m.onnx
            original: orig.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:rows", samples: 2, held_out: 1}
        """))
    res = pytester.runpytest("-m", "not qnn_sim and not qnn_sdk and not qnn_board",
                             "-k", "matches_original", "-v", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*qnn-ci.yaml::a::matches_original PASSED*"])
