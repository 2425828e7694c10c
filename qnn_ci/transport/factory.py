"""Pick the transport a board declares."""

from __future__ import annotations

from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig


def open_transport(board: BoardConfig) -> Transport:
    """A transport for ``board`` (connections open lazily, on the first call)."""
    if board.transport == "ssh":
        from qnn_ci.transport.ssh import SshTransport

        return SshTransport(board)
    if board.transport == "adb":
        from qnn_ci.transport.adb import AdbTransport

        return AdbTransport(board)
    if board.transport == "local":
        from qnn_ci.transport.local import LocalTransport

        return LocalTransport(board)
    if board.transport == "ai-hub":
        raise ValueError(f"board {board.name} is an AI Hub board: it runs jobs (qnn_ci.hub), "
                         "not commands")
    raise ValueError(f"board {board.name}: unknown transport {board.transport!r}")
