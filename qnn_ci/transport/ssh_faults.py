"""How an SSH connection fails, said in one line: paramiko's own log records lowered
to DEBUG, a copy that stalls (watchdog), a server that drops the connection or never
sends its banner, and the short reason each gives."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fabric import Connection
from paramiko.ssh_exception import NoValidConnectionsError, SSHException

log = logging.getLogger(__name__)

_PARAMIKO_LOGGERS = ("paramiko", "paramiko.transport", "paramiko.transport.sftp",
                     "paramiko.hostkeys", "paramiko.auth_strategy")


class _ToDebug(logging.Filter):
    """Lowers a record to DEBUG: paramiko logs a handshake failure at ERROR, with its
    traceback, from its own thread; Python's last-resort handler would print that
    to stderr. The failure is reported once, as our one-line error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_TO_DEBUG = _ToDebug()


def quiet_paramiko() -> None:
    """Lower paramiko's log records to DEBUG (idempotent)."""
    for name in _PARAMIKO_LOGGERS:
        logger = logging.getLogger(name)
        if _TO_DEBUG not in logger.filters:
            logger.addFilter(_TO_DEBUG)


quiet_paramiko()


class Stalled(TimeoutError):
    """A file copy moved no data for the board's timeout (the board hung)."""


class Watchdog:
    """Calls ``on_stall`` once when ``progress()`` was not called for ``stall_s``."""

    def __init__(self, stall_s: float, on_stall: Callable[[], None]) -> None:
        self.stall_s = stall_s
        self.on_stall = on_stall
        self.fired = False
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="qnn-ci-sftp-watchdog")

    def progress(self, *_: object) -> None:
        self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._done.wait(min(0.1, self.stall_s / 4)):
            if time.monotonic() - self._last >= self.stall_s:
                self.fired = True
                try:
                    self.on_stall()
                except Exception as exc:    # the close is best effort; the copy still ends
                    log.debug("closing a stalled connection failed: %s", exc)
                return

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def hard_close(conn: Connection) -> None:
    """Close the connection without talking to the peer (it may be frozen: a polite
    channel close would wait for an answer that never comes)."""
    transport = conn.client.get_transport()
    if transport is not None:
        transport.close()


class Dropped(SSHException):
    """The server closed or reset the connection; the text says what is known."""


class NoBanner(SSHException):
    """TCP connected, but no SSH banner came within the connect timeout."""


def cause(exc: BaseException | None) -> str:
    """A short, never empty, reason for a closed connection."""
    if isinstance(exc, Dropped | NoBanner):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, EOFError) or exc is None:
        return "it closed the connection"
    text = str(exc).strip()
    return text or type(exc).__name__


def root_cause(exc: BaseException) -> BaseException | None:
    """The low-level error under a paramiko SSHException, if any."""
    inner = exc.__cause__ or exc.__context__
    while isinstance(inner, SSHException) and (inner.__cause__ or inner.__context__):
        inner = inner.__cause__ or inner.__context__
    return inner


def says_dropped(exc: BaseException) -> bool:
    """paramiko's words for a connection the server closed under us: its SFTP client
    ("Server connection dropped: ") and its packetizer ("Socket is closed")."""
    text = str(exc).strip()
    return text.startswith("Server connection dropped") or text == "Socket is closed"


def dropped(where: str, exc: BaseException | None) -> Dropped:
    return Dropped(f"connection dropped by the server ({where}{cause(exc)})")


def reason(exc: BaseException) -> str:
    if isinstance(exc, Stalled | Dropped | NoBanner):
        return str(exc)
    if isinstance(exc, NoValidConnectionsError):
        return "connection refused (" + ", ".join(
            f"{addr[0]}:{addr[1]}" for addr in exc.errors) + ")"
    if isinstance(exc, TimeoutError):
        return "no answer (timed out)"
    if isinstance(exc, EOFError | ConnectionError):
        return str(dropped("", exc))
    text = str(exc).strip()
    if says_dropped(exc):
        return str(dropped("", root_cause(exc)))
    return text or type(exc).__name__
