"""Material for the simulator tests: tiny hand-built graphs, model pinning,
input-list writing. The PP-OCR classifier fixtures (pinned, rendered-text samples,
prepared, simulated) are in tests/conftest.py, made once per run for tests/sim and
tests/diagnose."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def make_conv_feeds(count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Smooth, structured inputs for the conv graph (ramps with an offset)."""
    rng = np.random.default_rng(seed)
    base = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
    return [{"x": (base * rng.uniform(0.5, 1.5) + rng.uniform(-0.2, 0.2)).astype(np.float32)}
            for _ in range(count)]


@pytest.fixture
def conv_feeds() -> Callable[[int, int], list[dict[str, np.ndarray]]]:
    """``make_conv_feeds``, as a fixture."""
    return make_conv_feeds


@dataclass(frozen=True)
class Unfused:
    """The classifier quantized with its BatchNormalization left unfused (4 rendered
    lines), prepared for QCS6490 and simulated on one held-out line: the QDQ model on
    CPU is fine, the HTP simulator is not (a real HTP-only loss)."""

    model: Path
    quantize: Any                 # QuantizeResult
    prepare: Any                  # PrepareResult
    numerics: Any                 # NumericsResult
    soc: Any
    calibration: list[dict[str, np.ndarray]]
    held_out: list[dict[str, np.ndarray]]
    folder: Path
