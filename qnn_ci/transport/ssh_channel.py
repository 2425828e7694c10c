"""Running one command on a plain paramiko channel against our own deadline: start it
(stdin closed), read stdout/stderr as they come, and tell an exit from a timeout."""

from __future__ import annotations

import select
import time
from collections.abc import Callable

import paramiko
from fabric import Connection

POLL_S = 0.2                    # longest pause between looks at a running command
_EOF_GRACE_S = 2.0              # exited, no output for this long, yet no EOF (a background
                                # child holds the output open): done


def start_command(conn: Connection, command: str, open_timeout: float,
                  opened: Callable[[paramiko.Channel], None] | None = None
                  ) -> paramiko.Channel:
    """Start ``command`` on a new session channel (stdin closed).

    ``opened`` is handed the channel as soon as it exists: an interrupt (a
    BaseException that is not an Exception) while the command is being started leaves
    it open, since the command may already run on the board, for the caller to kill
    its process group and close it. A failure (an Exception) closes it."""
    transport = conn.client.get_transport()
    if transport is None or not transport.is_active():
        raise EOFError("the SSH connection is closed")
    chan = transport.open_session(timeout=open_timeout)
    if opened is not None:
        opened(chan)
    try:
        chan.exec_command(command)
        chan.shutdown_write()
    except Exception:
        chan.close()
        raise
    except BaseException:
        if opened is None:
            chan.close()
        raise
    return chan


def drain(chan: paramiko.Channel, out: bytearray, err: bytearray) -> bool:
    """Append what has arrived; True when anything did."""
    got = False
    while chan.recv_ready():
        data = chan.recv(1 << 16)
        if not data:
            break
        out += data
        got = True
    while chan.recv_stderr_ready():
        data = chan.recv_stderr(1 << 16)
        if not data:
            break
        err += data
        got = True
    return got


def wait_readable(chan: paramiko.Channel, seconds: float) -> None:
    """Sleep until the channel has data, closes, or ``seconds`` pass."""
    if seconds > 0:
        select.select([chan], [], [], seconds)


def collect(chan: paramiko.Channel, out: bytearray, err: bytearray, deadline: float
             ) -> tuple[int, bool]:
    """Read the command's output until it exits or ``deadline``: (exit status, timed
    out). The status is -1 when the command died by a signal or the connection
    dropped (paramiko's default when no exit status came)."""
    exited_at: float | None = None
    while True:
        got = drain(chan, out, err)
        if chan.closed or (chan.eof_received and chan.exit_status_ready()):
            drain(chan, out, err)
            return chan.exit_status, False
        now = time.monotonic()
        if chan.exit_status_ready():         # output may still follow: wait for a quiet spell
            exited_at = now if exited_at is None or got else exited_at
            if now - exited_at > _EOF_GRACE_S:
                drain(chan, out, err)
                return chan.exit_status, False
        remaining = deadline - now
        if remaining <= 0:
            drain(chan, out, err)
            return -1, True
        if not got:
            wait_readable(chan, min(POLL_S, remaining))
