"""Fixtures for the AI Hub stand-in tests: a hub per test and the REAL qai-hub client
pointed at it through its own config override (``QAIHUB_CLIENT_INI``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

qai_hub = pytest.importorskip("qai_hub", reason="qai-hub is not installed (pip install qai-hub)")

from fixtures.ai_hub import HubServer, running_hub  # noqa: E402  (needs qai_hub)

# A distinctive token, so a leak is easy to grep for.
TOKEN = "aihub-standin-7f3c9e1d2b4a-secret"
# Small upload parts, so a model upload takes several PUTs.
PART_SIZE = 64


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with running_hub(tmp_path / "hub", token=TOKEN, upload_part_size=PART_SIZE) as server:
        yield server


def use_ini(monkeypatch: pytest.MonkeyPatch, ini: Path, home: Path) -> Any:
    """A fresh, unmodified ``qai_hub.Client`` that finds its config the way it always
    does: ``QAIHUB_CLIENT_INI`` (``api_utils.get_config_path``), read on first use.
    HOME points at an empty folder so a real ``~/.qai_hub`` can never be read."""
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(ini))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return qai_hub.Client()


@pytest.fixture
def client(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    return use_ini(monkeypatch, hub.client_ini, tmp_path / "home")


def make_model(path: Path) -> Path:
    """x[1,4] -> MatMul W[4,3] -> Add b -> (Relu -> y, Sigmoid -> z): two outputs."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
         helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
         helper.make_node("Relu", ["hb"], ["y"], name="relu"),
         helper.make_node("Sigmoid", ["hb"], ["z"], name="sigmoid")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor("W", TensorProto.FLOAT, [4, 3], w.flatten().tolist()),
         helper.make_tensor("b", TensorProto.FLOAT, [3], b.tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def onnx_model(tmp_path: Path) -> Path:
    return make_model(tmp_path / "models" / "model.onnx")
