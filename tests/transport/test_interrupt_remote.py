"""An interrupt (Ctrl-C, the CLI's SIGTERM exception, SystemExit) raised in the main
thread while a board command runs: the command's remote process group is killed
before the exception goes on, and the board stays usable.

The interrupt comes from a SIGALRM handler, as the CLI's signal handlers raise it:
in the main thread, wherever it happens to be waiting. The commands (and the stand-in
servers started for a test) begin with SIGINT and SIGTERM at their defaults, whatever
the test run inherited (``fixtures.signals``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import filelock
import pytest

from fixtures.adb_device import TAG_VAR, AdbDevice, AdbServer
from fixtures.signals import default_dispositions
from fixtures.sshd import SshServer, pids_with_env
from qnn_ci.boards.lock import LOCK_NAME, LockInfo, board_lock
from qnn_ci.transport.adb import AdbTransport
from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.local import LocalTransport
from qnn_ci.transport.ssh import SshTransport


class _Terminated(KeyboardInterrupt):
    """What the CLI raises for SIGTERM (a KeyboardInterrupt subclass)."""


INTERRUPTS = [KeyboardInterrupt, _Terminated, SystemExit]


@pytest.fixture(autouse=True)
def default_handlers() -> Iterator[None]:
    """Autouse: set up before this test's other fixtures (the sshd, the device), so
    they and the commands they run inherit the default dispositions."""
    with default_dispositions():
        yield


@contextmanager
def interrupt_when(ready: Callable[[], bool], exc_type: type[BaseException]) -> Iterator[None]:
    """Raise ``exc_type`` in the main thread once ``ready()`` is true."""
    def handler(_signum: int, _frame: object) -> None:
        if ready():
            raise exc_type()
        signal.setitimer(signal.ITIMER_REAL, 0.05)

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


def _wait_until(cond: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _interrupted_run(transport: Transport, work: Path, exc_type: type[BaseException]
                     ) -> tuple[int, int]:
    """Start a command that leaves a sleeping child, interrupt the wait for it, and
    return (the shell's pid, the child's pid) as the command wrote them down."""
    work.mkdir(parents=True, exist_ok=True)
    shell, child = work / "shell.pid", work / "child.pid"
    script = f"echo $$ > {shell}; sleep 300 & echo $! > {child}; wait"
    started = time.monotonic()
    with interrupt_when(lambda: child.exists() and child.read_text().strip() != "", exc_type):
        with pytest.raises(exc_type):
            transport.run(["sh", "-c", script], timeout=120)
    assert time.monotonic() - started < 60                  # did not wait for the command
    return int(shell.read_text()), int(child.read_text())


@pytest.mark.parametrize("exc_type", INTERRUPTS)
def test_ssh_interrupt_kills_the_remote_group(sshd: SshServer, exc_type: type[BaseException],
                                              caplog: pytest.LogCaptureFixture) -> None:
    ssh = SshTransport(sshd.board())
    try:
        with caplog.at_level("WARNING", logger="qnn_ci.transport"):
            shell, child = _interrupted_run(ssh, Path(sshd.board().work_root), exc_type)
        # the kill ran before the exception came out: nothing of the command is left
        assert not _alive(shell) and not _alive(child)
        assert sshd.remote_pids() == []
        (note,) = [r.getMessage() for r in caplog.records if "interrupted" in r.getMessage()]
        assert note.startswith(f"board testboard: sh interrupted ({exc_type.__name__}): "
                               f"killing remote process group {shell}")
        assert ssh.run(["echo", "still here"], timeout=30).stdout == "still here\n"
    finally:
        ssh.close()


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, _Terminated])
def test_adb_interrupt_kills_the_remote_group(adb_device: AdbDevice, adb_server: AdbServer,
                                              exc_type: type[BaseException]) -> None:
    board = BoardConfig(name="phone", transport="adb", serial=adb_device.serial,
                        adb_server_port=adb_server.port, work_root=str(adb_device.root / "work"),
                        connect_timeout_s=5.0, retries=1, retry_delay_s=0.1)
    adb = AdbTransport(board)
    shell, child = _interrupted_run(adb, adb_device.root / "work", exc_type)
    assert not _alive(shell) and not _alive(child)
    _wait_until(lambda: not pids_with_env(TAG_VAR, adb_device.tag), "the device's shells")
    assert adb.run(["echo", "still here"], timeout=30).stdout == "still here\n"


def test_adb_interrupt_before_the_group_id_was_read_still_kills_it(
        adb_device: AdbDevice, adb_server: AdbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the interrupt lands while the device's first bytes (the process-group
    line) are already on their way but not yet read. qnn-ci reads on for them and
    kills the group rather than leaving the command running on the board."""
    board = BoardConfig(name="phone", transport="adb", serial=adb_device.serial,
                        adb_server_port=adb_server.port, work_root=str(adb_device.root / "work"),
                        connect_timeout_s=5.0, retries=1, retry_delay_s=0.1)
    adb = AdbTransport(board)
    work = adb_device.root / "work"
    work.mkdir(parents=True, exist_ok=True)
    child = work / "child.pid"
    real_recv = AdbTransport._recv
    interrupted: list[bool] = []

    def recv(conn: object, n: int, deadline: float, exact: bool = True) -> bytes | None:
        if not interrupted:          # the first read of the command's output
            _wait_until(lambda: child.exists() and child.read_text().strip() != "",
                        "the remote child")
            interrupted.append(True)
            raise KeyboardInterrupt
        return real_recv(conn, n, deadline, exact)  # type: ignore[arg-type]

    monkeypatch.setattr(AdbTransport, "_recv", staticmethod(recv))
    with pytest.raises(KeyboardInterrupt):
        adb.run(["sh", "-c", f"sleep 300 & echo $! > {child}; wait"], timeout=120)
    pid = int(child.read_text())
    _wait_until(lambda: not _alive(pid), "the remote child to be killed")
    monkeypatch.setattr(AdbTransport, "_recv", staticmethod(real_recv))
    assert adb.run(["echo", "still here"], timeout=30).stdout == "still here\n"


