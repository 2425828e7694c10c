"""Inference latency on the board: read what ``qnn-profile-viewer`` prints for a
``qnn-net-run --profiling_level basic`` log, or time the runs when no profile can
be read; median and p90 in milliseconds.

Viewer output (text on stdout; see docs/board-runs.md, "Latency", for the public
examples each shape comes from):

- per-inference listing — ``Execute Stats:`` then one ``Execute Stat <k>`` block per
  inference with backend lines ``QNN (execute) time : 3051  us``: every inference's
  time, so median and p90 are exact;
- a CSV event stream (header ``...,Event Level,Event Identifier``): one root
  ``EXECUTE`` row (or ``QNN (execute) time`` row) per inference;
- summary only — ``Execute Stats (Average):`` / ``(Min):`` / ``(Max):`` sections, each
  with ``NetRun:  2952 us`` (possibly below ``Total Inference Time:`` and
  ``Graph 0 (name):`` lines): the average stands for the median and the maximum for
  the p90, and the result says so (``statistic``).

Anything else reads as "no profile" (None), never an exception.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_TEXT = 4_000_000          # viewer output read at most (characters)
MAX_SAMPLES = 100_000
_UNITS = {"us": 1e3, "ms": 1.0, "ns": 1e6, "s": 1e-3}      # per millisecond
_NUM = r"([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_VALUE = re.compile(_NUM + r"\s*(us|ms|ns|s)\b")
_STAT_BLOCK = re.compile(r"^\s*Execute Stat\s+\d+\s*$")
_QNN_EXEC = re.compile(r"^\s*QNN \(execute\) time\s*:\s*" + _NUM + r"\s*(us|ms|ns|s)\b")
_SUMMARY = re.compile(r"^\s*Execute Stats \((Average|Min|Max|Overall)\)\s*:")
_NETRUN = re.compile(r"^\s*NetRun\s*:\s*" + _NUM + r"\s*(us|ms|ns|s)\b")
_SECTION = re.compile(r"^\S.*Stats?\b.*:\s*$")


@dataclass(frozen=True)
class Latency:
    """Latency of ``runs`` inferences: ``method`` "profile" | "timed"."""

    median_ms: float
    p90_ms: float
    runs: int
    method: str
    statistic: str             # what median/p90 are, in words
    perf_profile: str = ""

    def properties(self) -> dict[str, Any]:
        """The ``latency.*`` JUnit properties."""
        return {"latency.median_ms": round(self.median_ms, 4),
                "latency.p90_ms": round(self.p90_ms, 4), "latency.runs": self.runs,
                "latency.perf_profile": self.perf_profile, "latency.method": self.method,
                "latency.statistic": self.statistic}

    def describe(self) -> str:
        return (f"latency median {self.median_ms:.3f} ms, p90 {self.p90_ms:.3f} ms over "
                f"{self.runs} inference(s) ({self.method}, perf profile "
                f"{self.perf_profile or 'default'})")


def _ms(value: str, unit: str) -> float | None:
    try:
        v = float(value) / _UNITS[unit]
    except (ValueError, KeyError, OverflowError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


def median_p90(values: Sequence[float]) -> tuple[float, float]:
    """(median, p90 by nearest rank) of a non-empty list."""
    ordered = sorted(values)
    p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
    return float(statistics.median(ordered)), float(p90)


def _per_inference_blocks(lines: list[str]) -> list[float]:
    """Each ``Execute Stat <k>`` block's ``QNN (execute) time``."""
    values: list[float] = []
    in_block = False
    for line in lines:
        if _STAT_BLOCK.match(line):
            in_block = True
            continue
        m = _QNN_EXEC.match(line)
        if in_block and m:
            v = _ms(m.group(1), m.group(2))
            if v is not None:
                values.append(v)
            in_block = False
            if len(values) >= MAX_SAMPLES:
                break
    return values


def _csv_events(text: str) -> list[float]:
    """Per-inference times from a CSV event stream (root ``EXECUTE`` rows, else the
    ``QNN (execute) time`` rows)."""
    start = text.find("Msg Timestamp")
    if start < 0 or "Event Identifier" not in text[start:start + 400]:
        return []
    execute: list[float] = []
    qnn: list[float] = []
    try:
        rows = csv.reader(io.StringIO(text[start:]))
        header = [h.strip() for h in next(rows)]
        col = {name: header.index(name) for name in
               ("Message", "Time", "Unit of Measurement", "Event Level", "Event Identifier")
               if name in header}
        if len(col) < 5:
            return []
        for n, row in enumerate(rows):
            if n > MAX_SAMPLES * 20 or len(execute) >= MAX_SAMPLES:
                break
            if len(row) <= max(col.values()):
                continue
            unit = row[col["Unit of Measurement"]].strip().lower()
            if unit not in _UNITS:
                continue
            v = _ms(row[col["Time"]].strip(), unit)
            if v is None:
                continue
            if (row[col["Message"]].strip() == "EXECUTE"
                    and row[col["Event Level"]].strip() == "ROOT"):
                execute.append(v)
            elif row[col["Event Identifier"]].strip() == "QNN (execute) time":
                qnn.append(v)
    except (csv.Error, StopIteration):
        return execute or qnn
    return execute or qnn


def _summary(lines: list[str]) -> dict[str, float]:
    """{"Average"|"Min"|"Max": the first NetRun time in that section}."""
    found: dict[str, float] = {}
    current: str | None = None
    for line in lines:
        m = _SUMMARY.match(line)
        if m:
            current = m.group(1)
            continue
        if current is None:
            continue
        if _SECTION.match(line) and not line.startswith(("Total Inference Time", "Graph ")):
            current = None
            continue
        nm = _NETRUN.match(line)
        if nm and current not in found:
            v = _ms(nm.group(1), nm.group(2))
            if v is not None:
                found[current] = v
    return found


def parse_viewer_output(text: str, *, runs: int, perf_profile: str = "") -> Latency | None:
    """The latency in ``qnn-profile-viewer`` text, or None when it holds none."""
    text = text[:MAX_TEXT]
    lines = text.splitlines()
    values = _per_inference_blocks(lines) or _csv_events(text)
    if values:
        median, p90 = median_p90(values)
        return Latency(median, p90, len(values), "profile",
                       f"median and p90 of {len(values)} profiled inference(s)", perf_profile)
    summary = _summary(lines)
    if "Average" in summary:
        avg = summary["Average"]
        top = max(summary.get("Max", avg), avg)
        return Latency(avg, top, runs, "profile",
                       "average and max of the profile (the viewer printed no "
                       "per-inference times)", perf_profile)
    return None


def timed(total_s: float, single_s: float, runs: int, *, perf_profile: str = "") -> Latency | None:
    """Wall-clock latency: a run of ``runs`` inferences took ``total_s``, one of a
    single inference ``single_s`` (load, init, one inference); the difference per
    extra inference is the mean inference time (median and p90 alike). With one
    run only, the whole single run (load and init included)."""
    if not (math.isfinite(total_s) and math.isfinite(single_s)) or total_s < 0 or runs < 1:
        return None
    if runs == 1:
        ms = total_s * 1e3
        return Latency(ms, ms, 1, "timed", "wall-clock of one run, load and init included",
                       perf_profile) if math.isfinite(ms) else None
    mean_ms = max(0.0, total_s - single_s) / (runs - 1) * 1e3
    if not math.isfinite(mean_ms):
        return None
    return Latency(mean_ms, mean_ms, runs, "timed",
                   f"mean of {runs} inferences by wall-clock (a {runs}-inference run minus "
                   "a 1-inference run)", perf_profile)
