"""Board locks: runner-side filelock + a lock file on the board."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.sshd import SshServer
from qnn_ci.boards.lock import LOCK_NAME, BoardLockedError, LockInfo, board_lock
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.local import LocalTransport
from qnn_ci.transport.ssh import SshTransport


@pytest.fixture
def board(tmp_path: Path) -> BoardConfig:
    return BoardConfig(name="kit", transport="local", work_root=str(tmp_path / "board"))


def _plant(board: BoardConfig, holder: LockInfo) -> Path:
    root = Path(board.work_root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_NAME
    path.write_text(holder.to_line() + "\n")
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_lock_file_lives_while_held(board: BoardConfig, tmp_path: Path) -> None:
    t = LocalTransport(board)
    path = Path(board.work_root) / LOCK_NAME
    with board_lock(t, board, timeout=5, runner_lock_dir=tmp_path / "locks") as mine:
        held = LockInfo.from_line(path.read_text())
        assert held == mine and held.host == socket.gethostname()
    assert not path.exists()
    with board_lock(t, board, timeout=5, runner_lock_dir=tmp_path / "locks"):
        assert path.exists()


def test_live_lock_of_another_runner_waits_then_fails(board: BoardConfig,
                                                      tmp_path: Path) -> None:
    other = LockInfo(host="ci-runner-7", pid=4242, runner="ci-runner-7/run-99",
                     since=time.time())
    path = _plant(board, other)
    with pytest.raises(BoardLockedError) as info:
        with board_lock(LocalTransport(board), board, timeout=0.6, poll_s=0.2,
                        runner_lock_dir=tmp_path / "locks"):
            pass
    msg = str(info.value)
    assert msg.startswith("board kit is locked by runner ci-runner-7/run-99 (pid 4242 on "
                          "ci-runner-7) since ")
    assert "gave up after 0.6 s" in msg
    assert LockInfo.from_line(path.read_text()) == other          # untouched


def test_waits_until_the_holder_leaves(board: BoardConfig, tmp_path: Path) -> None:
    path = _plant(board, LockInfo("ci-runner-7", 4242, "r7", time.time()))
    threading.Timer(0.5, path.unlink).start()
    with board_lock(LocalTransport(board), board, timeout=30, poll_s=0.1,
                    runner_lock_dir=tmp_path / "locks") as mine:
        assert LockInfo.from_line(path.read_text()) == mine


@pytest.mark.parametrize("kind", ["dead pid on this host", "too old"])
def test_stale_lock_is_taken_over(board: BoardConfig, tmp_path: Path, kind: str) -> None:
    if kind == "too old":
        stale = LockInfo("ci-runner-7", 4242, "r7", time.time() - 7200)
    else:
        stale = LockInfo(socket.gethostname(), _dead_pid(), "me-earlier", time.time())
    path = _plant(board, stale)
    with board_lock(LocalTransport(board), board, timeout=2, max_age_s=3600,
                    runner_lock_dir=tmp_path / "locks") as mine:
        assert LockInfo.from_line(path.read_text()) == mine


def test_runner_lock_then_stale_board_lock_after_a_crash(board: BoardConfig,
                                                         tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from pathlib import Path\n"
         "from qnn_ci.transport.config import BoardConfig\n"
         "from qnn_ci.boards.lock import board_lock\n"
         "from qnn_ci.transport.local import LocalTransport\n"
         f"b = BoardConfig(name='kit', transport='local', work_root={board.work_root!r})\n"
         f"d = Path({str(locks)!r})\n"
         "with board_lock(LocalTransport(b), b, timeout=10, runner_lock_dir=d):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BoardLockedError, match=rf"locked by runner .*\(pid {holder.pid} "):
            with board_lock(LocalTransport(board), board, timeout=0.5,
                            runner_lock_dir=locks):
                pass
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up: its board lock file is stale (dead pid here)
    assert (Path(board.work_root) / LOCK_NAME).exists()
    with board_lock(LocalTransport(board), board, timeout=5, runner_lock_dir=locks) as mine:
        assert mine.pid != holder.pid


def test_board_lock_over_ssh(sshd: SshServer, tmp_path: Path) -> None:
    board = sshd.board(name="sshkit")
    ssh = SshTransport(board)
    path = Path(board.work_root) / LOCK_NAME
    with board_lock(ssh, board, timeout=5, runner_lock_dir=tmp_path / "a") as mine:
        assert LockInfo.from_line(path.read_text()) == mine
        # a second runner (own runner-side lock dir) sees the board lock and gives up
        with pytest.raises(BoardLockedError, match="board sshkit is locked by runner"):
            with board_lock(ssh, board, timeout=0.5, poll_s=0.1,
                            runner_lock_dir=tmp_path / "b"):
                pass
        assert path.exists()
    assert not path.exists()
    ssh.close()


def test_max_age_comes_from_the_board_and_is_named_while_waiting(
        board: BoardConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    two_hours_old = LockInfo("ci-runner-7", 4242, "r7", time.time() - 7200)
    path = _plant(board, two_hours_old)
    # the default (6 h): another host's 2 h old lock is live; the messages say when it ages out
    with caplog.at_level("INFO", logger="qnn_ci.boards.lock"):
        with pytest.raises(BoardLockedError) as info:
            with board_lock(LocalTransport(board), board, timeout=0.3, poll_s=0.1,
                            runner_lock_dir=tmp_path / "locks"):
                pass
    # 21600 s minus the lock's age (7200 s and the moments since it was planted)
    assert re.search(r"it counts as stale after lock_max_age_s=21600 s, in 14[34]\d\d",
                     str(info.value)), str(info.value)
    assert "set lock_max_age_s in the board declaration" in str(info.value)
    (waiting,) = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    assert "lock_max_age_s=21600 s" in waiting
    assert LockInfo.from_line(path.read_text()) == two_hours_old
    # a board declared with lock_max_age_s: 3600 takes it over
    hourly = replace(board, lock_max_age_s=3600.0)
    with board_lock(LocalTransport(hourly), hourly, timeout=2,
                    runner_lock_dir=tmp_path / "locks") as mine:
        assert LockInfo.from_line(path.read_text()) == mine


def _still_waiting(caplog: pytest.LogCaptureFixture, which: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelname == "WARNING" and f"still waiting for the {which} lock" in r.getMessage()]


def test_a_long_wait_for_the_board_lock_is_logged_with_the_holder(
        board: BoardConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _plant(board, LockInfo("ci-runner-7", 4242, "ci-runner-7/run-99", time.time() - 100))
    with caplog.at_level("INFO", logger="qnn_ci.boards.lock"):
        with pytest.raises(BoardLockedError):
            with board_lock(LocalTransport(board), board, timeout=1.5, poll_s=0.1,
                            progress_s=0.4, runner_lock_dir=tmp_path / "locks"):
                pass
    notes = _still_waiting(caplog, "board")
    assert 2 <= len(notes) <= 4, notes                 # every progress_s, not every poll
    assert re.match(r"board kit: still waiting for the board lock held by runner "
                    r"ci-runner-7/run-99 \(pid 4242 on ci-runner-7\) since .*, held for "
                    r"10\d s; waited \d s, giving up in \d s", notes[0]), notes[0]


def test_a_long_wait_for_the_runner_lock_is_logged_with_the_holder(
        board: BoardConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    locks = tmp_path / "locks"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import time\n"
         "from pathlib import Path\n"
         "from qnn_ci.transport.config import BoardConfig\n"
         "from qnn_ci.boards.lock import board_lock\n"
         "from qnn_ci.transport.local import LocalTransport\n"
         f"b = BoardConfig(name='kit', transport='local', work_root={board.work_root!r})\n"
         f"d = Path({str(locks)!r})\n"
         "with board_lock(LocalTransport(b), b, timeout=10, runner_lock_dir=d):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with caplog.at_level("INFO", logger="qnn_ci.boards.lock"):
            with pytest.raises(BoardLockedError, match=rf"\(pid {holder.pid} on .*held for"):
                with board_lock(LocalTransport(board), board, timeout=1.5, progress_s=0.4,
                                runner_lock_dir=locks):
                    pass
    finally:
        holder.kill()
        holder.wait()
    notes = _still_waiting(caplog, "runner")
    assert notes, caplog.text
    assert f"held by runner {socket.gethostname()} (pid {holder.pid} on " in notes[0]
    assert re.search(r"held for \d+ s; waited \d s, giving up in \d s", notes[0]), notes[0]
    assert str(locks / "kit.lock") in notes[0]


def test_the_default_wait_is_the_boards_lock_timeout(board: BoardConfig,
                                                     tmp_path: Path) -> None:
    _plant(board, LockInfo("ci-runner-7", 4242, "r7", time.time()))
    quick = replace(board, lock_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(BoardLockedError, match=r"gave up after 0\.3 s"):
        with board_lock(LocalTransport(quick), quick, poll_s=0.1,
                        runner_lock_dir=tmp_path / "locks"):
            pass
    assert time.monotonic() - started < 10
