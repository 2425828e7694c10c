"""The HTML report's charts: a metric's trend over the nights and the error histogram
of an output, each a matplotlib PNG inlined as a ``data:image/png`` URI
(``qnn_ci.report.charts`` draws them) inside HTML that carries every text: the
title as caption and ``alt``, the range, the last value and the dates beside the
trend, the counts and decades above and below the bars, and an image map whose
areas give each dot's date, commit and value (each bar's range and count) on hover.

The page is written first with a placeholder per chart (``ChartBatch.add``); the
charts are then drawn together (in a process pool when there are many) and put in
(``ChartBatch.fill``). Every text is escaped; nothing refers to outside the page.
"""

from __future__ import annotations

import base64
import math
import re
import secrets
from collections.abc import Sequence
from html import escape

from qnn_ci.report.charts import HistogramJob, Job, TrendJob, available, draw_all
from qnn_ci.report.trend_data import Point

TREND_W, TREND_H, TREND_PAD = 300, 72, 5
HIST_W, HIST_H, HIST_TOP = 420, 110, 4


SHOWN_DIGITS = 5      # fewer than a JUnit property keeps (6: report/property_text.py)


def num(value: float) -> str:
    """A number in at most ``SHOWN_DIGITS`` (5) significant digits."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{SHOWN_DIGITS}g}"


def same_shown(a: float, b: float) -> bool:
    """Whether ``a`` and ``b`` are the same number at the precision the page shows
    (``num``): a value read back from JUnit (6 significant digits) and its baseline
    at full precision are unchanged when they round alike (37.7487 and 37.748731)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b
    return float(num(a)) == float(num(b))


class ChartBatch:
    """The charts of one page: a placeholder each while the page is written, then
    drawn together and put in."""

    def __init__(self) -> None:
        self.token = "chart-" + secrets.token_hex(8)
        self.jobs: list[Job] = []
        self.alts: list[str] = []
        self.maps: list[str] = []

    def add(self, job: Job, alt: str, areas: str) -> str:
        """The placeholder of the ``<img>`` of ``job`` (``alt`` and ``areas``
        already escaped)."""
        self.jobs.append(job)
        self.alts.append(alt)
        self.maps.append(areas)
        return f"<{self.token}-{len(self.jobs) - 1}>"

    def fill(self, text: str, notes: list[str]) -> str:
        """``text`` with every placeholder replaced by its image; charts that cannot be
        drawn (no matplotlib) are left out with one note."""
        if not self.jobs:
            return text
        why = available()
        if why:
            notes.append(why)
            pngs: list[bytes] = []
        else:
            pngs = draw_all(self.jobs)

        def image(match: re.Match[str]) -> str:
            i = int(match.group(1))
            if i >= len(pngs):
                return ""
            job, name = self.jobs[i], f"{self.token}-{i}"
            uri = "data:image/png;base64," + base64.b64encode(pngs[i]).decode("ascii")
            img = (f'<img class="plot" width="{job.width}" height="{job.height}" '
                   f'alt="{self.alts[i]}" src="{uri}"')
            if not self.maps[i]:
                return img + ">"
            return f'{img} usemap="#{name}"><map name="{name}">{self.maps[i]}</map>'


        return re.sub(f"<{self.token}-(\\d+)>", image, text)


# -- the error histogram ----------------------------------------------------------------

def _bucket_label(low: float, high: float) -> str:
    if low == 0 and high == 0:
        return "0"
    if low == 0:
        return f"<{high:.0e}"
    return f"{low:.0e}"


def histogram_html(buckets: Sequence[tuple[float, float, int]], *, title: str,
                   batch: ChartBatch) -> str:
    """Bars of |error| counts per decade (``(low, high, count)``, low to high), the
    counts above and the decades below, in cells as wide as the bars."""
    n = max(1, len(buckets))
    step = HIST_W / n
    peak = max((c for _, _, c in buckets), default=0) or 1
    usable = HIST_H - HIST_TOP - 2
    bars, areas, counts, labels = [], [], [], []
    for i, (low, high, count) in enumerate(buckets):
        top = HIST_H - 1.5 - usable * count / peak
        x0, x1 = i * step + 3, (i + 1) * step - 3
        bars.append((x0, top, max(x0 + 1, x1)))
        range_text = "exactly 0" if low == high == 0 else f"{num(low)} ≤ |err| < {num(high)}"
        areas.append(f'<area shape="rect" coords="{x0:.0f},{min(top, HIST_H - 6):.0f},'
                     f'{x1:.0f},{HIST_H}" title="{escape(f"{range_text}: {count}")}">')
        counts.append(f"<span>{count}</span>")
        labels.append(f"<span>{escape(_bucket_label(low, high))}</span>")
    img = batch.add(HistogramJob(HIST_W, HIST_H, tuple(bars)), escape(title), "".join(areas))
    return (f'<figure class="chart hist" style="width:{HIST_W}px">'
            f"<figcaption>{escape(title)}</figcaption>"
            f'<div class="cells">{"".join(counts)}</div>{img}'
            f'<div class="cells cl">{"".join(labels)}</div>'
            '<div class="cl mid">|error| by decade</div></figure>')


# -- a trend -----------------------------------------------------------------------------

def trend_geometry(values: Sequence[float]) -> tuple[float, float,
                                                     tuple[tuple[float, float], ...]]:
    """(low, high, the points in pixels) of a trend chart of ``values``, oldest left."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo or not math.isfinite(hi - lo):
        lo, hi = lo - (abs(lo) or 1) * 0.01, hi + (abs(hi) or 1) * 0.01
    n = len(values)
    plot_w, plot_h = TREND_W - 2 * TREND_PAD, TREND_H - 2 * TREND_PAD
    span = hi - lo if math.isfinite(hi - lo) and hi > lo else 1.0

    def xy(i: int, v: float) -> tuple[float, float]:
        x = TREND_PAD + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)
        frac = (hi - v) / span if math.isfinite(v) else 0.5
        return round(x, 2), round(TREND_PAD + plot_h * min(1.0, max(0.0, frac)), 2)

    return lo, hi, tuple(xy(i, v) for i, v in enumerate(values))


def trend_html(points: Sequence[Point], *, title: str, batch: ChartBatch) -> str:
    """A metric over the nights: the line and a dot per night (hover: date, commit,
    value), the range on the left, the last value on the right, the first and last
    dates below."""
    lo, hi, coords = trend_geometry([p.value for p in points])
    areas = "".join(
        f'<area shape="circle" coords="{x:.0f},{y:.0f},5" title="'
        f'{escape(f"{p.date} {p.commit[:10]}: {num(p.value)}".strip())}">'
        for (x, y), p in zip(coords, points, strict=True))
    img = batch.add(TrendJob(TREND_W, TREND_H, coords), escape(title), areas)
    last = escape(num(points[-1].value)) if points else ""
    dates = (f'<div class="xa cl"><span>{escape(points[0].date[:10])}</span>'
             f"<span>{escape(points[-1].date[:10])}</span></div>" if points else "")
    return (f'<figure class="chart trend"><figcaption>{escape(title)}</figcaption>'
            f'<div class="tw"><div class="ya cl"><span>{escape(num(hi))}</span>'
            f"<span>{escape(num(lo))}</span></div>{img}"
            f'<span class="cv">{last}</span></div>{dates}</figure>')
