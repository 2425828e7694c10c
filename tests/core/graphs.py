"""Small ONNX graphs built with onnx.helper for engine tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def scale_model(path: Path, *, in_name: str = "x", out_name: str = "y",
                dims: list[int | str] | None = None, scale: float = 2.0,
                dtype: int = TensorProto.FLOAT) -> Path:
    """y = x * scale (+ Relu): one float input of `dims` (may be symbolic)."""
    dims = dims or ["N", 4]
    s = numpy_helper.from_array(np.array(scale, dtype=np.float32), "s")
    nodes = [helper.make_node("Mul", [in_name, "s"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], [out_name], name="relu")]
    graph = helper.make_graph(
        nodes, "scale",
        [helper.make_tensor_value_info(in_name, dtype, dims)],
        [helper.make_tensor_value_info(out_name, dtype, dims)],
        initializer=[s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def two_input_model(path: Path) -> Path:
    """z = x[float32 1x4] + Cast(ids[int64 1x4]) — one float, one integer input."""
    nodes = [helper.make_node("Cast", ["ids"], ["idsf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["x", "idsf"], ["z"], name="add")]
    graph = helper.make_graph(
        nodes, "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


# A calibration generator of real-looking floats for a [1, 8] input; with GEN_SLEEP set
# to a file path, it writes that file at sample 2 and then blocks (to interrupt a run).
FLOATS_GEN = '''
import os, time
import numpy as np

def floats(count):
    rng = np.random.default_rng(3)
    for i in range(count):
        if os.environ.get("GEN_SLEEP") and i == 2:
            open(os.environ["GEN_SLEEP"], "w").write("sleeping")
            time.sleep(120)
        yield {"x": rng.normal(size=(1, 8)).astype(np.float32)}
'''


def tiny_matmul_model(path: Path) -> Path:
    """y = Relu(x[1x8] @ W[8x8]): the smallest export the simulator stages run on."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def small_project(folder: Path, names: tuple[str, ...] = ("a",)) -> Path:
    """A manifest with one export per name of ``scale_model`` (free dim pinned to
    [1, 8]) calibrated by ``FLOATS_GEN`` (6 samples + 1 held out) for a QCS6490."""
    scale_model(folder / "m.onnx", dims=["N", 8])
    (folder / "gens.py").write_text(FLOATS_GEN)
    manifest = folder / "qnn-ci.yaml"
    lines = ["defaults:",
             "  target: {soc: QCS6490, lib_target: aarch64-oe-linux-gcc11.2}",
             "  inputs: {x: {shape: [1, 8]}}",
             '  calibration: {generator: "gens:floats", samples: 6, held_out: 1}',
             "exports:"]
    for name in names:
        lines += [f"  - name: {name}", "    model: m.onnx"]
    manifest.write_text("\n".join(lines) + "\n")
    return manifest
