"""AdbTransport (adbutils) and the real adb tool against the device stand-in."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from fixtures.adb_device import TAG_VAR, AdbDevice, AdbServer
from fixtures.sshd import pids_with_env
from qnn_ci.boards.config import BoardConfig
from qnn_ci.errors import ToolError
from qnn_ci.transport.adb import AdbTransport
from qnn_ci.transport.base import TransportError

HOSTILE = "a b'c\"d $(touch pwned);e `touch pwned` & x"


def _board(device: AdbDevice, server: AdbServer, **kw: object) -> BoardConfig:
    fields: dict[str, object] = dict(
        name="phone", transport="adb", serial=device.serial, adb_server_port=server.port,
        work_root=str(device.root / "work"), connect_timeout_s=5.0, retries=1,
        retry_delay_s=0.1)
    fields.update(kw)
    return BoardConfig(**fields)  # type: ignore[arg-type]


@pytest.fixture
def adb(adb_device: AdbDevice, adb_server: AdbServer) -> AdbTransport:
    return AdbTransport(_board(adb_device, adb_server))


def _wait_until(cond, what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_real_adb_tool_against_the_stand_in(adb_device: AdbDevice, adb_server: AdbServer,
                                            tmp_path: Path) -> None:
    s = adb_device.serial
    devices = adb_server("devices").stdout
    assert f"{s}\tdevice" in devices
    r = adb_server("-s", s, "shell", "echo out; echo err >&2; exit 3")
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
    data = os.urandom(200_000)
    (tmp_path / "a.bin").write_bytes(data)
    remote = str(adb_device.root / "a.bin")
    assert adb_server("-s", s, "push", str(tmp_path / "a.bin"), remote).returncode == 0
    assert Path(remote).read_bytes() == data
    assert adb_server("-s", s, "pull", remote, str(tmp_path / "b.bin")).returncode == 0
    assert (tmp_path / "b.bin").read_bytes() == data
    r = adb_server("-s", s, "pull", str(adb_device.root / "nope"), str(tmp_path / "c"))
    assert r.returncode != 0 and "does not exist" in r.stdout + r.stderr
    assert adb_server("-s", s, "exec-out", "printf raw").stdout == "raw"


def test_run_exit_codes_streams_env_cwd(adb: AdbTransport, adb_device: AdbDevice) -> None:
    r = adb.run(["sh", "-c", "echo out; echo err >&2; exit 7"], timeout=30)
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (7, "out\n", "err\n", False)
    r = adb.run(["sh", "-c", 'printf "%s|%s" "$(pwd)" "$V"'], timeout=30,
                cwd=str(adb_device.root), env={"V": HOSTILE})
    assert (r.exit_code, r.stdout) == (0, f"{adb_device.root}|{HOSTILE}")
    assert adb.run(["no-such-tool-qnn-ci"], timeout=30).exit_code == 127
    assert adb.run(["sh", "-c", "kill -9 $$"], timeout=30).exit_code == 128 + 9


def test_put_get_listdir_hostile_names(adb: AdbTransport, adb_device: AdbDevice,
                                       tmp_path: Path) -> None:
    root = adb.board.work_root
    folder = f"{root}/{HOSTILE}"
    adb.mkdir(folder)
    data = os.urandom(1024 * 1024 + 3)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    adb.put(src, f"{folder}/{HOSTILE}.bin")
    assert Path(folder, f"{HOSTILE}.bin").read_bytes() == data
    adb.get(f"{folder}/{HOSTILE}.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == data
    assert adb.listdir(folder) == [f"{HOSTILE}.bin"]
    r = adb.run(["ls", "--", f"{HOSTILE}.bin"], timeout=30, cwd=folder)
    assert r.exit_code == 0
    adb.remove_tree(folder)
    assert os.listdir(root) == []
    assert not any((p / "pwned").exists() for p in (adb_device.root, Path(root), tmp_path))
    with pytest.raises(ValueError, match="refusing"):
        adb.remove_tree("/")


def test_board_side_failures_are_tool_errors(adb: AdbTransport, tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 100_000)
    with pytest.raises(ToolError, match="put"):
        adb.put(src, "/dev/full")                     # no space left on device
    with pytest.raises(ToolError, match="get"):
        adb.get(f"{adb.board.work_root}/missing", tmp_path / "m")
    assert not (tmp_path / "m").exists()
    with pytest.raises(ToolError, match="no such folder"):
        adb.listdir(f"{adb.board.work_root}/missing")
    Path(adb.board.work_root).mkdir()
    Path(adb.board.work_root, "blocker").write_text("")
    with pytest.raises(ToolError, match="mkdir -p"):
        adb.mkdir(f"{adb.board.work_root}/blocker/sub")


def test_timeout_kills_the_remote_group(adb: AdbTransport, adb_device: AdbDevice) -> None:
    r = adb.run(["sh", "-c", "sleep 300 & sleep 301 & echo started; wait"], timeout=1.5)
    assert r.timed_out and r.exit_code == -1 and r.stdout == "started\n"
    _wait_until(lambda: not pids_with_env(TAG_VAR, adb_device.tag), "the sleeps to die")
    assert adb.run(["true"], timeout=30).exit_code == 0


def test_device_gone_then_back(adb_device: AdbDevice, adb_server: AdbServer,
                               tmp_path: Path) -> None:
    adb = AdbTransport(_board(adb_device, adb_server, retries=2))
    assert adb.run(["true"], timeout=30).exit_code == 0
    adb_device.stop()
    out: dict[str, BaseException] = {}

    def attempt() -> None:
        try:
            adb.run(["true"], timeout=30)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "hung"
    assert isinstance(out.get("error"), TransportError)
    message = str(out["error"])
    assert message.startswith("board phone unreachable:") and "3 attempts" in message
    adb_device.start()                                # same port: the board rebooted
    r = adb.run(["echo", "back"], timeout=30)
    assert (r.exit_code, r.stdout) == (0, "back\n")


def test_shell_v1_fallback(tmp_path: Path, adb_server: AdbServer) -> None:
    device = AdbDevice(tmp_path / "old", features=("cmd",))
    device.start()
    adb_server.connect(device.serial)
    try:
        adb = AdbTransport(_board(device, adb_server))
        r = adb.run(["sh", "-c", "echo out; echo err >&2; exit 5"], timeout=30)
        assert r.exit_code == 5
        assert sorted(r.stdout.split()) == ["err", "out"]   # v1 merges the streams
        r = adb.run(["sh", "-c", "sleep 300 & echo started; wait"], timeout=1)
        assert r.timed_out and r.stdout.startswith("started")
        _wait_until(lambda: not pids_with_env(TAG_VAR, device.tag), "the sleep to die")
    finally:
        adb_server.disconnect(device.serial)
        device.stop()


def test_starts_its_own_adb_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    for var, value in (("HOME", home), ("TMPDIR", home / "tmp"),
                       ("ANDROID_USER_HOME", home / ".android")):
        monkeypatch.setenv(var, str(value))
    device = AdbDevice(tmp_path / "dev")
    device.start()
    server = AdbServer(home)                           # only for its port and kill-server
    try:
        adb = AdbTransport(_board(device, server))
        assert adb.run(["echo", "hi"], timeout=30).stdout == "hi\n"
    finally:
        server.stop()
        device.stop()


def test_device_lost_mid_command_is_not_rerun(adb: AdbTransport, adb_device: AdbDevice) -> None:
    counter = adb_device.root / "runs"
    out: dict[str, object] = {}

    def attempt() -> None:
        out["result"] = adb.run(["sh", "-c", f"echo run >> '{counter}'; sleep 60"], timeout=60)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    _wait_until(counter.exists, "the command to start")
    adb_device.stop()
    t.join(60)
    assert not t.is_alive(), "hung"
    result = out["result"]
    assert result.exit_code == -1 and not result.timed_out  # type: ignore[attr-defined]
    assert "connection to board phone lost" in result.stderr  # type: ignore[attr-defined]
    assert counter.read_text() == "run\n"
