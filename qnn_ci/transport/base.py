"""The transport contract every board connection implements.

Commands are argument lists; a transport quotes them (``shlex.join``) itself, so
names and paths from manifests and models never reach a remote shell unquoted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from qnn_ci.errors import ToolError


class TransportError(Exception):
    """The board could not be reached or the connection broke (after retries)."""


class DiskFullError(ToolError):
    """A copy to the board failed and the board's filesystem has no room for it."""


@dataclass
class CommandResult:
    """A command run on a board: exit status, output, whether it timed out."""

    argv: list[str]
    exit_code: int          # -1 when killed by a signal or the connection dropped
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0


class Transport(Protocol):
    name: str               # the board name, for messages

    def run(self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        """Run argv on the board. On timeout the remote process group is killed and
        the result has ``timed_out=True``. Raises TransportError when unreachable."""
        ...

    def put(self, local: Path, remote: str) -> None: ...

    def get(self, remote: str, local: Path) -> None: ...

    def mkdir(self, remote: str) -> None:
        """mkdir -p."""
        ...

    def remove_tree(self, remote: str) -> None: ...

    def listdir(self, remote: str) -> list[str]: ...

    def close(self) -> None: ...
