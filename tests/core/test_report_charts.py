"""The HTML report's charts (qnn_ci/report/charts.py, plots.py): matplotlib PNGs whose
pixels are what the canvas drew, the same whether drawn here or in the worker pool,
dots where the page's image map says they are, and matplotlib imported only when a
chart is drawn."""

from __future__ import annotations

import io
import random
import subprocess
import sys

import pytest

from qnn_ci.report.html import render
from qnn_ci.report.plots import TREND_H, TREND_W, trend_geometry
from qnn_ci.report.report_data import ReportInput
from qnn_ci.report.trend_data import Point, Trends

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("matplotlib")
np = pytest.importorskip("numpy")

from qnn_ci.report.charts import (  # noqa: E402
    LINE,
    HistogramJob,
    TrendJob,
    draw,
    draw_all,
    png_bytes,
)


def _pixels(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as im:
        im.load()
        return np.asarray(im.convert("RGB"))


def test_png_reads_back_as_the_pixels_given() -> None:
    rng = np.random.default_rng(14)
    few = np.zeros((20, 30, 4), np.uint8)
    few[..., 3] = 255
    few[5:9, 3:20, :3] = (47, 111, 79)
    few[12:, :, :3] = 250
    got = _pixels(png_bytes(few))
    assert got.shape == (20, 30, 3)
    assert np.abs(got.astype(int) - few[..., :3]).max() <= 7     # a palette at 5 bits
    many = rng.integers(0, 256, (16, 40, 4), dtype=np.uint8)     # > 256 colours
    assert np.array_equal(_pixels(png_bytes(many)), many[..., :3])  # true colour, exact


def _jobs(n: int) -> list[TrendJob | HistogramJob]:
    rng = random.Random(3)
    jobs: list[TrendJob | HistogramJob] = []
    for i in range(n):
        if i % 5 == 0:
            jobs.append(HistogramJob(420, 110, tuple((k * 40 + 3.0, rng.uniform(5, 100),
                                                     k * 40 + 37.0) for k in range(9))))
        else:
            jobs.append(TrendJob(TREND_W, TREND_H, trend_geometry(
                [rng.random() for _ in range(rng.randint(1, 30))])[2]))
    return jobs


def test_many_charts_in_the_pool_are_the_charts_drawn_here() -> None:
    jobs = _jobs(40)          # more than one batch of SLOTS per kind
    here = [_pixels(p) for p in draw_all(jobs)]
    alone = [_pixels(draw(j)) for j in jobs]        # each drawn on its own
    pooled = [_pixels(p) for p in draw_all(jobs, workers=2, pool_min=1)]
    for a, b, c in zip(here, alone, pooled, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    assert {p.shape for p in here} == {(110, 420, 3), (TREND_H, TREND_W, 3)}
    assert len({p.tobytes() for p in here}) == len(jobs)        # every chart its own


def test_dots_are_where_the_image_map_says() -> None:
    values = [0.5, 0.9, 0.1, 0.7, 0.3]
    _lo, _hi, coords = trend_geometry(values)
    pixels = _pixels(draw(TrendJob(TREND_W, TREND_H, coords))).astype(int)
    line = np.array([int(LINE[i:i + 2], 16) for i in (1, 3, 5)])
    for x, y in coords:
        spot = pixels[round(y) - 1:round(y) + 2, round(x) - 1:round(x) + 2]
        assert np.abs(spot - line).sum(axis=2).min() < 40, (x, y)
    # the highest value at the top, the lowest at the bottom, oldest left
    assert coords[1][1] < coords[0][1] < coords[2][1] and coords[0][0] < coords[-1][0]
    assert pixels[TREND_H // 2, 2].tolist() != line.tolist()      # no line at the far left


def test_the_page_has_one_image_per_chart_with_its_text() -> None:
    points = [Point(f"2026-11-{d:02d}T02:00:00Z", f"c{d:039d}", 0.99 + d / 1e4)
              for d in range(1, 8)]
    trends = Trends(series={"e": {"cosine (sim_numerics, QCS6490)": points}})
    text = render(ReportInput(), trends=trends)
    assert text.count('<img class="plot" width="300" height="72" alt="cosine '
                      '(sim_numerics, QCS6490)" src="data:image/png;base64,iVBORw0KGgo') == 1
    assert text.count('<area shape="circle"') == 7
    assert 'title="2026-11-07T02:00:00Z c000000000: 0.9907"' in text
    assert '<span class="cv">0.9907</span>' in text and "<span>2026-11-01</span>" in text


def test_matplotlib_is_imported_only_when_a_chart_is_drawn() -> None:
    code = ("import sys\n"
            "from qnn_ci.report.html import render\n"
            "from qnn_ci.report.report_data import ReportInput\n"
            "render(ReportInput())\n"
            "print('matplotlib' in sys.modules, 'numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]
