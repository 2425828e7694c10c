"""One run at a time per board.

Two locks, taken in this order and released in reverse:

1. a runner-side ``filelock`` (``<runner_lock_dir>/<board>.lock``): runs on the
   same machine queue here; the OS frees it when a process dies;
2. a lock file on the board, ``<work_root>/.qnn-ci.lock``, holding one JSON line:
   host, pid, runner id and start time. Runs from other machines queue here. It is
   created atomically and never half-written: the line goes to a temporary file
   first, which is then hard-linked to the lock name (``ln`` fails when the name
   exists). When the temporary file cannot be written because the board's disk is
   full, that is said (``DiskFullError``) instead of waiting on a lock nobody holds.

A board lock is stale, and taken over, when its holder ran on this host and that
pid is gone, or when it is older than the board's ``lock_max_age_s`` (default 6 h:
a holder on another host cannot be checked, only aged out). An empty or unreadable
lock file (left by an older qnn-ci that crashed or hit a full disk while writing
it) is stale once it is ``UNREADABLE_STALE_S`` old (by the board's clock).

Waiting is logged (INFO when it starts, then a WARNING every ``progress_s`` naming
the holder and how long it has held the board) and a timeout raises
``BoardLockedError`` naming the holder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from qnn_ci.errors import ToolError
from qnn_ci.transport.base import DiskFullError, Transport
from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

LOCK_NAME = ".qnn-ci.lock"
DEFAULT_MAX_AGE_S = BoardConfig.lock_max_age_s
DEFAULT_WAIT_S = BoardConfig.lock_timeout_s
UNREADABLE_STALE_S = 60.0       # nobody takes this long to write one line
PROGRESS_S = 30.0               # how often a wait for a lock is logged
_OP_TIMEOUT = 60.0
_NO_ROOM = 75                   # _CREATE: the temporary file could not be written
# $1 lock path, $2 our line, $3 a unique tag. Write a temporary file, then link it
# to the lock name: the lock is never seen empty, and `ln` fails when it exists.
_CREATE = ('t="$1.$3.tmp"; if ! printf "%s\\n" "$2" > "$t"; then rm -f -- "$t"; '
           f'exit {_NO_ROOM}; fi; ln "$t" "$1"; rc=$?; rm -f -- "$t"; exit $rc')
# The lock's mtime and the board's time (epoch s, "-" when unknown), then its content.
_READ = ('c=$(cat -- "$1" 2>/dev/null) || exit 3; m=$(stat -c %Y -- "$1" 2>/dev/null) '
         '|| m=-; printf "%s %s\\n%s" "$m" "$(date +%s 2>/dev/null || echo -)" "$c"')
_REMOVE_IF_SAME = '[ "$(cat -- "$1" 2>/dev/null)" = "$2" ] && rm -f -- "$1"; exit 0'


class BoardLockedError(ToolError):
    """Another run held the board for longer than we were willing to wait."""


@dataclass(frozen=True)
class LockInfo:
    """Who holds a board's lock: host, pid, runner id and since when (one JSON line)."""

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
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            return None

    def describe(self) -> str:
        try:
            when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (ValueError, OverflowError, OSError):
            when = f"{self.since!r} (not a time)"
        return f"runner {self.runner} (pid {self.pid} on {self.host}) since {when}"

    def held_for(self, now: float | None = None) -> str:
        """``held for 95 s`` by the runner's clock (empty when the clocks disagree)."""
        age = (time.time() if now is None else now) - self.since
        return f"held for {age:.0f} s" if 0 <= age < 1e9 else ""


@dataclass(frozen=True)
class SeenLock:
    """The board's lock file as last read."""

    raw: str
    holder: LockInfo | None
    age_s: float | None         # by the board's clock; None when it cannot tell


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
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def stale_reason(holder: LockInfo, *, max_age_s: float, now: float | None = None) -> str | None:
    """Why ``holder`` no longer holds the board, or None while it is live."""
    now = time.time() if now is None else now
    if holder.host == socket.gethostname() and holder.pid > 0 and not _pid_alive(holder.pid):
        return f"pid {holder.pid} is no longer running on {holder.host}"
    if now - holder.since > max_age_s:
        return f"it is older than {max_age_s:g} s"
    return None


def _unreadable_bound(max_age_s: float) -> float:
    return min(UNREADABLE_STALE_S, max_age_s)


def _what(raw: str) -> str:
    return "an empty lock file" if not raw.strip() else \
        f"an unreadable lock file ({raw[:80]!r})"


def unreadable_stale_reason(raw: str, age_s: float | None, *, max_age_s: float) -> str | None:
    """Why an empty or unreadable lock file is stale (old enough), or None."""
    bound = _unreadable_bound(max_age_s)
    if age_s is None or age_s <= bound:
        return None
    kind = "empty" if not raw.strip() else "unreadable"
    return (f"it is {kind} and {age_s:.0f} s old (over {bound:g} s: a run that crashed "
            "or hit a full disk while writing it)")


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def _read_owner(owner_file: Path) -> LockInfo | None:
    try:
        return LockInfo.from_line(owner_file.read_text())
    except (OSError, UnicodeDecodeError):
        return None


