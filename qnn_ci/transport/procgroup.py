"""Ending a local child's whole process group (the child was started with
``start_new_session=True``, so its pid is the group id)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

GONE_WITHIN_S = 2.0             # after KILL: how long to wait for the group to vanish


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """TERM the group, wait up to ``grace_s`` for the leader, then KILL whatever is
    left — also when the leader is gone, or a second interrupt cuts the grace short —
    reap the leader and wait (briefly) until no process of the group is left."""
    try:
        if _signal_group(proc.pid, signal.SIGTERM):
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
    finally:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + GONE_WITHIN_S
        while _signal_group(proc.pid, 0) and time.monotonic() < deadline:
            time.sleep(0.01)
