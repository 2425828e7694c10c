"""AI Hub's job pages from a stage's properties (``hub.<kind>_job`` and
``hub.<kind>_url``, as ``context_binary`` and ``context_run`` record them on an AI
Hub board), for the job summary and the HTML report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KINDS = ("compile", "inference", "profile")


def hub_jobs(properties: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, job id, page address) of each AI Hub job the properties name; only
    http(s) addresses are given out."""
    found = []
    for kind in KINDS:
        job = str(properties.get(f"hub.{kind}_job") or "")
        url = str(properties.get(f"hub.{kind}_url") or "")
        if job and url.startswith(("https://", "http://")):
            found.append((kind, job, url))
    return found
