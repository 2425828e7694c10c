"""Fixtures for the stand-in QAIRT SDK tests: SDK roots per era, tiny ONNX graphs
built with onnx.helper, the PP-OCR classifier, and a runner for the tools."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.qairt_standin import HOST_BIN, make_esdk, make_sdk

REPO = Path(__file__).resolve().parents[2]
from tests.conftest import REAL_OUTPUTS  # noqa: E402

# Written from the formats page (section 1), independent of the stand-in's code.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - \d+ - (INFO|WARNING|ERROR|DEBUG)"
                      r" - ")
RECORD = re.compile(r"/\* Command Line used:\n(qnn-onnx-converter.*?)\n\*/", re.S)
SDK_VERSION = re.compile(r'char\* QNN_SDK_VERSION = "qaisw-v(\d+\.\d+\.\d+)\.(\d+)_(\d+)";')
ADD_TENSOR_FN = re.compile(r"static ModelError_t addTensor_(\w+)\(QnnModel& model\)")
TENSOR_FIELDS = re.compile(
    r'\.name= "(?P<name>[^"]+)",\s*\n\s*\.type= QNN_TENSOR_TYPE_(?P<type>\w+),'
    r"\s*\n\s*\.dataFormat= \w+,\s*\n\s*\.dataType= QNN_DATATYPE_(?P<dt>\w+),"
    r"\s*\n\s*\.quantizeParams= \{ QNN_DEFINITION_(?P<defn>\w+),")
ADD_NODE = re.compile(r'addNode\(QNN_OPCONFIG_VERSION_1, // Op_Config_t Version\s*\n\s*"([^"]+)"')


def real_output(name: str) -> Path:
    path = REAL_OUTPUTS / name
    if not path.is_file():
        pytest.skip(f"real converter output not available: {path}")
    return path


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def run_tool(sdk: Path, tool: str, *args: str | Path, cwd: Path | None = None) -> Run:
    """Run a stand-in tool directly by its script path (the SDK bin folder)."""
    proc = subprocess.run([str(sdk / HOST_BIN / tool), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_bash(script: str, cwd: Path) -> Run:
    """Run a bash script in a clean environment (no QNN/eSDK variables inherited)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8"}
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def convert(sdk: Path, *args: str | Path, cwd: Path | None = None) -> Run:
    return run_tool(sdk, "qnn-onnx-converter", *args, cwd=cwd)


def record_of(cpp: Path) -> str:
    match = RECORD.search(cpp.read_text())
    assert match, f"no argument record in {cpp}"
    return match.group(1)


def tensors_of(cpp_text: str) -> dict[str, tuple[str, str]]:
    """name -> (tensor type, data type) for every tensor struct in a model source."""
    return {m["name"]: (m["type"], m["dt"]) for m in TENSOR_FIELDS.finditer(cpp_text)}


# ---------------------------------------------------------------- SDK roots

@pytest.fixture(scope="session")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sdk(tmp_path_factory.mktemp("sdk231") / "qairt", "2.31.0")


@pytest.fixture(scope="session")
def old_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sdk(tmp_path_factory.mktemp("sdk218") / "qairt", "2.18.0")


@pytest.fixture(scope="session")
def esdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_esdk(tmp_path_factory.mktemp("esdk") / "qcom-esdk")


# ---------------------------------------------------------------- models

def _save(graph: onnx.GraphProto, path: Path, opset: int = 13) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def tiny_conv(path: Path) -> Path:
    """x[N,3,8,8] -> Conv(8, bias) -> Relu -> GlobalAveragePool -> Flatten -> Softmax."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
                                "conv1.weight")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "conv1.bias")
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["/conv1/Conv_output_0"],
                         name="/conv1/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["/conv1/Conv_output_0"], ["/relu/Relu_output_0"],
                         name="/relu/Relu"),
        helper.make_node("GlobalAveragePool", ["/relu/Relu_output_0"], ["pooled"], name="gap"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("Softmax", ["flat"], ["output"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 8])], [w, b])
    return _save(graph, path)


def no_static(path: Path) -> Path:
    """Two float inputs and an int64 input, no weights at all."""
    nodes = [helper.make_node("Add", ["a", "b"], ["c"], name="add"),
             helper.make_node("Cast", ["ids"], ["ids_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["c", "ids_f"], ["out"], name="mul")]
    graph = helper.make_graph(nodes, "nostatic", [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4]),
        helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])])
    return _save(graph, path)


def unsupported(path: Path) -> Path:
    """Relu -> Hardmax (not in the stand-in's op list)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_0"),
             helper.make_node("Hardmax", ["r"], ["y"], name="hardmax/0")]
    graph = helper.make_graph(nodes, "unsupported",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return _save(graph, path)


def half_matmul(path: Path) -> Path:
    """A float16 graph: x[1,4] f16 @ W[4,4] f16."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float16), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "half",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])],
                              [w])
    return _save(graph, path)


def write_samples(folder: Path, shapes: dict[str, tuple[tuple[int, ...], str]], count: int,
                  *, seed: int = 0, style: str = "named") -> Path:
    """Raw samples plus an input list (``name:=path`` entries or plain paths)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        entries = []
        for name, (shape, dtype) in shapes.items():
            if np.dtype(dtype).kind == "f":
                arr = rng.uniform(-2.0, 3.0, shape).astype(dtype)
            else:
                arr = rng.integers(0, 100, shape).astype(dtype)
            path = folder / f"{name}_{i}.raw"
            arr.tofile(path)
            entries.append(f"{name}:={path}" if style == "named" else str(path))
        lines.append(" ".join(entries))
    input_list = folder / "input_list.txt"
    input_list.write_text("\n".join(lines) + "\n")
    return input_list


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    return {"tiny": tiny_conv(folder / "tiny.onnx"), "nostatic": no_static(folder / "ns.onnx"),
            "unsupported": unsupported(folder / "unsup.onnx"),
            "half": half_matmul(folder / "half.onnx")}


@pytest.fixture(scope="session")
def cls_model() -> Path:
    """The PP-OCR classifier from the rapidocr wheel (found without importing the
    package, whose import needs OpenCV)."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("rapidocr_onnxruntime (PP-OCR models) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / \
        "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    if not path.is_file():
        pytest.skip(f"PP-OCR classifier model not found: {path}")
    return path


def htp_config(folder: Path, graph: str, device: dict[str, Any], vtcm_mb: int = 2) -> Path:
    """An HTP config for ``graph`` on ``device`` (``vtcm_mb``, O 3) and the backend
    extensions wrapper that names it; returns the wrapper."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "htp_config.json").write_text(json.dumps(
        {"graphs": [{"graph_names": [graph], "vtcm_mb": vtcm_mb, "O": 3}], "devices": [device]}))
    wrapper = folder / "config.json"
    wrapper.write_text(json.dumps({"backend_extensions": {
        "shared_library_path": "libQnnHtpNetRunExtensions.so",
        "config_file_path": "htp_config.json"}}))
    return wrapper
