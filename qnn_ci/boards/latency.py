"""Inference latency on the board: read what ``qnn-profile-viewer`` prints for a
``qnn-net-run --profiling_level basic`` log (or writes with ``--output <x>.csv``), or
time the runs when no profile can be read; median and p90 in milliseconds.

Viewer output shapes read (docs/board-runs.md, "Latency", cites the public example
each comes from); the first that gives a time wins:

- per-inference listing (the 2.8 viewer: "Printing All Data Received From Back
  End", ``Execute Stats:`` then one ``Execute Stat <k>`` block per inference with
  backend lines ``QNN (execute) time : 3051  us``): every inference's time, so
  median and p90 are exact;
- a CSV event stream (header ``Msg Timestamp,Message,Time,Unit of Measurement,
  Timing Source,Event Level,Event Identifier``): one root ``EXECUTE`` row (else one
  ``QNN (execute) time`` row) per inference — exact too;
- summary only (current viewers: ``Execute Stats (Average):`` / ``(Min):`` /
  ``(Max):`` sections, each ``Total Inference Time:`` then ``Graph <i> (<name>):``
  and ``NetRun:  2952 us``): the average stands for the median and the maximum for
  the p90, and the result says so (``statistic``, ``source``); with several graphs
  a section's time is the sum over its graphs;
- only ``Execute Stats (Overall):`` with ``NetRun IPS (...): 214.8888 inf/sec``:
  1000 / IPS ms, IO included, for both.

Times in us, ms, ns or s (any case; ``usec``/``µs`` too); cycles and counts are
never taken as times. Anything else reads as "no profile" (None), never an
exception.
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
MAX_CSV_ROWS = 2_000_000
_PER_MS = {"us": 1e3, "usec": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1.0, "msec": 1.0,
           "ns": 1e6, "s": 1e-3, "sec": 1e-3}
_NUM = r"([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_UNIT = r"(usec|us|µs|μs|msec|ms|ns|sec|s)(?![^\W\d_])"
_I = re.IGNORECASE
_STAT_BLOCK = re.compile(r"^\s*Execute Stat\s+\d+\s*:?\s*$", _I)
_BLOCK_QNN = re.compile(r"^\s*(?:Backend \()?QNN \(execute\) time\)?\s*:\s*" + _NUM + r"\s*"
                        + _UNIT, _I)
_NETRUN = re.compile(r"^\s*NetRun\s*:\s*" + _NUM + r"\s*" + _UNIT, _I)
_SUMMARY = re.compile(r"^\s*Execute Stats \((Average|Min|Max|Overall)\)\s*:", _I)
_GRAPH = re.compile(r"^[\s-]*Graph\s+(\d+)\b.*:\s*$", _I)
_SECTION = re.compile(r"^\S.*\bStats?\b.*:\s*$", _I)
_IPS = re.compile(r"^\s*NetRun IPS\b[^:]*:\s*" + _NUM + r"\s*inf/s", _I)
_CSV_COLUMNS = ("Message", "Time", "Unit of Measurement", "Event Level", "Event Identifier")

# what the numbers are (``Latency.source``)
PER_INFERENCE_TEXT = "per_inference_text"
PER_INFERENCE_CSV = "per_inference_csv"
SUMMARY = "summary_average_max"
OVERALL_IPS = "overall_ips"
WALL_CLOCK = "wall_clock"
EXACT = (PER_INFERENCE_TEXT, PER_INFERENCE_CSV)


@dataclass(frozen=True)
class Latency:
    """Latency of ``runs`` inferences: ``method`` "profile" | "timed"; ``source`` what
    the numbers were read from (one of the constants above)."""

    median_ms: float
    p90_ms: float
    runs: int
    method: str
    statistic: str             # what median/p90 are, in words
    perf_profile: str = ""
    source: str = ""

    @property
    def exact(self) -> bool:
        """Median and p90 of every inference's own time (not stand-ins for them)."""
        return self.source in EXACT

    def properties(self) -> dict[str, Any]:
        """The ``latency.*`` JUnit properties."""
        return {"latency.median_ms": round(self.median_ms, 4),
                "latency.p90_ms": round(self.p90_ms, 4), "latency.runs": self.runs,
                "latency.perf_profile": self.perf_profile, "latency.method": self.method,
                "latency.statistic": self.statistic, "latency.source": self.source}

    def describe(self) -> str:
        return (f"latency median {self.median_ms:.3f} ms, p90 {self.p90_ms:.3f} ms over "
                f"{self.runs} inference(s) ({self.method}, perf profile "
                f"{self.perf_profile or 'default'})")


