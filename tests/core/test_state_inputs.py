"""Recurrent state inputs start at zero legitimately: the calibration checks for
synthetic data leave them out, when the manifest says so (`inputs.<name>.state`) or
when an output pairs with the input by name, dtype and shape (said in an INFO
finding). A non-state input's zeros are still flagged."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.calibration.input_list import write_input_list
from qnn_ci.calibration.state_inputs import Tensor, paired_outputs
from qnn_ci.calibration.validate import validate_input_list
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Severity, StageResult, Status
from qnn_ci.engine.stage import Environment
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.model.tensors import TensorIO
from qnn_ci.stages.registry import load_stages

GEN = '''
import numpy as np

def streaming(count):
    """Real-looking audio frames, the cache starting at zero every time."""
    rng = np.random.default_rng(11)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32),
               "in_cache0": np.zeros((1, 2, 3), np.float32)}

def x_zero_once(count):
    rng = np.random.default_rng(12)
    for i in range(count):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        yield {"x": np.zeros_like(x) if i == 1 else x,
               "in_cache0": np.zeros((1, 2, 3), np.float32)}

def x_always_zero(count):
    for _ in range(count):
        yield {"x": np.zeros((1, 4), np.float32),
               "in_cache0": np.zeros((1, 2, 3), np.float32)}

def silero(count):
    rng = np.random.default_rng(13)
    for _ in range(count):
        yield {"input": rng.normal(scale=0.1, size=(2, 576)).astype(np.float32),
               "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}
'''


def cache_model(path: Path, out_cache: str = "out_cache0") -> Path:
    """y = x * 2; <out_cache> = in_cache0 + 1 (a streaming model's cache, 1x2x3)."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"]),
         helper.make_node("Add", ["in_cache0", "one"], [out_cache])], "cache",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("in_cache0", TensorProto.FLOAT, [1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info(out_cache, TensorProto.FLOAT, [1, 2, 3])],
        initializer=[two, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def calibrate(tmp_path: Path, export: str) -> StageResult:
    (tmp_path / "gens.py").write_text(GEN)
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(export).lstrip())
    m = load_manifest(p)
    return Pipeline(m.exports, Environment(workdir=tmp_path / "work"), stages=load_stages()).result(
        m.exports[0].name, "calibration")


def checks(r: StageResult, severity: Severity) -> list[str]:
    return [f.check for f in r.findings if f.severity == severity]


def test_auto_detected_cache_input_is_not_flagged(tmp_path: Path) -> None:
    cache_model(tmp_path / "m.onnx")
    r = calibrate(tmp_path, """
        exports:
          - name: s
            model: m.onnx
            calibration: {generator: "gens:streaming", samples: 5, held_out: 1}
        """)
    assert r.status == Status.PASSED, r.failure_text()
    assert checks(r, Severity.WARNING) == [] and checks(r, Severity.ERROR) == []
    (info,) = [f for f in r.findings if f.check == "inputs.state"]
    assert info.severity == Severity.INFO
    assert info.message.startswith("treated as state: in_cache0 (paired with output "
                                   "out_cache0)")
    assert r.properties["state_inputs"] == "in_cache0"
    assert "state input(s) in_cache0 not checked for zeros" in r.summary
    assert "warnings.count" not in r.properties


def test_zeros_of_a_non_state_input_still_warn_and_fail(tmp_path: Path) -> None:
    cache_model(tmp_path / "m.onnx")
    r = calibrate(tmp_path, """
        exports:
          - name: s
            model: m.onnx
            calibration: {generator: "gens:x_zero_once", samples: 5, held_out: 0}
        """)
    assert r.status == Status.PASSED, r.failure_text()
    warned = [f for f in r.findings if f.severity == Severity.WARNING]
    assert [(f.check, f.subject) for f in warned] == [("inputs.all_zero", "x")]
    assert r.properties["warnings.count"] == 1
    r = calibrate(tmp_path, """
        exports:
          - name: s2
            model: m.onnx
            calibration: {generator: "gens:x_always_zero", samples: 3, held_out: 0}
        """)
    assert r.status == Status.FAILED
    assert [f.subject for f in r.errors()] == ["x"]     # never in_cache0
    assert "inputs.all_samples_zero" in checks(r, Severity.ERROR)


def test_no_pairing_output_flags_it_unless_the_manifest_says_state(tmp_path: Path) -> None:
    cache_model(tmp_path / "m.onnx", out_cache="next_thing")     # no name convention
    body = """
        exports:
          - name: s
            model: m.onnx
            inputs: {{in_cache0: {{state: {state}}}}}
            calibration: {{generator: "gens:streaming", samples: 3, held_out: 0}}
        """
    r = calibrate(tmp_path, body.format(state="false"))
    assert r.status == Status.FAILED            # every in_cache0 sample is zeros
    assert {f.subject for f in r.errors()} == {"in_cache0"}
    r = calibrate(tmp_path, body.format(state="true"))
    assert r.status == Status.PASSED, r.failure_text()
    (info,) = [f for f in r.findings if f.check == "inputs.state"]
    assert info.message.startswith("treated as state: in_cache0 (inputs.in_cache0.state)")


def test_input_list_source_honours_state(tmp_path: Path) -> None:
    cache_model(tmp_path / "m.onnx")
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = np.random.default_rng(1)
    rows = []
    for i in range(3):
        rng.normal(size=(1, 4)).astype(np.float32).tofile(raw / f"x{i}.raw")
        np.zeros((1, 2, 3), np.float32).tofile(raw / f"c{i}.raw")
        rows.append({"x": raw / f"x{i}.raw", "in_cache0": raw / f"c{i}.raw"})
    write_input_list(tmp_path / "list.txt", rows, ["x", "in_cache0"])
    r = calibrate(tmp_path, """
        exports:
          - name: s
            model: m.onnx
            calibration: {input_list: list.txt}
        """)
    assert r.status == Status.PASSED, r.failure_text()
    assert checks(r, Severity.WARNING) == []
    # the same list without the state: every cache sample is zero, and identical
    ios = [TensorIO("x", "float32", (1, 4)), TensorIO("in_cache0", "float32", (1, 2, 3))]
    shapes = {"x": (1, 4), "in_cache0": (1, 2, 3)}
    flagged = validate_input_list(tmp_path / "list.txt", ios, shapes).findings
    assert {f.check for f in flagged} >= {"inputs.all_zero", "inputs.all_samples_zero"}
    assert validate_input_list(tmp_path / "list.txt", ios, shapes,
                               state={"in_cache0"}).findings == []


def test_silero_sequence_model_h_and_c(tmp_path: Path, silero_sequence_model: Path) -> None:
    """The real Silero VAD sequence model: h, c [1, 1, 128] fed from hn, cn."""
    r = calibrate(tmp_path, f"""
        exports:
          - name: vad
            model: {silero_sequence_model}
            inputs: {{input: {{shape: [2, 576]}}}}
            calibration: {{generator: "gens:silero", samples: 3, held_out: 1}}
        """)
    assert r.status == Status.PASSED, r.failure_text()
    assert checks(r, Severity.WARNING) == []
    (info,) = [f for f in r.findings if f.check == "inputs.state"]
    assert info.message.startswith(
        "treated as state: h (paired with output hn), c (paired with output cn)")


F32 = "float32"


@pytest.mark.parametrize(("inp", "out"), [
    ("in_cache0", "out_cache0"), ("state", "stateN"), ("h", "hn"), ("c", "cn"),
    ("h0", "hn"), ("past_key_values.0.key", "present.0.key"),
    ("past_key_values_3_value", "present_3_value"), ("decoder_state_in", "decoder_state_out"),
    ("input_states", "output_states"), ("State", "STATEN"),
])
def test_name_conventions_pair(inp: str, out: str) -> None:
    assert paired_outputs([Tensor(inp, F32, (1, 8))],
                          [Tensor("logits", F32, (1, 8)), Tensor(out, F32, (1, 8))]) == {inp: out}


@pytest.mark.parametrize(("inp", "out"), [
    (Tensor("in_cache0", F32, (1, 8)), Tensor("out_cache0", "float16", (1, 8))),   # dtype
    (Tensor("in_cache0", F32, (1, 8)), Tensor("out_cache0", F32, (1, 9))),         # shape
    (Tensor("in_cache0", F32, (1, 8)), Tensor("out_cache1", F32, (1, 8))),         # name
    (Tensor("x", F32, (1, 8)), Tensor("x_out", F32, (1, 8))),   # bare X / X_out: no rule
    (Tensor("image", F32, (1, 8)), Tensor("logits", F32, (1, 8))),
])
def test_what_does_not_pair(inp: Tensor, out: Tensor) -> None:
    assert paired_outputs([inp], [out]) == {}
