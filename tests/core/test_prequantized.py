"""Already-quantized models (qnn_ci.model.prequantized): detected from the graph on real
models quantized by onnxruntime (QDQ and QOperator of the PP-OCR classifier,
dynamic quantization of silero's LSTM model), and refused before qnn-ci quantizes
them again: one line on the simulator path (`qnn-ci sim`, the sim_npu stage), a
failure naming the ops in the SDK stages."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import CalibrationSpec, InputSpec, TargetSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.errors import UserError
from qnn_ci.model.prequantized import DYNAMIC, FLOAT, MIXED, QDQ, QOPERATOR, detect, detect_file
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from qnn_ci.stages.registry import load_stages
from tests.sdk_tools.conftest import (  # noqa: F401  (standin_root: a fixture)
    make_export,
    standin_root,
    tiny_conv_model,
    write_input_list,
)

CLS_SHAPE = (1, 3, 48, 192)


class _Reader:
    def __init__(self, name: str, shape: tuple[int, ...], count: int = 2) -> None:
        rng = np.random.default_rng(0)
        self._it = iter([{name: rng.random(shape, dtype=np.float32)} for _ in range(count)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def _pin(src: Path, dst: Path, dims: dict[str, tuple[int, ...]]) -> Path:
    from qnn_ci.shapes.pin import drop_stale_shapes, infer, pin_inputs

    model = onnx.load(str(src))
    pin_inputs(model, dims)
    drop_stale_shapes(model)
    model, _ = infer(model)
    onnx.save(model, str(dst))
    return dst


def _static(src: Path, dst: Path, fmt: str, name: str, shape: tuple[int, ...]) -> Path:
    from onnxruntime.quantization import QuantFormat, quantize_static

    quantize_static(str(src), str(dst), _Reader(name, shape),
                    quant_format=getattr(QuantFormat, fmt))
    return dst


@pytest.fixture(scope="module")
def quantized(cls_model: Path, silero_sequence_model: Path,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real quantized models, made by onnxruntime's quantizers."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    d = tmp_path_factory.mktemp("prequantized")
    pinned = _pin(cls_model, d / "cls.static.onnx", {"x": CLS_SHAPE})
    out = {"float": pinned}
    for fmt in ("QDQ", "QOperator"):
        out[fmt] = _static(pinned, d / f"cls.{fmt}.onnx", fmt, "x", CLS_SHAPE)
    quantize_dynamic(str(silero_sequence_model), str(d / "silero.dynamic.onnx"),
                     weight_type=QuantType.QInt8)
    out["dynamic"] = d / "silero.dynamic.onnx"
    tiny = tiny_conv_model(d / "tiny.onnx", dynamic_batch=False)
    out["tiny"] = tiny
    out["tiny_QDQ"] = _static(tiny, d / "tiny.QDQ.onnx", "QDQ", "x", (1, 3, 8, 8))
    out["tiny_QOperator"] = _static(tiny, d / "tiny.QOperator.onnx", "QOperator", "x",
                                    (1, 3, 8, 8))
    return out


def test_real_models_are_told_apart(quantized: dict[str, Path]) -> None:
    assert detect_file(quantized["float"]).kind == FLOAT
    assert not detect_file(quantized["float"]).quantized
    qdq = detect_file(quantized["QDQ"])
    assert qdq.kind == QDQ and not qdq.weight_only
    assert set(qdq.ops) == {"QuantizeLinear", "DequantizeLinear"}
    assert qdq.int_weights > 50                      # the conv weights are int8/uint8 now
    qop = detect_file(quantized["QOperator"])
    assert qop.kind == QOPERATOR
    assert qop.ops["QLinearConv"] == 53              # every Conv of the classifier
    assert "com.microsoft.QLinearAdd" in qop.ops
    dyn = detect_file(quantized["dynamic"])
    assert dyn.kind == DYNAMIC
    assert {"DynamicQuantizeLinear", "ConvInteger",
            "com.microsoft.DynamicQuantizeLSTM"} <= set(dyn.ops)
    assert dyn.examples["com.microsoft.DynamicQuantizeLSTM"] == "/recurrent/LSTM_quant"


def test_message_names_the_kind_the_ops_and_what_to_do(quantized: dict[str, Path]) -> None:
    text = detect_file(quantized["dynamic"]).message()
    assert "\n" not in text
    assert "onnxruntime dynamic quantization" in text
    assert "DynamicQuantizeLSTM x1 (e.g. '/recurrent/LSTM_quant')" in text
    assert "Export the float model (before quantization)" in text
    assert "AIMET encodings" in text
    qop = detect_file(quantized["QOperator"])
    assert "+1 more op types" in qop.message()     # 7 op types, 6 named
    qdq = detect_file(quantized["QDQ"]).message("converter", calibration=True)
    assert "--keep_quant_nodes" in qdq and "not confirmed" in qdq


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto],
           functions: list[onnx.FunctionProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4])], initializer=inits)
    return helper.make_model(graph, functions=functions or [],
                             opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1),
                                            helper.make_opsetid("local", 1)])


def _int8(name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.arange(16, dtype=np.int8).reshape(4, 4), name)


def _f(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=np.float32), name)


def test_a_lone_dequantize_of_a_weight_is_weight_only() -> None:
    m = _model([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], name="w_dq"),
                helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm")],
               [_int8("w"), _f("s", 0.1)])
    found = detect(m)
    assert found.kind == QDQ and found.weight_only
    assert found.int_weights == 1
    assert "weight-only quantized" in found.message() and "'w_dq'" in found.message()


def test_ops_inside_subgraphs_and_functions_count() -> None:
    branch = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], domain="com.microsoft"),
         helper.make_node("DequantizeLinear", ["q", "s"], ["y"], domain="com.microsoft")],
        "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    fn = helper.make_function("local", "QBlock", ["a"], ["b"], [
        helper.make_node("MatMulInteger", ["a", "a"], ["b"])],
        [helper.make_opsetid("", 17)])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch,
                                 name="if"),
                helper.make_node("QBlock", ["x"], ["unused"], domain="local")],
               [numpy_helper.from_array(np.array(True), "c"), _f("s", 0.1)], [fn])
    found = detect(m)
    # unnamed nodes are named by op type and index; the com.microsoft domain is kept
    assert found.ops == {"com.microsoft.DequantizeLinear": 2,
                         "com.microsoft.QuantizeLinear": 2, "MatMulInteger": 1}
    assert found.examples["com.microsoft.QuantizeLinear"] == "QuantizeLinear#0"
    assert found.in_subgraphs == 5
    assert found.kind == QOPERATOR       # MatMulInteger with no DynamicQuantizeLinear


def test_quantized_operators_and_dynamic_quantization_together_are_mixed() -> None:
    m = _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                helper.make_node("QLinearSigmoid", ["xq", "xs", "xz", "xs", "xz"], ["y"],
                                 domain="com.microsoft")], [])
    assert detect(m).kind == MIXED
    assert "QuickGelu" not in detect(_model([helper.make_node(
        "QuickGelu", ["x"], ["y"], domain="com.microsoft")], [])).ops


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff")
    with pytest.raises(UserError) as info:
        detect_file(bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_simulator_quantizer_refuses_with_one_line(quantized: dict[str, Path],
                                                   tmp_path: Path) -> None:
    """Before: onnxruntime's quantizer re-quantized the QOperator classifier and
    failed with "Unable to get valid quantization scale for input 'conv2d_53.tmp_0'
    when quantizing bias 'conv1_bn_offset' to int32"."""
    samples = [{"x": np.zeros(CLS_SHAPE, np.float32)}]
    with pytest.raises(UserError) as info:
        quantize_for_htp(quantized["QOperator"], tmp_path / "q.qdq.onnx", samples,
                         QuantSettings())
    assert info.value.file == str(quantized["QOperator"])
    assert "already quantized: QOperator" in info.value.message
    assert "QLinearConv x53" in info.value.message
    assert not (tmp_path / "q.qdq.onnx").exists()


