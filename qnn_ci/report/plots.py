"""The HTML report's charts as inline SVG: the error histogram of an output and a
metric's trend over the nights.

Inline SVG rather than matplotlib PNGs: a page of 100 exports has hundreds of
small charts, which matplotlib draws at ~30 ms each (the report must be written in
a few seconds), and SVG text stays sharp, searchable and part of the one file.
Every text is escaped; nothing refers to anything outside the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from qnn_ci.report.trend_data import Point

_BAR = "#4a7ab5"
_LINE = "#2f6f4f"
_AXIS = "#888"


def num(value: float) -> str:
    """A number in at most 5 significant digits."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.5g}"


def _bucket_label(low: float, high: float) -> str:
    if low == 0 and high == 0:
        return "0"
    if low == 0:
        return f"<{high:.0e}"
    return f"{low:.0e}"


def histogram_svg(buckets: Sequence[tuple[float, float, int]], *, title: str) -> str:
    """Bars of |error| counts per decade (``(low, high, count)``, low to high)."""
    width, height, top, bottom, left = 420, 170, 22, 34, 8
    n = max(1, len(buckets))
    step = (width - 2 * left) / n
    peak = max((c for _, _, c in buckets), default=0) or 1
    usable = height - top - bottom
    parts = [f'<svg class="chart" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f"<title>{escape(title)}</title>",
             f'<text x="{left}" y="14" class="ct">{escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - left}" '
             f'y2="{height - bottom}" stroke="{_AXIS}"/>']
    for i, (low, high, count) in enumerate(buckets):
        h = usable * count / peak
        x = left + i * step
        y = height - bottom - h
        label = _bucket_label(low, high)
        range_text = "exactly 0" if low == high == 0 else f"{num(low)} ≤ |err| < {num(high)}"
        parts.append(f'<rect x="{x + 2:.1f}" y="{y:.1f}" width="{max(1.0, step - 4):.1f}" '
                     f'height="{h:.1f}" fill="{_BAR}"><title>{escape(range_text)}: '
                     f"{count}</title></rect>")
        parts.append(f'<text x="{x + step / 2:.1f}" y="{y - 3:.1f}" class="cv" '
                     f'text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + step / 2:.1f}" y="{height - bottom + 14}" class="cl" '
                     f'text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<text x="{width / 2:.0f}" y="{height - 4}" class="cl" '
                 f'text-anchor="middle">|error| by decade</text></svg>')
    return "".join(parts)


def trend_svg(points: Sequence[Point], *, title: str) -> str:
    """A metric over the nights, oldest left: a line, a dot per night (hover: date,
    commit, value), the range on the left and the last value on the right."""
    width, height, top, bottom, left, right = 350, 120, 20, 20, 60, 62
    values = [p.value for p in points]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - (abs(lo) or 1) * 0.01, hi + (abs(hi) or 1) * 0.01
    n = len(points)
    plot_w, plot_h = width - left - right, height - top - bottom

    def xy(i: int, v: float) -> tuple[float, float]:
        x = left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)
        return x, top + plot_h * (hi - v) / (hi - lo)

    coords = [xy(i, p.value) for i, p in enumerate(points)]
    parts = [f'<svg class="chart" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img">',
             f"<title>{escape(title)}</title>",
             f'<text x="4" y="13" class="ct">{escape(title)}</text>',
             f'<text x="{left - 4}" y="{top + 8}" class="cl" text-anchor="end">'
             f"{escape(num(hi))}</text>",
             f'<text x="{left - 4}" y="{top + plot_h}" class="cl" text-anchor="end">'
             f"{escape(num(lo))}</text>",
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
             f'stroke="#ddd"/>']
    if coords:
        parts.append(f'<polyline fill="none" stroke="{_LINE}" stroke-width="1.5" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>')
        for (x, y), p in zip(coords, points, strict=True):
            tip = f"{p.date} {p.commit[:10]}: {num(p.value)}".strip()
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="{_LINE}">'
                         f"<title>{escape(tip)}</title></circle>")
        x, y = coords[-1]
        parts.append(f'<text x="{x + 5:.1f}" y="{y + 4:.1f}" class="cv">'
                     f"{escape(num(points[-1].value))}</text>")
        parts.append(f'<text x="{left}" y="{height - 5}" class="cl">'
                     f"{escape(points[0].date[:10])}</text>")
        parts.append(f'<text x="{left + plot_w}" y="{height - 5}" class="cl" '
                     f'text-anchor="end">{escape(points[-1].date[:10])}</text>')
    parts.append("</svg>")
    return "".join(parts)
