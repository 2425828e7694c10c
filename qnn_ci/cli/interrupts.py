"""SIGINT and SIGTERM for the `qnn-ci` command: both arrive as a ``KeyboardInterrupt``
in the main thread, so every ``except BaseException`` / ``finally`` on the way up
(killing a tool's process group, releasing a board, writing the report) runs.

- SIGINT raises a plain ``KeyboardInterrupt``; SIGTERM raises ``Terminated``, a
  ``KeyboardInterrupt`` that carries the signal number.
- Only the FIRST signal raises. Further ones while the command cleans up are noted
  on stderr and otherwise ignored, so the report is finished; the third one ends
  the process at once (``os._exit``) for a clean-up that hangs.
- The exit status is 128 + the signal number: 130 for SIGINT, 143 for SIGTERM.
- ``deferred()`` holds a signal back until a block ends (the final report).

Handlers are installed only from the main thread, only over the default
disposition (an ignored SIGTERM or a custom SIGINT handler is left alone), and the
previous ones are restored on exit.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_HANDLED = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM (or another terminating signal) arrived: stop like on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"terminated by {signal_name(self.signum)}")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signal_of(exc: BaseException) -> int:
    """The signal behind an interruption: a ``Terminated``'s, else SIGINT."""
    return int(getattr(exc, "signum", signal.SIGINT))


def exit_status(exc: BaseException) -> int:
    """128 + the signal number: 130 for SIGINT (Ctrl-C), 143 for SIGTERM."""
    return 128 + signal_of(exc)


def reason(exc: BaseException) -> str:
    """``interrupted by SIGTERM`` / ``interrupted by SIGINT``."""
    return f"interrupted by {signal_name(signal_of(exc))}"


class _Guard:
    def __init__(self) -> None:
        self.first: int | None = None
        self.later = 0
        self.holding = 0               # > 0 inside deferred()
        self.pending: int | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None and self.holding:
            self.first = self.pending = signum   # raised when deferred() ends
            return
        if self.first is not None:
            self.later += 1
            name = signal_name(signum)
            if self.later >= 2:
                os.write(2, f"qnn-ci: {name} again: stopping now, without cleaning up\n"
                         .encode())
                os._exit(128 + self.first)
            os.write(2, f"qnn-ci: {name}: already stopping, finishing the report "
                     "(send it again to stop at once)\n".encode())
            return
        self.first = signum
        _raise(signum)


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


_active: list[_Guard] = []   # the guard of the innermost stop_on_signals() block


def _takes_over(signum: int, current: Any) -> bool:
    if signum == signal.SIGINT:
        return current is signal.default_int_handler
    return current == signal.SIG_DFL


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT / SIGTERM raise in the main thread (see the module
    docstring). Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    guard = _Guard()
    previous: dict[int, Any] = {}
    _active.append(guard)
    try:
        for signum in _HANDLED:
            current = signal.getsignal(signum)
            if _takes_over(signum, current):
                previous[signum] = current
                signal.signal(signum, guard.handler)
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        _active.remove(guard)


@contextmanager
def deferred() -> Iterator[None]:
    """A signal arriving within the block (e.g. while the final report is printed)
    is raised when the block ends, so the output is whole. Outside a
    ``stop_on_signals()`` block, or off the main thread, this does nothing."""
    if not _active or threading.current_thread() is not threading.main_thread():
        yield
        return
    guard = _active[-1]
    guard.holding += 1
    try:
        yield
    finally:
        guard.holding -= 1
        if not guard.holding and guard.pending is not None:
            signum, guard.pending = guard.pending, None
            _raise(signum)