def _sim_available() -> None:
    from qnn_ci.sim.availability import sim_unavailable

    reason = sim_unavailable()
    if reason:
        pytest.skip(reason)


def test_qnn_ci_sim_prints_one_line_and_exits_2(quantized: dict[str, Path],
                                                tmp_path: Path) -> None:
    _sim_available()
    proc = subprocess.run(
        [sys.executable, "-m", "qnn_ci", "sim", str(quantized["dynamic"]), "--soc", "QCS6490",
         "--dim", "input=4,576", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "already quantized" in ln]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "onnxruntime dynamic quantization" in lines[0]
    assert "DynamicQuantizeLSTM" in lines[0]
    assert f"error: {quantized['dynamic']}: " in lines[0]   # the user's file, not a copy


def test_sim_npu_stage_reports_the_model_as_bad_input(quantized: dict[str, Path],
                                                      tmp_path: Path) -> None:
    _sim_available()
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")}, samples=2)
    export = make_export(tmp_path, model=quantized["tiny_QDQ"], name="q",
                         inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")},
                         target=TargetSpec(soc="QCS6490"))
    export = dataclasses.replace(export, calibration=CalibrationSpec(input_list=lst))
    stages = load_stages(("static_shapes", "calibration", "sim_npu"))
    env = Environment(workdir=tmp_path / "work")
    res = {r.stage: r for r in Pipeline([export], env, stages=stages).run_export("q")}
    sim = res["sim_npu"]
    assert sim.status == Status.ERROR, sim.failure_text()
    assert "internal_error" not in sim.data
    assert "already quantized: QDQ" in sim.summary and "\n" not in sim.summary


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_sdk_stages_refuse_to_quantize_again(standin_root, quantized: dict[str, Path],  # noqa: F811
                                             tmp_path: Path, fmt: str) -> None:
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")}, samples=2)
    export = make_export(tmp_path, model=quantized[f"tiny_{fmt}"], name="q",
                         inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")})
    export = dataclasses.replace(export, calibration=CalibrationSpec(input_list=lst))
    env = Environment(workdir=tmp_path / "work",
                      environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(standin_root())})
    stages = load_stages(("static_shapes", "calibration", "dry_run", "convert"))
    res = {r.stage: r for r in Pipeline([export], env, stages=stages).run_export("q")}
    dry = res["dry_run"]
    if fmt == "QOperator":     # nothing to convert: the dry run fails, convert is blocked
        assert dry.status == Status.FAILED
        assert dry.summary.startswith("tiny.QOperator.onnx: the model is already quantized")
        assert "QLinearConv x1" in dry.summary
        assert dry.properties["prequantized"] == "qoperator"
        assert res["convert"].summary == "blocked by q::dry_run"
        return
    # QDQ: the dry run (no calibration list) warns; convert (with it) refuses. The
    # stand-in's dry run also lists Q/DQ as unsupported (not confirmed for the real
    # converter), so convert is run here without the dry run.
    assert [f.severity for f in dry.findings if f.check == "model.prequantized"] == \
        [Severity.WARNING]
    stages = load_stages(("static_shapes", "calibration", "convert"))
    conv = Pipeline([export], env, stages=stages).result("q", "convert")
    assert conv.status == Status.FAILED
    assert "already quantized: QDQ" in conv.summary and "--keep_quant_nodes" in conv.summary
    assert not list((tmp_path / "work" / "q" / "convert").glob("*.cpp"))


def test_float_models_still_convert(standin_root, quantized: dict[str, Path],  # noqa: F811
                                    tmp_path: Path) -> None:
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")}, samples=2)
    export = make_export(tmp_path, model=quantized["tiny"], name="f",
                         inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")})
    export = dataclasses.replace(export, calibration=CalibrationSpec(input_list=lst))
    env = Environment(workdir=tmp_path / "work",
                      environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(standin_root())})
    stages = load_stages(("static_shapes", "calibration", "dry_run", "convert"))
    res = Pipeline([export], env, stages=stages).run_export("f")
    assert all(r.status == Status.PASSED for r in res), [r.failure_text() for r in res]
    assert not any(f.check == "model.prequantized" for r in res for f in r.findings)