def _ms(value: str, unit: str) -> float | None:
    try:
        v = float(value) / _PER_MS[unit.lower()]
    except (ValueError, KeyError, OverflowError, ZeroDivisionError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


def median_p90(values: Sequence[float]) -> tuple[float, float]:
    """(median, p90 by nearest rank) of a non-empty list."""
    ordered = sorted(values)
    p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
    median = float(statistics.median(ordered))
    if not math.isfinite(median):          # two huge values can overflow their mean
        median = float(ordered[(len(ordered) - 1) // 2])
    return median, float(max(p90, median))


def _per_inference_blocks(lines: list[str]) -> list[float]:
    """Each ``Execute Stat <k>`` block's ``QNN (execute) time`` (else its ``NetRun``)."""
    values: list[float] = []
    block: dict[str, float] | None = None

    def close() -> None:
        if block:
            values.append(block.get("qnn", block.get("netrun", 0.0)))

    for line in lines:
        if _STAT_BLOCK.match(line):
            close()
            block = {}
            if len(values) >= MAX_SAMPLES:
                return values
            continue
        if block is None:
            continue
        for key, rx in (("qnn", _BLOCK_QNN), ("netrun", _NETRUN)):
            m = rx.match(line)
            if m and key not in block:
                v = _ms(m.group(1), m.group(2))
                if v is not None:
                    block[key] = v
        if _SUMMARY.match(line):            # a summary after the blocks ends them
            close()
            block = None
    close()
    return values


def _csv_events(text: str) -> list[float]:
    """Per-inference times from a CSV event stream: the root ``EXECUTE`` rows, else
    the ``QNN (execute) time`` rows; times in a time unit only."""
    start = text.find("Msg Timestamp")
    if start < 0 or "Event Identifier" not in text[start:start + 400]:
        return []
    execute: list[float] = []
    qnn: list[float] = []
    try:
        rows = csv.reader(io.StringIO(text[start:]))
        header = [h.strip() for h in next(rows)]
        col = {name: header.index(name) for name in _CSV_COLUMNS if name in header}
        if len(col) < len(_CSV_COLUMNS):
            return []
        last = max(col.values())
        for n, row in enumerate(rows):
            if n > MAX_CSV_ROWS or len(execute) >= MAX_SAMPLES or len(qnn) >= MAX_SAMPLES:
                break
            if len(row) <= last:
                continue
            v = _ms(row[col["Time"]].strip(), row[col["Unit of Measurement"]].strip())
            if v is None:
                continue
            if (row[col["Message"]].strip().upper() == "EXECUTE"
                    and row[col["Event Level"]].strip().upper() == "ROOT"):
                execute.append(v)
            elif row[col["Event Identifier"]].strip().lower() == "qnn (execute) time":
                qnn.append(v)
    except (csv.Error, StopIteration, ValueError):
        pass
    return execute or qnn


def _summary(lines: list[str]) -> tuple[dict[str, float], float | None]:
    """({"Average"|"Min"|"Max": the section's NetRun time, summed over its graphs},
    the ``NetRun IPS`` of the Overall section)."""
    per_graph: dict[str, dict[str | None, float]] = {}
    ips: float | None = None
    current: str | None = None
    graph: str | None = None
    for line in lines:
        m = _SUMMARY.match(line)
        if m:
            current, graph = m.group(1).capitalize(), None
            continue
        if current is None:
            continue
        gm = _GRAPH.match(line)
        if gm:
            graph = gm.group(1)
            continue
        if _SECTION.match(line) and not line.lstrip("- ").startswith("Total Inference Time"):
            current = None
            continue
        im = _IPS.match(line)
        if im and current == "Overall" and ips is None:
            try:
                value = float(im.group(1))
            except (ValueError, OverflowError):
                continue
            ips = value if math.isfinite(value) and value > 0 else None
            continue
        nm = _NETRUN.match(line)
        if nm and current != "Overall":
            v = _ms(nm.group(1), nm.group(2))
            if v is not None:
                per_graph.setdefault(current, {}).setdefault(graph, v)
    found: dict[str, float] = {}
    for section, graphs in per_graph.items():
        named = [v for g, v in graphs.items() if g is not None]
        total = math.fsum(named) if named else graphs[None]
        if math.isfinite(total):
            found[section] = total
    return found, ips


def _exact(values: list[float], source: str, what: str, perf_profile: str) -> Latency:
    median, p90 = median_p90(values)
    return Latency(median, p90, len(values), "profile",
                   f"median and p90 of {len(values)} profiled inference(s) ({what})",
                   perf_profile, source)


def parse_viewer_output(text: str, *, runs: int, perf_profile: str = "") -> Latency | None:
    """The latency in ``qnn-profile-viewer`` text or CSV, or None when it holds none."""
    text = text[:MAX_TEXT].lstrip("\ufeff")
    lines = text.splitlines()
    values = _per_inference_blocks(lines)
    if values:
        return _exact(values, PER_INFERENCE_TEXT, "viewer text", perf_profile)
    values = _csv_events(text)
    if values:
        return _exact(values, PER_INFERENCE_CSV, "viewer CSV events", perf_profile)
    summary, ips = _summary(lines)
    if "Average" in summary:
        avg = summary["Average"]
        top = max(summary.get("Max", avg), avg)
        return Latency(avg, top, runs, "profile",
                       "average and max of the profile (the viewer printed no "
                       "per-inference times)", perf_profile, SUMMARY)
    if ips is not None:
        mean = 1e3 / ips
        if math.isfinite(mean):
            return Latency(mean, mean, runs, "profile",
                           "1000 / NetRun IPS (IO included; the viewer printed no "
                           "per-inference or average time)", perf_profile, OVERALL_IPS)
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
                       perf_profile, WALL_CLOCK) if math.isfinite(ms) else None
    mean_ms = max(0.0, total_s - single_s) / (runs - 1) * 1e3
    if not math.isfinite(mean_ms):
        return None
    return Latency(mean_ms, mean_ms, runs, "timed",
                   f"mean of {runs} inferences by wall-clock (a {runs}-inference run minus "
                   "a 1-inference run)", perf_profile, WALL_CLOCK)


_INIT = re.compile(r"^\s*Init Stats\s*:", _I)


def init_ms(viewer_text: str) -> float | None:
    """The ``Init Stats`` section's NetRun time in ms (loading the model or context
    binary and setting the backend up): the load time an application pays once;
    None when the viewer printed no such section."""
    inside = False
    for line in viewer_text.splitlines():
        if _INIT.match(line):
            inside = True
            continue
        if inside:
            m = _NETRUN.match(line)
            if m:
                return _ms(m.group(1), m.group(2))
            if _SECTION.match(line):
                return None
    return None
