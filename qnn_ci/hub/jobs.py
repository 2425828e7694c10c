"""Submitted AI Hub jobs, waited for together: polled with a growing pause (1 s up
to 30 s), bounded by the board's ``job_timeout_s``, with a progress line every 30 s.

``qai-hub`` 0.56 has no call that cancels a job, so an interrupt cannot stop what
was submitted: it is logged with each job's address (to stop it on AI Hub's web
page) and the interrupt goes on. A job that ends FAILED is a ``HubError``
quoting AI Hub's reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qnn_ci.hub.client import HubClient, HubError

log = logging.getLogger(__name__)

FIRST_POLL_S = 1.0
MAX_POLL_S = 30.0
PROGRESS_EVERY_S = 30.0


@dataclass
class Submitted:
    """One job this run submitted: what it is for, and the client's job object."""

    label: str                   # "compile", "inference", "profile"
    job: Any
    submitted_at: float

    @property
    def job_id(self) -> str:
        return str(self.job.job_id)

    @property
    def url(self) -> str:
        try:
            return str(self.job.url)
        except Exception:          # the address is only for messages
            return self.job_id

    def describe(self) -> str:
        return f"{self.label} job {self.job_id} ({self.url})"


def submit(hub: HubClient, label: str, fn: Callable[[], Any]) -> Submitted:
    job = hub.call(f"submitting the {label} job", fn)
    found = Submitted(label, job, time.monotonic())
    log.info("%s: submitted %s", hub.where(), found.describe())
    return found


def wait_all(hub: HubClient, jobs: list[Submitted], *,
             progress: Callable[[str], None] | None = None,
             sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait until every job in ``jobs`` ended; raise for the first that failed or
    ran out of time (the others are still waited for, so none is left behind
    unreported)."""
    pending = list(jobs)
    pause = FIRST_POLL_S
    started = time.monotonic()
    last_note = started
    failures: list[HubError] = []
    try:
        while pending:
            for sub in list(pending):
                status = hub.call(f"the status of {sub.describe()}", sub.job.get_status)
                if status.finished:
                    pending.remove(sub)
                    if not status.success:
                        reason = " ".join(str(status.message or "no reason given").split())
                        failures.append(HubError("hub.job_failed", hub.mask(
                            f"{hub.where()}: {sub.describe()} failed on "
                            f"'{_device_name(sub)}': {reason}")))
                elif time.monotonic() - sub.submitted_at > hub.board.job_timeout_s:
                    pending.remove(sub)
                    failures.append(HubError("hub.timeout", hub.mask(
                        f"{hub.where()}: {sub.describe()} still {status.code} after "
                        f"{hub.board.job_timeout_s:g} s (job_timeout_s); it goes on on AI "
                        "Hub: see its page"), transient=True))
            if not pending:
                break
            now = time.monotonic()
            if progress is not None and now - last_note >= PROGRESS_EVERY_S:
                progress(f"{hub.where()}: waiting for "
                         + ", ".join(s.describe() for s in pending)
                         + f" ({now - started:.0f} s)")
                last_note = now
            sleep(pause)
            pause = min(MAX_POLL_S, pause * 1.5)
    except (KeyboardInterrupt, SystemExit):
        if pending:
            log.warning("%s: interrupted; qai-hub cannot cancel jobs, these go on on AI Hub "
                        "(stop them on their pages): %s", hub.where(),
                        "; ".join(s.describe() for s in pending))
        raise
    if failures:
        raise failures[0]


def _device_name(sub: Submitted) -> str:
    try:
        return str(sub.job.device.name)
    except Exception:
        return "the device"
