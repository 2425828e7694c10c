"""The context binary built on a board reached with the real ``adb`` (the device
stand-in): a clean build comes back and reads as a QCS6490 / v68 binary, and an FP16
library aborts with exit 134 (adbd reports a death by SIGABRT as 128 + 6) and is
classified as an FP16 op on v68."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from fixtures.adb_device import AdbDevice, AdbServer
from fixtures.qairt_standin.elf import PAYLOAD_MAGIC, read_standin_payload
from fixtures.qairt_standin.net_run import make_board
from qnn_ci.boards.context_build import build_context
from qnn_ci.sdk.context_info import read_context_info
from qnn_ci.tables import get_soc
from qnn_ci.transport.adb import AdbTransport
from qnn_ci.transport.config import BoardConfig
from tests.board_run.conftest import StandinBuild, standin_build


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> StandinBuild:
    return standin_build(tmp_path_factory.mktemp("standin-adb"))


def _adb_board(device: AdbDevice, server: AdbServer) -> BoardConfig:
    folder = make_board(device.root / "board")
    (device.root / "work").mkdir(exist_ok=True)
    return BoardConfig(name="phone", transport="adb", serial=device.serial, soc="QCS6490",
                       adb_server_port=server.port, work_root=str(device.root / "work"),
                       qnn_lib_dir=str(folder / "lib"),
                       net_run=str(folder / "bin" / "qnn-net-run"), connect_timeout_s=5.0,
                       retries=1, retry_delay_s=0.1, timeout_s=60.0)


def _fp16_copy(library: Path, dest: Path) -> Path:
    payload = read_standin_payload(library)
    payload["float16"] = True
    data = library.read_bytes()
    blob = json.dumps(payload, sort_keys=True).encode()
    dest.write_bytes(data[: data.rfind(PAYLOAD_MAGIC)] + PAYLOAD_MAGIC
                     + struct.pack("<Q", len(blob)) + blob)
    return dest


def test_context_binary_over_adb(adb_device: AdbDevice, adb_server: AdbServer,
                                 built: StandinBuild, tmp_path: Path) -> None:
    board = _adb_board(adb_device, adb_server)
    soc = get_soc("QCS6490")
    transport = AdbTransport(board)
    try:
        ok = build_context(transport, board, library=built.library, binary_name="cnn",
                           workdir=tmp_path / "ok", soc=soc)
        assert ok.ok and ok.binary is not None, ok.findings
        info = read_context_info(ok.binary)
        assert (info.soc, info.htp_arch, info.vtcm_bytes) == ("QCS6490", 68, 2 << 20)
        assert info.mentions("logits")
        bad = build_context(transport, board,
                            library=_fp16_copy(built.library, tmp_path / "libfp16.so"),
                            binary_name="cnn", workdir=tmp_path / "bad", soc=soc,
                            fp16_tensors=["probs_fp16"])
    finally:
        transport.close()
    assert bad.exit_code == 134 and bad.binary is None
    assert [f.check for f in bad.findings] == ["context.fp16_abort"]
    assert "probs_fp16" in bad.findings[0].message
    assert "aborted (SIGABRT, exit 134)" in bad.findings[0].message
    assert sorted(p.name for p in (adb_device.root / "work").iterdir()) == []
