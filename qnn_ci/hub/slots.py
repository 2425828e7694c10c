"""At most ``max_parallel`` exports at once on one AI Hub board from this machine.

Under ``pytest -n N`` every worker may reach the same AI Hub board at once; each
AI Hub stage (one compile, or one inference plus one profile) first takes one of the
board's slots: ``<lock dir>/<board>.hub-slot-<k>.lock`` for k < ``max_parallel``,
held (``filelock``) until its jobs have ended. Another process's slot is free as
soon as that process ends, however it ends. Waiting for a slot is logged every 30 s
and bounded by the board's ``job_timeout_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from qnn_ci.hub.client import HubError
from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

POLL_S = 0.5
NOTE_EVERY_S = 30.0


@contextmanager
def hub_slot(board: BoardConfig, lock_dir: Path, *,
             progress: Callable[[str], None] | None = None,
             sleep: Callable[[float], None] = time.sleep) -> Iterator[int]:
    """Hold one of the board's slots for the body; yields its number."""
    import filelock

    lock_dir.mkdir(parents=True, exist_ok=True)
    locks = [filelock.FileLock(str(lock_dir / f"{board.name}.hub-slot-{k}.lock"),
                               thread_local=False)
             for k in range(board.max_parallel)]
    started = last_note = time.monotonic()
    while True:
        for k, lock in enumerate(locks):
            try:
                lock.acquire(timeout=0)
            except filelock.Timeout:
                continue
            try:
                yield k
            finally:
                lock.release()
            return
        now = time.monotonic()
        if now - started > board.job_timeout_s:
            raise HubError("hub.busy", f"board {board.name} (AI Hub): all {board.max_parallel} "
                           f"slots (max_parallel) stayed taken by other runs for "
                           f"{board.job_timeout_s:g} s (job_timeout_s)", transient=True)
        if now - last_note >= NOTE_EVERY_S:
            text = (f"board {board.name} (AI Hub): waiting for one of its {board.max_parallel} "
                    f"slots (max_parallel), {now - started:.0f} s")
            log.info("%s", text)
            if progress is not None:
                progress(text)
            last_note = now
        sleep(POLL_S)
