"""The HTML report's charts as PNG images drawn by matplotlib (Agg backend only, no
pyplot state): a metric's trend (a line and a dot per night) and the |error|
histogram of the worst output (bars).

A chart job holds its geometry in pixels (``qnn_ci.report.plots`` computes it, so
the page's image map and labels match the picture exactly); the text (titles,
values, dates) is HTML around the image, searchable and sharp. A page of 100
exports has ~900 charts, which fresh figures would draw at ~30 ms each: here one
figure per chart kind and size, ``SLOTS`` charts high, is made once (the frames
drawn once and restored), the data of ``SLOTS`` charts is drawn in one go, and the
PNGs are cut from the canvas' pixels and written here (a palette of at most 256
colours): ~1 ms a chart. Above ``POOL_MIN`` charts they are drawn in a
``ProcessPoolExecutor`` (spawn) with ``os.cpu_count()`` workers. matplotlib and
numpy are imported only when a chart is drawn.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

POOL_MIN = 4000        # charts below this are drawn in this process (~1 ms each; a
                       # spawned worker costs ~1 s to start and import matplotlib)
LINE = "#2f6f4f"
BAR = "#4a7ab5"
FRAME = "#dddddd"
FACE = "#fcfcfc"


@dataclass(frozen=True)
class TrendJob:
    """A polyline with a dot per point, in pixels (origin top left)."""

    width: int
    height: int
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class HistogramJob:
    """Bars ``(x0, y_top, x1)`` down to the baseline at ``height - 1``, in pixels."""

    width: int
    height: int
    bars: tuple[tuple[float, float, float], ...]


Job = TrendJob | HistogramJob


# -- PNG from the canvas' pixels ------------------------------------------------------

def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + \
        struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def _png(width: int, height: int, colour_type: int, rows: bytes, palette: bytes = b"") -> bytes:
    head = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))
    return (b"\x89PNG\r\n\x1a\n" + head + (_chunk(b"PLTE", palette) if palette else b"")
            + _chunk(b"IDAT", zlib.compress(rows, 3)) + _chunk(b"IEND", b""))


def png_slices(rgba: Any, height: int, count: int) -> list[bytes]:
    """PNGs of the first ``count`` horizontal slices ``height`` pixels high of an
    ``(h, w, 4)`` uint8 array (alpha dropped; the charts are opaque). Palette images
    (one palette for all) when the colours, at 5 bits per channel, are at most 256
    (an antialiased chart has a few dozen), else true colour."""
    import numpy as np

    rgba = np.ascontiguousarray(rgba[:height * count])
    h, w = rgba.shape[:2]
    word = rgba.view("<u4").reshape(-1) >> 3             # R, G, B, A bytes, low first
    key = (word & 0x1F) | ((word >> 3) & 0x3E0) | ((word >> 6) & 0x7C00)
    counts = np.bincount(key, minlength=1 << 15)
    used = np.flatnonzero(counts)
    if len(used) <= 256:
        lut = np.zeros(len(counts), np.uint8)
        lut[used] = np.arange(len(used), dtype=np.uint8)
        five = np.stack([used & 31, (used >> 5) & 31, used >> 10], axis=1)
        palette = ((five << 3) | (five >> 2)).astype(np.uint8).tobytes()
        rows = np.zeros((h, w + 1), np.uint8)             # a 0 (no filter) byte per row
        rows[:, 1:] = lut[key].reshape(h, w)
        return [_png(w, height, 3, rows[i * height:(i + 1) * height].tobytes(), palette)
                for i in range(count)]
    rows = np.zeros((h, w * 3 + 1), np.uint8)
    rows[:, 1:] = rgba[:, :, :3].reshape(h, w * 3)
    return [_png(w, height, 2, rows[i * height:(i + 1) * height].tobytes())
            for i in range(count)]


def png_bytes(rgba: Any) -> bytes:
    """A PNG of an ``(h, w, 4)`` uint8 array (``png_slices`` of one slice)."""
    return png_slices(rgba, rgba.shape[0], 1)[0]


# -- drawing --------------------------------------------------------------------------

SLOTS = 16             # charts of one kind drawn at once, stacked in one figure


class _Canvas:
    """One reused figure per chart kind and size, ``SLOTS`` charts high: the frames
    drawn once and restored, then the data artists (animated, so a full draw leaves
    them out) of up to ``SLOTS`` charts drawn over them in one go, and the figure cut
    into one PNG per chart."""

    def __init__(self, kind: str, width: int, height: int) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection, PolyCollection
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle

        dpi = 100
        total = height * SLOTS
        self.fig = Figure(figsize=(width / dpi, total / dpi), dpi=dpi, facecolor=FACE)
        self.canvas = FigureCanvasAgg(self.fig)
        ax = self.fig.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        ax.set_xlim(0, width)
        ax.set_ylim(total, 0)              # pixels, origin top left, as the page's map
        self.ax, self.kind, self.height = ax, kind, height
        for slot in range(SLOTS):
            top = slot * height
            ax.add_patch(Rectangle((0.5, top + 0.5), width - 1, height - 1, facecolor="none",
                                   edgecolor=FRAME, linewidth=72 / dpi, snap=False))
            if kind == "histogram":
                ax.add_line(Line2D([0, width], [top + height - 1.5] * 2, color="#888888",
                                   linewidth=72 / dpi))
        if kind == "trend":
            self.lines = LineCollection([], colors=LINE, linewidths=1.3, animated=True)
            self.dots = Line2D([], [], color=LINE, linestyle="", marker="o", markersize=3,
                               animated=True)
            self.artists: list[Any] = [ax.add_collection(self.lines), ax.add_line(self.dots)]
        else:
            self.bars = PolyCollection([], facecolors=BAR, edgecolors="none", animated=True)
            self.artists = [ax.add_collection(self.bars)]
        self.canvas.draw()
        self.background = self.canvas.copy_from_bbox(self.fig.bbox)

    def paint(self, jobs: Sequence[Job]) -> list[bytes]:
        """The PNGs of up to ``SLOTS`` jobs of this canvas' kind and size."""
        import numpy as np

        self.canvas.restore_region(self.background)
        if self.kind == "trend":
            lines = [[(x, y + i * self.height) for x, y in job.points]
                     for i, job in enumerate(jobs) if isinstance(job, TrendJob)]
            self.lines.set_segments([line for line in lines if len(line) > 1])
            flat = [p for line in lines for p in line]
            self.dots.set_data([x for x, _ in flat], [y for _, y in flat])
        else:
            verts = []
            for i, job in enumerate(jobs):
                base = (i + 1) * self.height - 1.5
                verts += [[(x0, base), (x0, top + i * self.height), (x1, top + i * self.height),
                           (x1, base)] for x0, top, x1 in getattr(job, "bars", ())]
            self.bars.set_verts(verts)
        for artist in self.artists:
            self.ax.draw_artist(artist)
        return png_slices(np.asarray(self.canvas.buffer_rgba()), self.height, len(jobs))


