"""Fixtures for board runs: a small CNN, a stand-in model library, input samples,
and a "board" = the stand-in qnn-net-run folder reached over a real sshd."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.qairt_standin.net_run import make_board
from fixtures.sshd import SshServer, sshd_missing_reason
from qnn_ci.boards.config import BoardConfig
from qnn_ci.transport.base import Transport

INPUT_SHAPE = (1, 3, 16, 16)
OUTPUTS = {"logits": (1, 10), "feat/map:0": (1, 4, 16, 16)}   # graph output -> shape
HOSTILE = "we ird $(touch pwned) 'q' \"d\"; echo x"


def build_cnn(path: Path, *, seed: int = 1) -> Path:
    """Conv-Relu-Conv -> GAP -> Gemm; two outputs, one with a name the converter
    sanitises (`feat/map:0` -> `feat_map_0`)."""
    rng = np.random.default_rng(seed)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["/c1/Conv_output_0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["/c1/Conv_output_0"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["feat/map:0"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["feat/map:0"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT_SHAPE)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in OUTPUTS.items()],
        [init("w1", (8, 3, 3, 3)), init("b1", (8,)), init("w2", (4, 8, 3, 3)),
         init("b2", (4,)), init("w3", (10, 4)), init("b3", (10,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def build_library(model: Path, out: Path, *, sdk_version: str = "2.31.0",
                  act_bitwidth: int = 16, machine: int = 183) -> Path:
    """A stand-in lib<name>.so in the documented format (ELF header + trailer)."""
    m = onnx.load(str(model))
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 64, 0, 0, 64, 56, 0,
                                 64, 0, 0)
    payload = json.dumps({
        "onnx_b64": base64.b64encode(model.read_bytes()).decode(),
        "act_bitwidth": act_bitwidth, "weights_bitwidth": 8, "sdk_version": sdk_version,
        "graph_name": m.graph.name,
        "inputs": [{"name": "x", "dtype": "float32", "dims": list(INPUT_SHAPE)}],
        "outputs": [{"name": n, "sanitized": n.replace("/", "_").replace(":", "_"),
                     "dims": list(s)} for n, s in OUTPUTS.items()],
    }).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(header + b"\0" * 128 + b"QNNCI-STANDIN\0" + struct.pack("<Q", len(payload))
                    + payload)
    return out


def write_samples(folder: Path, n: int, *, stem: str = "x", seed: int = 7,
                  sizes: dict[int, int] | None = None) -> Path:
    """n samples as .raw files plus an input list with absolute `x:=path` entries;
    ``sizes`` overrides the element count of some samples (a wrong input)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        count = (sizes or {}).get(i, int(np.prod(INPUT_SHAPE)))
        path = folder / f"{stem}_{i}.raw"
        rng.standard_normal(count).astype(np.float32).tofile(path)
        lines.append(f"x:={path}")
    lst = folder / "input_list.txt"
    lst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lst


@pytest.fixture(scope="session")
def cnn_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cnn(tmp_path_factory.mktemp("model") / "cnn.onnx")


@pytest.fixture(scope="session")
def library(cnn_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_library(cnn_model, tmp_path_factory.mktemp("lib") / "libcnn.so")


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.close()


@dataclass
class Board:
    server: SshServer
    folder: Path                  # the board's files (make_board)
    config: BoardConfig
    open: Callable[..., Transport]

    @property
    def work_root(self) -> Path:
        return Path(self.config.work_root)

    def with_config(self, **changes: object) -> Board:
        return replace(self, config=replace(self.config, **changes))  # type: ignore[arg-type]


def _open_transport(board: BoardConfig) -> Transport:
    try:
        from qnn_ci.transport.factory import open_transport
    except ImportError:
        from qnn_ci.transport.ssh import SshTransport
        return SshTransport(board)
    return open_transport(board)


@pytest.fixture
def board(sshd_server: SshServer, tmp_path: Path) -> Iterator[Board]:
    """A fresh stand-in board folder and work root, reached over the shared sshd."""
    folder = make_board(tmp_path / "board")
    work_root = tmp_path / "work"
    work_root.mkdir()
    (work_root / "keep-me").write_text("not ours")          # must survive every run
    config = sshd_server.board(
        "standin", qnn_lib_dir=str(folder / "lib"),
        net_run=str(folder / "bin" / "qnn-net-run"), work_root=str(work_root),
        timeout_s=60.0)
    yield Board(sshd_server, folder, config, _open_transport)
    leftovers = sshd_server.remote_pids()
    sshd_server.kill_remote()
    assert not leftovers, f"processes left on the board: {leftovers}"
