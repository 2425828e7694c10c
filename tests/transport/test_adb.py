"""AdbTransport (adbutils) and the real adb tool against the device stand-in."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from fixtures.adb_device import TAG_VAR, AdbDevice, AdbServer
from fixtures.sshd import pids_with_env
from qnn_ci.errors import ToolError
from qnn_ci.transport.adb import AdbTransport
from qnn_ci.transport.base import DiskFullError, TransportError
from qnn_ci.transport.config import BoardConfig

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


@pytest.mark.parametrize("direction", ["put", "get"])
def test_device_frozen_mid_copy_fails_within_the_timeout(adb_device: AdbDevice,
                                                         adb_server: AdbServer, tmp_path: Path,
                                                         direction: str) -> None:
    """A device that hangs mid-transfer (it stops reading and answering): the push or
    pull ends as an unreachable board after timeout_s plus the reconnect, not never."""
    board = _board(adb_device, adb_server, timeout_s=2.0, connect_timeout_s=1.0)
    adb = AdbTransport(board)
    work = adb_device.root / "work"
    work.mkdir()
    big = (tmp_path if direction == "put" else work) / "big.bin"
    with big.open("wb") as f:                           # sparse: cheap to make, slow to send
        f.truncate(256 * 1024 * 1024)
    if direction == "put":
        growing = work / "copy.bin"
        copy = lambda: adb.put(big, str(growing))       # noqa: E731
    else:
        growing = tmp_path / ".copy.bin.part"
        copy = lambda: adb.get(str(big), tmp_path / "copy.bin")  # noqa: E731
    frozen_at: list[float] = []
    out: dict[str, BaseException] = {}

    def freeze_when_started() -> None:
        _wait_until(lambda: growing.exists() and growing.stat().st_size > 1 << 20,
                    "the copy to start", 30)
        adb_device.freeze()
        frozen_at.append(time.monotonic())

    def attempt() -> None:
        try:
            copy()
        except BaseException as exc:
            out["error"] = exc

    freezer = threading.Thread(target=freeze_when_started, daemon=True)
    freezer.start()
    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(60)
    ended = time.monotonic()
    freezer.join(30)
    adb_device.thaw()
    assert not t.is_alive(), "hung"
    assert frozen_at, "the copy never started"
    error = out.get("error")
    assert isinstance(error, TransportError), error
    message = str(error)
    assert message.startswith(f"board phone unreachable: no answer for 2 s during {direction} ")
    assert "(device hung?)" in message and "2 attempts" in message
    bound = board.timeout_s + board.retry_delay_s + 2 * board.connect_timeout_s + 5.0
    assert ended - frozen_at[0] < bound
    assert not (tmp_path / "copy.bin").exists()


def test_full_disk_is_named_on_push(adb: AdbTransport, full_disk: Path, tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(300_000))
    with pytest.raises(DiskFullError) as info:
        adb.put(src, f"{full_disk}/f.bin")
    assert str(info.value) == (f"no space left on device on board phone ({full_disk}: "
                               "0 bytes free, 300000 needed to put f.bin)")
    assert adb.run(["true"], timeout=30).exit_code == 0      # the device is fine
