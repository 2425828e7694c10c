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

import posixpath
import re
import shlex
from typing import TYPE_CHECKING

from qnn_ci.errors import ToolError
from qnn_ci.transport.base import CommandResult

if TYPE_CHECKING:
    from qnn_ci.boards.config import BoardConfig

SMALL_OP_TIMEOUT = 60.0
PGID_MARKER = "__qnn_ci_pgid="
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MARKER_LINE = re.compile(re.escape(PGID_MARKER) + r"(\d+)\r?\n?")


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