@contextmanager
def _runner_lock(board: BoardConfig, lock_dir: Path, deadline: float, timeout: float,
                 progress_s: float) -> Iterator[None]:
    import filelock  # when a board is used: loading the board stages needs none of it

    lock_dir.mkdir(parents=True, exist_ok=True)
    base = lock_dir / _safe_name(board.name)
    owner_file = base.with_name(base.name + ".owner")
    lock = filelock.FileLock(str(base) + ".lock")
    started = time.monotonic()
    next_note = started + progress_s
    announced = False
    while True:
        remaining = deadline - time.monotonic()
        try:
            lock.acquire(timeout=max(min(remaining, progress_s, 1.0), 0.0))
            break
        except filelock.Timeout:
            pass
        holder = _read_owner(owner_file)
        who = holder.describe() if holder else "another run on this machine"
        held = f", {holder.held_for()}" if holder and holder.held_for() else ""
        if deadline - time.monotonic() <= 0:
            raise BoardLockedError(f"board {board.name} is locked by {who}{held}; gave up "
                                   f"after {timeout:g} s (runner lock {lock.lock_file})"
                                   ) from None
        now = time.monotonic()
        if not announced:
            log.info("board %s is locked by %s (runner lock %s); waiting up to %.0f s",
                     board.name, who, lock.lock_file, deadline - now)
            announced = True
        elif now >= next_note:
            log.warning("board %s: still waiting for the runner lock %s held by %s%s; "
                        "waited %.0f s, giving up in %.0f s", board.name, lock.lock_file, who,
                        held, now - started, deadline - now)
            next_note = now + progress_s
    try:
        owner_file.write_text(LockInfo(socket.gethostname(), os.getpid(), runner_id(),
                                       time.time()).to_line())
        yield
    finally:
        lock.release()


def _read_lock(transport: Transport, path: str) -> SeenLock | None:
    """The lock file as it is now, or None when there is none."""
    r = transport.run(["sh", "-c", _READ, "qnn-ci-lock-read", path], timeout=_OP_TIMEOUT)
    if r.exit_code != 0:
        return None                          # gone between our try and our look
    return parse_lock_read(r.stdout)


def parse_lock_read(stdout: str) -> SeenLock:
    """What ``_READ`` printed: ``<mtime> <now>`` (epoch seconds by the board's clock,
    ``-`` when unknown), then the lock file's content, whatever bytes that is."""
    head, _, raw = stdout.partition("\n")
    raw = raw.rstrip("\n")
    parts = head.split()
    age: float | None = None
    if len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts):
        age = float(int(parts[1]) - int(parts[0]))
    return SeenLock(raw, LockInfo.from_line(raw), age)


def _remove_if_same(transport: Transport, path: str, raw: str) -> None:
    transport.run(["sh", "-c", _REMOVE_IF_SAME, "qnn-ci-unlock", path, raw],
                  timeout=_OP_TIMEOUT)


def _free_bytes(transport: Transport, folder: str) -> int | None:
    free = getattr(transport, "free_bytes", None)
    if free is None:
        return None
    try:
        value = free(folder)
    except Exception:   # a probe for the message only
        return None
    return value if isinstance(value, int) else None


def _disk_full(board: BoardConfig, path: str, free: int | None) -> DiskFullError:
    room = f"{free} bytes free" if free is not None else "no space left on device"
    return DiskFullError(
        f"board {board.name}: disk full: cannot create the lock file {path} ({room} in "
        f"{board.work_root}); free space on the board (old run-* folders under "
        f"{board.work_root}, or other large files on that filesystem) or set work_root "
        "to a filesystem with room, then run again")


def _mkdir_root(transport: Transport, board: BoardConfig, path: str) -> None:
    try:
        transport.mkdir(board.work_root)
    except DiskFullError:
        raise
    except ToolError as exc:
        if "no space left on device" in str(exc).lower():
            raise _disk_full(board, path, None) from None
        raise


def _try_create(transport: Transport, board: BoardConfig, path: str,
                mine: LockInfo) -> bool:
    """Create the lock file holding ``mine``; False when one is there already."""
    tag = _safe_name(f"{mine.host}-{mine.pid}-{secrets.token_hex(4)}")
    try:
        r = transport.run(["sh", "-c", _CREATE, "qnn-ci-lock", path, mine.to_line(), tag],
                          timeout=_OP_TIMEOUT)
    except BaseException as exc:
        if not isinstance(exc, Exception):
            # interrupted while the board may have just created it: take it back
            try:
                _remove_if_same(transport, path, mine.to_line())
            except Exception as cleanup:  # the interrupt matters more; the lock ages out
                log.warning("board %s: could not remove %s after an interrupt: %s",
                            board.name, path, cleanup)
        raise
    if r.exit_code == _NO_ROOM:
        free = _free_bytes(transport, board.work_root)
        text = (r.stderr or r.stdout).strip()
        if (free is not None and free < 64 * 1024) or "no space" in text.lower():
            raise _disk_full(board, path, free)
        raise ToolError(f"board {board.name}: cannot create the lock file {path}: cannot "
                        f"write next to it ({text or f'exit {r.exit_code}'}); check that "
                        f"{board.work_root} is writable")
    if r.exit_code == 0:
        return True
    if r.timed_out:
        raise ToolError(f"board {board.name}: creating the lock file {path} timed out after "
                        f"{_OP_TIMEOUT:g} s")
    return False