@pytest.mark.parametrize("exc_type", INTERRUPTS)
def test_local_interrupt_kills_the_group(tmp_path: Path, exc_type: type[BaseException]) -> None:
    board = BoardConfig(name="here", transport="local", work_root=str(tmp_path / "work"))
    shell, child = _interrupted_run(LocalTransport(board), tmp_path / "work", exc_type)
    assert not _alive(shell) and not _alive(child)


def test_interrupt_while_waiting_for_the_lock_releases_the_runner_lock(
        tmp_path: Path) -> None:
    """Interrupted while another run holds the board: our runner-side lock is free
    again and the holder's board lock untouched."""
    board = BoardConfig(name="kit", transport="local", work_root=str(tmp_path / "board"))
    Path(board.work_root).mkdir()
    other = LockInfo("ci-runner-7", 4242, "r7", time.time())
    lock = Path(board.work_root) / LOCK_NAME
    lock.write_text(other.to_line() + "\n")
    started = time.monotonic()
    with interrupt_when(lambda: time.monotonic() - started > 0.5, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            with board_lock(LocalTransport(board), board, timeout=120, poll_s=0.1,
                            runner_lock_dir=tmp_path / "locks"):
                pass
    assert LockInfo.from_line(lock.read_text()) == other
    # another process takes the runner-side lock at once
    probe = subprocess.run(
        [sys.executable, "-c", "import filelock, sys\n"
         "filelock.FileLock(sys.argv[1]).acquire(timeout=0)\n", str(tmp_path / "locks" /
                                                                     "kit.lock")],
        capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert filelock.FileLock(str(tmp_path / "locks" / "kit.lock")).acquire(timeout=0)
