"""One run at a time per board.

Two locks, taken in this order and released in reverse:

1. a runner-side ``filelock`` (``<runner_lock_dir>/<board>.lock``): runs on the
   same machine queue here; the OS frees it when a process dies;
2. a lock file on the board, ``<work_root>/.qnn-ci.lock``, created atomically
   (``set -C``, i.e. ``O_EXCL``) and holding one JSON line: host, pid, runner id
   and start time. Runs from other machines queue here.

A board lock is stale, and taken over, when its holder ran on this host and that
pid is gone, or when it is older than the board's ``lock_max_age_s`` (default 6 h:
a holder on another host cannot be checked, only aged out). Waiting is logged and
a timeout raises ``BoardLockedError`` naming the holder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import filelock

from qnn_ci.boards.config import BoardConfig
from qnn_ci.errors import ToolError
from qnn_ci.transport.base import Transport

log = logging.getLogger(__name__)

LOCK_NAME = ".qnn-ci.lock"
DEFAULT_MAX_AGE_S = BoardConfig.lock_max_age_s
_OP_TIMEOUT = 60.0
_CREATE = 'set -C; printf "%s\\n" "$2" > "$1"'
_REMOVE_IF_SAME = '[ "$(cat -- "$1" 2>/dev/null)" = "$2" ] && rm -f -- "$1"; exit 0'


class BoardLockedError(ToolError):
    """Another run held the board for longer than we were willing to wait."""


@dataclass(frozen=True)
class LockInfo:
    host: str
    pid: int
    runner: str
    since: float            # epoch seconds, the holder's clock

    def to_line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_line(cls, text: str) -> LockInfo | None:
        try:
            d = json.loads(text)
            return cls(host=str(d["host"]), pid=int(d["pid"]), runner=str(d["runner"]),
                       since=float(d["since"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"runner {self.runner} (pid {self.pid} on {self.host}) since {when}"


def runner_id() -> str:
    """Who we are, for lock files: $QNN_CI_RUNNER_ID, the CI runner and run, or the host."""
    if os.environ.get("QNN_CI_RUNNER_ID"):
        return os.environ["QNN_CI_RUNNER_ID"]
    host = socket.gethostname()
    if os.environ.get("GITHUB_RUN_ID"):
        return f"{os.environ.get('RUNNER_NAME') or host}/run-{os.environ['GITHUB_RUN_ID']}"
    return host


def default_runner_lock_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "qnn-ci" / "locks"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_reason(holder: LockInfo, *, max_age_s: float, now: float | None = None) -> str | None:
    """Why ``holder`` no longer holds the board, or None while it is live."""
    now = time.time() if now is None else now
    if holder.host == socket.gethostname() and not _pid_alive(holder.pid):
        return f"pid {holder.pid} is no longer running on {holder.host}"
    if now - holder.since > max_age_s:
        return f"it is older than {max_age_s:g} s"
    return None


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


@contextmanager
def _runner_lock(board: BoardConfig, lock_dir: Path, timeout: float) -> Iterator[None]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    base = lock_dir / _safe_name(board.name)
    owner_file = base.with_name(base.name + ".owner")
    lock = filelock.FileLock(str(base) + ".lock")
    try:
        lock.acquire(timeout=max(timeout, 0.0))
    except filelock.Timeout:
        holder = None
        try:
            holder = LockInfo.from_line(owner_file.read_text())
        except OSError:
            pass
        who = holder.describe() if holder else "another run on this machine"
        raise BoardLockedError(f"board {board.name} is locked by {who}; gave up after "
                               f"{timeout:g} s (runner lock {lock.lock_file})") from None
    try:
        owner_file.write_text(LockInfo(socket.gethostname(), os.getpid(), runner_id(),
                                       time.time()).to_line())
        yield
    finally:
        lock.release()


def _read_holder(transport: Transport, path: str) -> tuple[str, LockInfo | None] | None:
    r = transport.run(["cat", "--", path], timeout=_OP_TIMEOUT)
    if r.exit_code != 0:
        return None                          # gone between our try and our look
    raw = r.stdout.rstrip("\n")
    return raw, LockInfo.from_line(raw)


def _remove_if_same(transport: Transport, path: str, raw: str) -> None:
    transport.run(["sh", "-c", _REMOVE_IF_SAME, "qnn-ci-unlock", path, raw],
                  timeout=_OP_TIMEOUT)


def _acquire_board_lock(transport: Transport, board: BoardConfig, path: str, deadline: float,
                        timeout: float, max_age_s: float, poll_s: float) -> LockInfo:
    transport.mkdir(board.work_root)
    announced = False
    vanished = 0
    taken_over: set[str] = set()
    while True:
        mine = LockInfo(socket.gethostname(), os.getpid(), runner_id(), time.time())
        r = transport.run(["sh", "-c", _CREATE, "qnn-ci-lock", path, mine.to_line()],
                          timeout=_OP_TIMEOUT)
        if r.exit_code == 0:
            log.debug("board %s: locked (%s)", board.name, path)
            return mine
        seen = _read_holder(transport, path)
        if seen is None:                     # not there, yet we could not create it
            vanished += 1
            if vanished >= 3:
                raise ToolError(f"board {board.name}: cannot create {path}: "
                                f"{(r.stderr or r.stdout).strip()}")
            continue
        raw, holder = seen
        if holder is not None:
            why = stale_reason(holder, max_age_s=max_age_s)
            if why and raw in taken_over:
                raise ToolError(f"board {board.name}: cannot remove the stale lock {path}")
            if why:
                taken_over.add(raw)
                log.warning("board %s: taking over a stale lock of %s: %s", board.name,
                            holder.describe(), why)
                _remove_if_same(transport, path, raw)
                continue
        who = holder.describe() if holder else f"an unreadable lock file ({raw[:80]!r})"
        aging = _age_note(holder, max_age_s)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BoardLockedError(
                f"board {board.name} is locked by {who}; gave up after {timeout:g} s "
                f"(if that run is gone, remove {path} on the board; {aging})")
        if not announced:
            log.info("board %s is locked by %s; waiting up to %.0f s (%s)", board.name, who,
                     remaining, aging)
            announced = True
        time.sleep(min(poll_s, remaining))


def _age_note(holder: LockInfo | None, max_age_s: float) -> str:
    """When the lock will count as stale, for the waiting messages."""
    limit = f"lock_max_age_s={max_age_s:g} s"
    if holder is None:
        return f"an unreadable lock file is never taken over; {limit}"
    left = holder.since + max_age_s - time.time()
    return (f"it counts as stale after {limit}, in {max(left, 0):.0f} s; set lock_max_age_s "
            "in the board declaration to change that")


@contextmanager
def board_lock(transport: Transport, board: BoardConfig, *, timeout: float,
               runner_lock_dir: Path, max_age_s: float | None = None,
               poll_s: float = 1.0) -> Iterator[LockInfo]:
    """Hold ``board`` for the duration of the ``with`` block; yields our lock record.
    ``max_age_s`` (default: the board's ``lock_max_age_s``) ages out other hosts' locks.

    Raises BoardLockedError when another holder keeps it past ``timeout`` seconds,
    TransportError when the board cannot be reached.
    """
    max_age_s = board.lock_max_age_s if max_age_s is None else max_age_s
    deadline = time.monotonic() + timeout
    path = f"{board.work_root.rstrip('/')}/{LOCK_NAME}"
    with _runner_lock(board, Path(runner_lock_dir), timeout):
        mine = _acquire_board_lock(transport, board, path, deadline, timeout, max_age_s,
                                   poll_s)
        try:
            yield mine
        finally:
            try:
                _remove_if_same(transport, path, mine.to_line())
            except Exception as exc:  # the board went away: the lock goes stale by age
                log.warning("board %s: could not remove %s: %s", board.name, path, exc)
