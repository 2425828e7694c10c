"""Fixtures for board runs: a small CNN, a stand-in model library, input samples,
and a "board" = the stand-in qnn-net-run folder reached over a real sshd."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.qairt_standin.net_run import make_board
from fixtures.small_disk import small_disk_or_skip
from fixtures.sshd import SshServer, running_sshd
from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.factory import open_transport

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
def library(built: StandinBuild) -> Path:
    """The CNN's aarch64 model library, made by the stand-in SDK."""
    return built.library


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


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
    yield Board(sshd_server, folder, config, open_transport)
    leftovers = sshd_server.remote_pids()
    sshd_server.kill_remote()
    assert not leftovers, f"processes left on the board: {leftovers}"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 100 KiB tmpfs (skipped where mounting is not allowed)."""
    yield from small_disk_or_skip(tmp_path / "small-disk", 100)


@dataclass(frozen=True)
class StandinBuild:
    model: Path            # the pinned ONNX model
    calibration: Path      # its calibration input list
    held_out: Path         # held-out samples
    cpp: Path
    net_json: Path
    library: Path          # aarch64 lib<name>.so from the stand-in qnn-model-lib-generator
    library_x86: Path      # the same for x86_64-linux-clang (does not load on the board)
    sdk_version: str


def standin_build(folder: Path, *, sdk_version: str = "2.31.0") -> StandinBuild:
    """Convert the CNN with the stand-in SDK (W8A16, bias 32) and build its aarch64
    library with the stand-in lib generator, sourcing the eSDK first."""
    import subprocess

    from fixtures.qairt_standin import make_esdk, make_sdk

    sdk = make_sdk(folder / "sdk", sdk_version)
    esdk = make_esdk(folder / "esdk")
    model = build_cnn(folder / "cnn.onnx")
    cal = write_samples(folder / "cal", 4, seed=3)
    held = write_samples(folder / "held", 2, seed=11)
    out = folder / "out"
    script = f"""set -e
unset LD_LIBRARY_PATH
source "$1"
source "$2/bin/envsetup.sh"
qnn-onnx-converter -i "$3" -d x {','.join(map(str, INPUT_SHAPE))} -o "$4/cnn.cpp" \\
    --input_list "$5" --act_bitwidth 16 --weights_bitwidth 8 --bias_bitwidth 32
qnn-model-lib-generator -c "$4/cnn.cpp" -b "$4/cnn.bin" -o "$4/lib" \\
    -t aarch64-oe-linux-gcc11.2 x86_64-linux-clang -l cnn
"""
    res = subprocess.run(["bash", "-c", script, "build", str(esdk), str(sdk), str(model),
                          str(out), str(cal)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return StandinBuild(model, cal, held, out / "cnn.cpp", out / "cnn_net.json",
                        out / "lib" / "aarch64-oe-linux-gcc11.2" / "libcnn.so",
                        out / "lib" / "x86_64-linux-clang" / "libcnn.so", sdk_version)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> StandinBuild:
    return standin_build(tmp_path_factory.mktemp("standin"))


def with_output_encodings(library: Path, net_json: Path, dest: Path) -> Path:
    """A copy of a stand-in model library whose payload also carries each output's
    type and encoding from the converter's _net.json, as a real library holds them
    (the stand-in converter's sidecar does not pass them on yet)."""
    import json
    import struct

    from fixtures.qairt_standin.elf import PAYLOAD_MAGIC, read_standin_payload
    from qnn_ci.tables import QNN_DATATYPE_BY_CODE

    payload = read_standin_payload(library)
    tensors = json.loads(net_json.read_text())["graph"]["tensors"]
    for out in payload["outputs"]:
        t = tensors[out["sanitized"]]
        so = t["quant_params"]["scale_offset"]
        out["encoding"] = {"data_type": QNN_DATATYPE_BY_CODE[t["data_type"]],
                           "scale": so["scale"], "offset": so["offset"]}
    data = library.read_bytes()
    blob = json.dumps(payload, sort_keys=True).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data[: data.rfind(PAYLOAD_MAGIC)] + PAYLOAD_MAGIC
                     + struct.pack("<Q", len(blob)) + blob)
    return dest


@pytest.fixture(scope="session")
def native_library(built: StandinBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CNN library carrying its outputs' native types (UFIXED_POINT_16 here)."""
    return with_output_encodings(built.library, built.net_json,
                                 tmp_path_factory.mktemp("native") / "libcnn.so")
