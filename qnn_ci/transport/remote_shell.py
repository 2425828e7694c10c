"""The shell lines remote transports (SSH, ADB) send: quoting, env, process groups.

Every command runs as::

    printf '%s\\n' "__qnn_ci_pgid=$$" && cd -- '<cwd>' && export K='v' && exec <argv>

The remote shell is the leader of its own process group (sshd and adbd start each
session with ``setsid``), so ``$$`` names the group; ``exec`` keeps the command in
it, and everything the command starts stays in it unless it calls ``setsid``
itself. On a timeout the transport kills that whole group over a new channel
(closing the channel alone leaves the process running on the board).
"""

from __future__ import annotations

import logging
import posixpath
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from qnn_ci.errors import ToolError
from qnn_ci.transport.base import CommandResult, DiskFullError, TransportError

if TYPE_CHECKING:
    from qnn_ci.transport.config import BoardConfig

SMALL_OP_TIMEOUT = 60.0
PGID_MARKER = "__qnn_ci_pgid="
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MARKER_LINE = re.compile(re.escape(PGID_MARKER) + r"(\d+)\r?\n?")

log = logging.getLogger(__name__)


def merged_env(board_env: dict[str, str], env: dict[str, str] | None) -> dict[str, str]:
    """Board-wide variables overridden by the call's; names must be shell identifiers."""
    out = dict(board_env)
    out.update(env or {})
    for name in out:
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
    return out


def wrap_command(argv: list[str], *, env: dict[str, str], cwd: str | None) -> str:
    """One shell line that reports its process group, then runs argv literally."""
    if not argv:
        raise ValueError("empty command")
    parts = [f"printf '%s\\n' \"{PGID_MARKER}$$\""]
    if cwd:
        parts.append(f"cd -- {shlex.quote(cwd)}")
    if env:
        parts.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    parts.append("exec " + shlex.join(argv))
    return " && ".join(parts)


def split_pgid(stdout: str) -> tuple[int | None, str]:
    """(process group id, stdout without the marker line)."""
    m = _MARKER_LINE.search(stdout)
    if m is None:
        return None, stdout
    return int(m.group(1)), stdout[: m.start()] + stdout[m.end():]


def kill_group_command(pgid: int) -> str:
    """TERM the group, wait up to ~1 s, then KILL it; falls back to the pid alone."""
    g = int(pgid)
    return (
        f"kill -s TERM -- -{g} 2>/dev/null || kill -s TERM {g} 2>/dev/null; "
        f"i=0; while [ $i -lt 10 ] && kill -s 0 -- -{g} 2>/dev/null; "
        "do sleep 0.1; i=$((i+1)); done; "
        f"kill -s KILL -- -{g} 2>/dev/null; kill -s KILL {g} 2>/dev/null; exit 0"
    )


def removable_path(path: str, work_root: str) -> str:
    """The normalised path if it is strictly below ``work_root``; ValueError otherwise.

    Guards ``rm -rf``: refuses '', '/', relative paths, the work root itself and
    anything that ``..`` takes outside it.
    """
    root = posixpath.normpath(work_root or "")
    if not path or not path.startswith("/"):
        raise ValueError(f"refusing to remove {path!r}: not an absolute path")
    norm = posixpath.normpath(path)
    if not root.startswith("/") or root == "/":
        raise ValueError(f"refusing to remove {path!r}: work_root {work_root!r} is not a "
                         "dedicated absolute folder")
    if norm == "/" or not norm.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"refusing to remove {path!r}: not under the board's work_root "
                         f"{work_root!r}")
    return norm


class ShellFileOps:
    """Folder operations done with plain shell commands over ``run`` (SSH, ADB)."""

    name: str
    board: BoardConfig

    def run(self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        raise NotImplementedError

    def _kill_group(self, pgid: int) -> None:
        raise NotImplementedError

    def _kill_interrupted(self, pgid: int | None, argv: list[str], exc: BaseException
                          ) -> None:
        """The local wait for ``argv`` was interrupted by ``exc``: kill the command's
        remote process group, or say that it may still run when its id never came."""
        what = type(exc).__name__
        if pgid is None:
            log.warning("board %s: %s interrupted (%s) before it reported its process "
                        "group; it may still run on the board", self.name, argv[0], what)
            return
        log.warning("board %s: %s interrupted (%s): killing remote process group %d",
                    self.name, argv[0], what, pgid)
        self._kill_group(pgid)

    def _check(self, argv: list[str], what: str) -> None:
        result = self.run(argv, timeout=min(self.board.timeout_s, SMALL_OP_TIMEOUT))
        if result.exit_code != 0:
            raise ToolError(f"board {self.name}: {what} failed (exit {result.exit_code}): "
                            f"{(result.stderr or result.stdout).strip()}")

    def mkdir(self, remote: str) -> None:
        self._check(["mkdir", "-p", "--", remote], f"mkdir -p {remote}")

    def remove_tree(self, remote: str) -> None:
        path = removable_path(remote, self.board.work_root)
        self._check(["rm", "-rf", "--", path], f"rm -rf {path}")

    def free_bytes(self, remote_dir: str) -> int | None:
        """Bytes free for us on the filesystem holding ``remote_dir`` (``df -P``), or
        None when the board cannot tell."""
        result = self.run(["df", "-P", "--", remote_dir],
                          timeout=min(self.board.timeout_s, SMALL_OP_TIMEOUT))
        return parse_df_available(result.stdout) if result.exit_code == 0 else None

    def remote_size(self, remote: str) -> int | None:
        """Size of a file on the board (``stat -c %s``), None when it is not there."""
        result = self.run(["stat", "-c", "%s", "--", remote],
                          timeout=min(self.board.timeout_s, SMALL_OP_TIMEOUT))
        text = result.stdout.strip()
        return int(text) if result.exit_code == 0 and text.isdigit() else None

    def explain_failed_put(self, exc: ToolError, local: Path, remote: str) -> ToolError:
        """``exc`` named for what it is when the board's disk is full (the copy tools
        only say "size mismatch in put! 0 != 300000" or "FAIL"), else ``exc`` itself.
        Full: what is free plus what the failed copy already wrote cannot hold the file."""
        folder = posixpath.dirname(remote.rstrip("/")) or "/"
        try:
            size = Path(local).stat().st_size
            free = self.free_bytes(folder)
            if free is None:
                return exc
            written = self.remote_size(remote) or 0
        except (TransportError, ToolError, OSError, ValueError):
            return exc
        if free + written >= size:
            return exc
        return DiskFullError(f"no space left on device on board {self.name} ({folder}: "
                             f"{free} bytes free, {size} needed to put {Path(local).name})")


def parse_df_available(stdout: str) -> int | None:
    """Available bytes from ``df -P`` output (POSIX format: 1024-byte blocks, the
    fourth column; a long device name may wrap the data onto a second line)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    fields = " ".join(lines[1:]).split()
    if len(fields) < 4 or not fields[3].isdigit():
        return None
    return int(fields[3]) * 1024
