"""Run a check as an unprivileged user: root reads every file, so a test of an
unreadable file must drop root to mean anything (CI runs as root)."""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

NOBODY = 65534


def world_traversable_tmp() -> Path:
    """A fresh folder an unprivileged user can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="qnn-ci-unpriv-"))
    path.chmod(0o755)
    return path


def run_unprivileged(check: Callable[[], None]) -> str:
    """Run ``check`` in a forked child: as uid/gid 65534 when we are root, as
    ourselves otherwise. Returns "" when it passed, else the child's traceback."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        os.close(read_fd)
        status = 0
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            check()
        except BaseException:
            os.write(write_fd, traceback.format_exc().encode()[:60000])
            status = 1
        finally:
            os.close(write_fd)
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        text = fh.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 and not text:
        text = f"child exited with {os.waitstatus_to_exitcode(status)}"
    return text
