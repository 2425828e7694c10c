"""Where the board writes: a burst write to an eMMC-backed root filesystem can
trigger a firmware watchdog reset with no log entry (the board just vanishes
mid-run), so the remote work root belongs on a tmpfs such as /tmp."""

from __future__ import annotations

import logging

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def work_root_filesystem(transport: Transport, board: BoardConfig, *,
                         timeout: float = 30.0) -> str | None:
    """The filesystem type of the board's work root (``stat -f``), or None when the
    board cannot tell (busybox without -f, an odd shell)."""
    transport.mkdir(board.work_root)
    result = transport.run(["stat", "-f", "-c", "%T", "--", board.work_root], timeout=timeout)
    text = result.stdout.strip()
    if result.exit_code != 0 or not text or "\n" in text:
        log.info("board %s: cannot read the filesystem of %s: %s", board.name,
                 board.work_root, (result.stderr or text).strip())
        return None
    return text


def storage_findings(board: BoardConfig, fs_type: str | None) -> list[Finding]:
    if fs_type is None or fs_type in MEMORY_FILESYSTEMS:
        return []
    return [Finding(
        "board.work_root_not_tmpfs",
        f"board {board.name}: work_root {board.work_root} is on {fs_type}, not tmpfs; on "
        "boards with an eMMC root a burst write can reset the board with no log entry "
        "(set work_root to a folder under /tmp or another tmpfs)",
        Severity.WARNING, board.name)]