_CANVASES: dict[tuple[str, int, int], _Canvas] = {}


def _kind(job: Job) -> tuple[str, int, int]:
    return ("trend" if isinstance(job, TrendJob) else "histogram", job.width, job.height)


def draw(job: Job) -> bytes:
    """One chart as PNG bytes (imports matplotlib the first time)."""
    return _draw_chunk([job])[0]


def _draw_chunk(jobs: Sequence[Job]) -> list[bytes]:
    """The PNGs of ``jobs``, in order: each kind and size drawn ``SLOTS`` at a time."""
    groups: dict[tuple[str, int, int], list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(_kind(job), []).append(i)
    out: list[bytes] = [b""] * len(jobs)
    for key, indices in groups.items():
        canvas = _CANVASES.get(key)
        if canvas is None:   # FigureCanvasAgg directly: no pyplot, no backend switching
            canvas = _CANVASES[key] = _Canvas(*key)
        for start in range(0, len(indices), SLOTS):
            part = indices[start:start + SLOTS]
            for i, png in zip(part, canvas.paint([jobs[i] for i in part]), strict=True):
                out[i] = png
    return out


def available() -> str:
    """"" when matplotlib can be imported, else why not (one line)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return (f"charts not drawn: matplotlib is not installed ({exc.name or exc}); "
                "pip install 'qnn-ci[report]'")
    return ""


def draw_all(jobs: Sequence[Job], *, workers: int | None = None,
             pool_min: int = POOL_MIN) -> list[bytes]:
    """Every job's PNG, in order: in this process below ``pool_min`` charts, else
    spread over ``workers`` (default ``os.cpu_count()``) spawned processes; a pool
    that cannot start or breaks is logged and the charts are drawn here."""
    if not jobs:
        return []
    n = workers or os.cpu_count() or 1
    if n > 1 and len(jobs) >= pool_min:
        try:
            return _in_pool(jobs, n)
        except (OSError, RuntimeError, ImportError) as exc:   # BrokenProcessPool: RuntimeError
            log.warning("charts drawn in one process: the worker pool failed (%s: %s)",
                        type(exc).__name__, exc)
    return _draw_chunk(jobs)


def _in_pool(jobs: Sequence[Job], n: int) -> list[bytes]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = max(SLOTS * 4, -(-len(jobs) // (n * 3)))
    chunks = [list(jobs[i:i + size]) for i in range(0, len(jobs), size)]
    with ProcessPoolExecutor(max_workers=n,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        return [png for chunk in pool.map(_draw_chunk, chunks) for png in chunk]