def _acquire_board_lock(transport: Transport, board: BoardConfig, path: str, deadline: float,
                        timeout: float, max_age_s: float, poll_s: float,
                        progress_s: float) -> LockInfo:
    _mkdir_root(transport, board, path)
    announced = False
    started = time.monotonic()
    next_note = started + progress_s
    vanished = 0
    taken_over: set[str] = set()
    first_seen: dict[str, float] = {}       # raw -> monotonic time we first saw it
    while True:
        mine = LockInfo(socket.gethostname(), os.getpid(), runner_id(), time.time())
        if _try_create(transport, board, path, mine):
            log.debug("board %s: locked (%s)", board.name, path)
            return mine
        seen = _read_lock(transport, path)
        if seen is None:                     # not there, yet we could not create it
            vanished += 1
            if vanished >= 3:
                raise ToolError(f"board {board.name}: cannot create the lock file {path} "
                                f"(it does not exist, yet `ln` into {board.work_root} fails; "
                                "does that filesystem support hard links?)")
            continue
        raw, holder = seen.raw, seen.holder
        now = time.monotonic()
        if holder is not None:
            why = stale_reason(holder, max_age_s=max_age_s)
        else:
            age = seen.age_s if seen.age_s is not None else now - first_seen.setdefault(raw, now)
            why = unreadable_stale_reason(raw, age, max_age_s=max_age_s)
        if why and raw in taken_over:
            raise ToolError(f"board {board.name}: cannot remove the stale lock {path}")
        if why:
            taken_over.add(raw)
            log.warning("board %s: taking over a stale lock (%s): %s", board.name,
                        holder.describe() if holder else _what(raw), why)
            _remove_if_same(transport, path, raw)
            continue
        who = holder.describe() if holder else _what(raw)
        aging = _age_note(holder, max_age_s, seen.age_s)
        remaining = deadline - now
        if remaining <= 0:
            raise BoardLockedError(
                f"board {board.name} is locked by {who}; gave up after {timeout:g} s "
                f"(if that run is gone, remove {path} on the board; {aging})")
        held = holder.held_for() if holder else (
            f"{seen.age_s:.0f} s old" if seen.age_s is not None else "")
        if not announced:
            log.info("board %s is locked by %s; waiting up to %.0f s (%s)", board.name, who,
                     remaining, aging)
            announced = True
        elif now >= next_note:
            log.warning("board %s: still waiting for the board lock held by %s%s; waited "
                        "%.0f s, giving up in %.0f s (%s)", board.name, who,
                        f", {held}" if held else "", now - started, remaining, aging)
            next_note = now + progress_s
        time.sleep(min(poll_s, remaining))


def _age_note(holder: LockInfo | None, max_age_s: float, age_s: float | None = None) -> str:
    """When the lock will count as stale, for the waiting messages."""
    limit = f"lock_max_age_s={max_age_s:g} s"
    if holder is None:
        bound = _unreadable_bound(max_age_s)
        left = f", in {max(bound - age_s, 0):.0f} s" if age_s is not None else ""
        return f"an empty or unreadable lock file counts as stale once {bound:g} s old{left}"
    left_s = holder.since + max_age_s - time.time()
    return (f"it counts as stale after {limit}, in {max(left_s, 0):.0f} s; set "
            "lock_max_age_s in the board declaration to change that")


@contextmanager
def board_lock(transport: Transport, board: BoardConfig, *, timeout: float | None = None,
               runner_lock_dir: Path, max_age_s: float | None = None,
               poll_s: float = 1.0, progress_s: float = PROGRESS_S) -> Iterator[LockInfo]:
    """Hold ``board`` for the duration of the ``with`` block; yields our lock record.
    ``timeout`` (default: the board's ``lock_timeout_s``) bounds the whole wait, both
    locks together; ``max_age_s`` (default: the board's ``lock_max_age_s``) ages out
    other hosts' locks; a wait is logged every ``progress_s`` seconds.

    Raises BoardLockedError when another holder keeps it past ``timeout`` seconds,
    DiskFullError when the board's disk has no room for the lock file, and
    TransportError when the board cannot be reached.
    """
    timeout = board.lock_timeout_s if timeout is None else timeout
    max_age_s = board.lock_max_age_s if max_age_s is None else max_age_s
    deadline = time.monotonic() + timeout
    path = f"{board.work_root.rstrip('/')}/{LOCK_NAME}"
    with _runner_lock(board, Path(runner_lock_dir), deadline, timeout, progress_s):
        mine = _acquire_board_lock(transport, board, path, deadline, timeout, max_age_s,
                                   poll_s, progress_s)
        try:
            yield mine
        finally:
            try:
                _remove_if_same(transport, path, mine.to_line())
            except Exception as exc:  # the board went away: the lock goes stale by age
                log.warning("board %s: could not remove %s: %s", board.name, path, exc)
