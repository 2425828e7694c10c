"""A folder of N tiny exports (a 64x64 MatMul + Relu each) with a calibration
generator: the workload the cached-run, JUnit and plugin benchmarks share.

    from _workload import make_workload
    manifest = make_workload(Path(tmp), exports=100)

Tiny models are the hard case for overhead: stage work is near zero, so what is
measured is qnn-ci's own cost per export (collection, cache keys, reports).
"""

from __future__ import annotations

from pathlib import Path

GEN = '''
import numpy as np

def samples(count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 64)).astype(np.float32)}
'''


def make_model(path: Path, i: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((64, 64), 0.01 * (i + 1), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        f"m{i}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def make_workload(folder: Path, exports: int = 100) -> Path:
    """Write ``exports`` models, a generator module and ``qnn-ci.yaml`` into ``folder``;
    return the manifest's path. No ``target.soc``: the simulator stages skip, as SDK
    and board stages do without an SDK or board."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gens.py").write_text(GEN)
    lines = ["defaults:", "  inputs: {x: {shape: [1, 64]}}",
             "  calibration: {generator: 'gens:samples', samples: 4, held_out: 0}"]
    lines.append("exports:")
    for i in range(exports):
        make_model(folder / f"m{i}.onnx", i)
        lines += [f"  - name: e{i}", f"    model: m{i}.onnx"]
    manifest = folder / "qnn-ci.yaml"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


# Smooth image-like pages for the PP-OCRv4 detector (shared by the calibration and
# sharing benchmarks): real-looking structure rather than white noise.
PAGES_GEN = '''
import numpy as np

def pages(count):
    """Smooth image-like fields rather than white noise."""
    rng = np.random.default_rng(0)
    for _ in range(count):
        base = rng.normal(size=(1, 3, 30, 40)).astype(np.float32)
        yield {"x": np.kron(base, np.ones((1, 1, 16, 16), np.float32))}
'''


def det_model() -> Path:
    """The PP-OCRv4 detector inside the rapidocr-onnxruntime wheel."""
    import importlib.util
    import sys

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    return Path(next(iter(spec.submodule_search_locations))) / "models/ch_PP-OCRv4_det_infer.onnx"
