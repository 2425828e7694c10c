"""The board lock on a full disk, and empty lock files left by a crash or a full disk.

Real boards: the loopback sshd (and the local transport) with a 100 KiB tmpfs as
the work root, filled to the last byte.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.sshd import SshServer
from qnn_ci.boards.lock import (
    LOCK_NAME,
    UNREADABLE_STALE_S,
    BoardLockedError,
    LockInfo,
    board_lock,
)
from qnn_ci.engine.results import Status
from qnn_ci.errors import ToolError
from qnn_ci.stages.board_common import board_error_result
from qnn_ci.transport.base import DiskFullError, Transport
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.local import LocalTransport
from qnn_ci.transport.ssh import SshTransport


def _fill(folder: Path) -> Path:
    """Write one file until the filesystem says ENOSPC; return it."""
    filler = folder / "filler.bin"
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    assert os.statvfs(folder).f_bavail == 0
    return filler


@pytest.fixture(params=["ssh", "local"])
def board_on(request: pytest.FixtureRequest, tmp_path: Path
             ) -> Iterator[tuple[Transport, BoardConfig, Path]]:
    """(transport, board, its work root) for a board whose work root is a small tmpfs."""
    disk: Path = request.getfixturevalue("full_disk")
    if request.param == "ssh":
        sshd: SshServer = request.getfixturevalue("sshd")
        board = sshd.board(name="tiny", work_root=str(disk))
        transport: Transport = SshTransport(board)
    else:
        board = BoardConfig(name="tiny", transport="local", work_root=str(disk))
        transport = LocalTransport(board)
    try:
        yield transport, board, disk
    finally:
        transport.close()


def test_full_disk_says_disk_full_then_the_next_run_locks(
        board_on: tuple[Transport, BoardConfig, Path], tmp_path: Path) -> None:
    transport, board, disk = board_on
    filler = _fill(disk)
    started = time.monotonic()
    with pytest.raises(DiskFullError) as info:
        with board_lock(transport, board, timeout=120, runner_lock_dir=tmp_path / "locks"):
            pass
    assert time.monotonic() - started < 30           # said at once, not after the lock wait
    message = str(info.value)
    path = f"{disk}/{LOCK_NAME}"
    assert message.startswith(f"board tiny: disk full: cannot create the lock file {path} "
                              f"(0 bytes free in {disk}); free space on the board"), message
    assert "\n" not in message
    assert isinstance(info.value, ToolError)
    # nothing left behind: no empty lock that would block every later run, no temp file
    assert sorted(p.name for p in disk.iterdir()) == ["filler.bin"]
    # a board stage reports it as a disk-full finding that is never cached
    result = board_error_result("so_load", board, info.value)
    assert result.status == Status.FAILED
    assert [f.check for f in result.findings] == ["board.disk_full"]
    filler.unlink()                                   # room again: the next run locks
    with board_lock(transport, board, timeout=5, runner_lock_dir=tmp_path / "locks") as mine:
        assert LockInfo.from_line((disk / LOCK_NAME).read_text()) == mine
    assert list(disk.iterdir()) == []


def _plant_empty(root: Path, age_s: float) -> Path:
    """A 0-byte lock file, as an older qnn-ci left it on a full disk, ``age_s`` old."""
    root.mkdir(parents=True, exist_ok=True)
    lock = root / LOCK_NAME
    lock.write_bytes(b"")
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_old_empty_lock_is_taken_over(sshd: SshServer, tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    board = sshd.board(name="sshkit")
    lock = _plant_empty(Path(board.work_root), 3600)
    ssh = SshTransport(board)
    try:
        with caplog.at_level("WARNING", logger="qnn_ci.boards.lock"):
            with board_lock(ssh, board, timeout=10, runner_lock_dir=tmp_path / "locks") as mine:
                assert LockInfo.from_line(lock.read_text()) == mine
    finally:
        ssh.close()
    (warning,) = [r.getMessage() for r in caplog.records if "taking over" in r.getMessage()]
    # the age is read off the board's clock a moment after planting: 3600 s and a bit
    assert "an empty lock file" in warning
    assert re.search(r"it is empty and 36[01]\d s old", warning), warning
    assert not lock.exists()


def test_fresh_empty_lock_waits_and_says_when_it_goes_stale(
        sshd: SshServer, tmp_path: Path) -> None:
    board = sshd.board(name="sshkit")
    lock = _plant_empty(Path(board.work_root), 5)
    ssh = SshTransport(board)
    try:
        with pytest.raises(BoardLockedError) as info:
            with board_lock(ssh, board, timeout=0.5, poll_s=0.1,
                            runner_lock_dir=tmp_path / "locks"):
                pass
    finally:
        ssh.close()
    message = str(info.value)
    assert message.startswith("board sshkit is locked by an empty lock file; gave up after "
                              "0.5 s"), message
    bound = f"{UNREADABLE_STALE_S:g}"
    assert f"an empty or unreadable lock file counts as stale once {bound} s old, in " \
        in message
    assert lock.read_bytes() == b""                   # untouched while young
