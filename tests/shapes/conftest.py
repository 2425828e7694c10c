"""Fixtures for the static-shape tests: the real models from the installed
wheels (skipped when absent) and a builder for tiny onnx.helper graphs."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper


def _package_file(package: str, rel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"{package} is not installed (pip install --no-deps {package})")
    path = Path(spec.origin).parent / rel
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="session")
def cls_model() -> Path:
    return _package_file("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")


@pytest.fixture(scope="session")
def rec_model() -> Path:
    return _package_file("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx")


@pytest.fixture(scope="session")
def det_model() -> Path:
    return _package_file("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx")


@pytest.fixture(scope="session")
def vad_model() -> Path:
    return _package_file("silero_vad", "data/silero_vad.onnx")


@pytest.fixture(scope="session")
def seq_model() -> Path:
    return _package_file("silero_vad", "data/silero_vad_16k_sequence.onnx")


def tensor(name: str, dims: Sequence[int | str | None] | None,
           elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
               outputs: list[onnx.ValueInfoProto], *, opset: int = 13,
               initializers: Sequence[onnx.TensorProto] = (),
               value_info: Sequence[onnx.ValueInfoProto] = (),
               metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers),
                              value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8, producer_name="qnn-ci-tests",
                              producer_version="1.0")
    if metadata:
        helper.set_model_props(model, metadata)
    return model


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path
