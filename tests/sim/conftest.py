"""Material for the simulator tests: tiny hand-built graphs, pinned real models
(PP-OCR from the rapidocr wheel), rendered-text samples, input-list writing."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.calibration.input_list import write_input_list, write_raw
from qnn_ci.sim.availability import sim_unavailable

REASON = sim_unavailable()
needs_sim = pytest.mark.skipif(REASON is not None, reason=REASON or "")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ocr"


def _save(graph: onnx.GraphProto, path: Path, opset: int = 17) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_graph(path: Path, *, batch: int | str = 1, bn: bool = False, bias: float = 0.1,
               act: str = "Relu") -> Path:
    """x[batch,3,8,8] -> Conv(4, 3x3, bias) [-> BatchNormalization] -> act -> y."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.random((4, 3, 3, 3)) - 0.5).astype(np.float32), "w"),
             numpy_helper.from_array(np.full(4, bias, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1])]
    last = "c"
    if bn:
        for name, value in (("bn_s", 1.5), ("bn_b", 0.2), ("bn_m", 0.1), ("bn_v", 2.0)):
            inits.append(numpy_helper.from_array(np.full(4, value, np.float32), name))
        nodes.append(helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"],
                                      ["n"], name="bn1"))
        last = "n"
    nodes.append(helper.make_node(act, [last], ["y"], name=f"{act.lower()}1"))
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])], inits)
    return _save(graph, path)


def fp16_graph(path: Path) -> Path:
    """x f32 -> Cast(f16) `cast_in` -> Add `add_h` -> Cast(f32) `cast_out` -> y."""
    nodes = [helper.make_node("Cast", ["x"], ["xh"], name="cast_in", to=TensorProto.FLOAT16),
             helper.make_node("Add", ["xh", "xh"], ["s"], name="add_h"),
             helper.make_node("Cast", ["s"], ["y"], name="cast_out", to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "fp16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    return _save(graph, path)


def pin_model(src: Path, dst: Path, dims: dict[str, list[int]]) -> Path:
    """Set the inputs' dim values, drop stale value_info, re-infer shapes."""
    model = onnx.load(str(src))
    for vi in model.graph.input:
        if vi.name in dims:
            for d, v in zip(vi.type.tensor_type.shape.dim, dims[vi.name], strict=True):
                d.Clear()
                d.dim_value = v
    del model.graph.value_info[:]
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()
    onnx.save(onnx.shape_inference.infer_shapes(model), str(dst))
    return dst


def write_samples(folder: Path, samples: list[dict[str, np.ndarray]], name: str) -> Path:
    """Raw files + an input list ``folder/<name>.txt`` for ``samples``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, feeds in enumerate(samples):
        row = {}
        for k, v in feeds.items():
            p = folder / f"{name}_{k}_{i}.raw"
            write_raw(v, p, str(v.dtype))
            row[k] = p
        rows.append(row)
    lst = folder / f"{name}.txt"
    write_input_list(lst, rows, list(samples[0]))
    return lst


@pytest.fixture(scope="session")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sim_graphs")
    return {"conv": conv_graph(d / "conv.onnx"), "dyn": conv_graph(d / "dyn.onnx", batch="N"),
            "bn": conv_graph(d / "bn.onnx", bn=True), "fp16": fp16_graph(d / "fp16.onnx")}


@pytest.fixture(scope="session")
def cls_pinned(cls_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pin_model(cls_model, tmp_path_factory.mktemp("cls") / "cls.static.onnx",
                     {"x": [1, 3, 48, 192]})


@pytest.fixture(scope="session")
def text_lines() -> Callable[[int], list[dict[str, np.ndarray]]]:
    """Rendered text lines preprocessed for the classifier (the OCR example's
    generator: real text, upright and upside down)."""
    spec = importlib.util.spec_from_file_location("ocr_samples_for_sim",
                                                  EXAMPLES / "ocr_samples.py")
    if spec is None or spec.loader is None:
        pytest.skip("examples/ocr/ocr_samples.py is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return lambda n: list(module.text_lines(n))


@pytest.fixture
def conv_feeds() -> Callable[[int, int], list[dict[str, np.ndarray]]]:
    """Smooth, structured inputs for the conv graph (ramps with an offset)."""
    def make(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        base = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
        return [{"x": (base * rng.uniform(0.5, 1.5) + rng.uniform(-0.2, 0.2)).astype(np.float32)}
                for _ in range(count)]
    return make


@pytest.fixture(scope="session")
def cls_prepared(cls_pinned: Path, text_lines, tmp_path_factory: pytest.TempPathFactory):
    """The classifier quantized with 8 rendered lines and prepared for QCS6490, once
    per session: the real-model tests that only read the prepared context share it."""
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.quantize import QuantSettings

    return check_htp(cls_pinned, tmp_path_factory.mktemp("cls_prepared"), sim_target("QCS6490"),
                     text_lines(8), QuantSettings())
