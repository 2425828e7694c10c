"""Which board an export runs on, and a locked connection to it."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.spec import ExportSpec

if TYPE_CHECKING:   # the boards, the lock and the transports: when a board is used, not at load
    from qnn_ci.transport.base import Transport
    from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "QNN_CI_LOCK_DIR"


def board_name(export: ExportSpec, board_override: str | None) -> str | None:
    """``--qnn-board`` wins over the export's ``board:``."""
    return board_override or export.board


def board_problem(export: ExportSpec, boards: Mapping[str, Any],
                  board_override: str | None) -> str | None:
    """Why this export cannot run on a board here (a skip reason), else None."""
    name = board_name(export, board_override)
    if not name:
        return f"export {export.name} names no board"
    if name not in boards:
        known = f" (configured: {', '.join(sorted(boards))})" if boards else ""
        return f"board {name} is not configured{known}"
    return None


def resolve_board(export: ExportSpec, boards: Mapping[str, Any],
                  board_override: str | None) -> BoardConfig:
    from qnn_ci.transport.config import BoardConfig  # configured boards hold them already

    name = board_name(export, board_override)
    problem = board_problem(export, boards, board_override)
    if problem or name is None:
        raise LookupError(problem)
    board = boards[name]
    if not isinstance(board, BoardConfig):
        raise TypeError(f"board {name}: expected a BoardConfig, got {type(board).__name__}")
    return board


def lock_dir(environ: Mapping[str, str]) -> Path:
    """Runner-side lock folder: ``$QNN_CI_LOCK_DIR``, else the lock module's default
    (``$XDG_CACHE_HOME/qnn-ci/locks`` or ``~/.cache/qnn-ci/locks``)."""
    from qnn_ci.boards.lock import default_runner_lock_dir

    given = environ.get(LOCK_DIR_ENV)
    return Path(given).expanduser() if given else default_runner_lock_dir()


@contextmanager
def board_session(board: BoardConfig, environ: Mapping[str, str], *,
                  lock_timeout: float | None = None) -> Iterator[Transport]:
    """An open transport to ``board`` holding the board's lock (runner side and on
    the board). ``lock_timeout`` defaults to the board's ``lock_timeout_s``.
    Raises TransportError when the board cannot be reached, BoardLockedError when
    another run keeps it past the lock timeout and DiskFullError when the board has
    no room for the lock file."""
    from qnn_ci.boards.lock import board_lock
    from qnn_ci.transport.factory import open_transport

    transport = open_transport(board)
    try:
        timeout = board.lock_timeout_s if lock_timeout is None else lock_timeout
        with board_lock(transport, board, timeout=timeout,
                        runner_lock_dir=lock_dir(environ)):
            yield transport
    finally:
        transport.close()


def board_fingerprint(board: BoardConfig) -> dict[str, Any]:
    """What identifies the board and the tools on it for a cache key (an AI Hub
    board: the device and the service, never the token)."""
    if board.transport == "ai-hub":
        return {"board": board.name, "soc": board.soc, "transport": board.transport,
                "device": board.device, "chipset": board.chipset, "api_url": board.api_url,
                "project": board.project, "options": board.options}
    return {"board": board.name, "soc": board.soc, "transport": board.transport,
            "host": board.host,
            "port": board.port, "serial": board.serial, "qnn_lib_dir": board.qnn_lib_dir,
            "net_run": board.net_run, "env": dict(sorted(board.env.items()))}
