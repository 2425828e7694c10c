"""The HTML report fed anything: any bytes as a JUnit report or a work folder's
result.json give a page or one ``UserError`` line; any text in a run's names,
messages, properties and comparison data is escaped (no tag, no attribute, no
reference to outside the page gets through)."""

from __future__ import annotations

import html.parser
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.errors import UserError
from qnn_ci.report.html import render
from qnn_ci.report.junit import JUnitWriter
from qnn_ci.report.junit import testcase as junit_case
from qnn_ci.report.report_data import ReportInput, StageEntry, read_junit, read_workdir

TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)
MARKUP = st.sampled_from(['<script>alert(1)</script>', '"><img src=http://x onerror=a()>',
                          "</td></table>", "&amp;", "'", "javascript:x", "\x00", "\ud800"])
NAME = st.one_of(TEXT, MARKUP, st.lists(st.one_of(TEXT, MARKUP), max_size=3).map("".join))
SCALAR: st.SearchStrategy[Any] = (st.none() | st.booleans() | st.integers() | st.floats()
                                  | NAME)
JSONISH: st.SearchStrategy[Any] = st.recursive(
    SCALAR, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(NAME, kids, max_size=4),
    max_leaves=20)
METRIC_KEYS = st.builds(lambda c, o, m, b: f"{c}.{o}.{m}{b}",
                        st.sampled_from(["sim_vs_fp32", "htp_vs_cpu", "x_vs_y", "nope"]),
                        NAME, st.sampled_from(["cosine", "snr", "max_abs", "psnr", "other"]),
                        st.sampled_from(["", ".min", ".max"]))
COMPARISON = st.fixed_dictionaries({"outputs": st.lists(st.fixed_dictionaries({
    "name": SCALAR, "samples": st.lists(st.fixed_dictionaries({
        "sample": SCALAR, "metrics": st.one_of(JSONISH, st.fixed_dictionaries({
            "cosine": SCALAR, "max_abs": SCALAR,
            "histogram": st.lists(st.lists(SCALAR, min_size=3, max_size=3) | JSONISH,
                                  max_size=5)}))}), max_size=3)}), max_size=3)})
ENTRIES = st.lists(st.builds(
    StageEntry, export=NAME, stage=NAME, status=st.sampled_from(
        ["passed", "failed", "skipped", "error"]), summary=NAME, findings=st.lists(NAME,
                                                                                   max_size=3),
    properties=st.dictionaries(METRIC_KEYS | NAME, NAME | SCALAR.map(str), max_size=6),
    data=st.one_of(st.just({}), COMPARISON.map(lambda c: {"comparison": c}),
                   st.dictionaries(NAME, JSONISH, max_size=2)),
    manifest=NAME, line=st.integers(0, 10**6)), max_size=4)


class _Check(html.parser.HTMLParser):
    """Every tag and attribute is one the page itself writes."""

    TAGS = frozenset({"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p",
                      "span", "div", "a", "section", "table", "tr", "th", "td", "figure",
                      "figcaption", "map", "area", "img", "ul", "li", "b"})

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        assert tag in self.TAGS, tag
        for key, value in attrs:
            assert not key.startswith("on"), key
            if key in ("src", "href", "usemap"):
                assert (value or "").startswith(("#", "data:image/png;base64,")), value


def _checked(page: str) -> None:
    _Check().feed(page)


@given(entries=ENTRIES, notes=st.lists(NAME, max_size=3), title=NAME)
def test_any_run_text_is_escaped(entries: list[StageEntry], notes: list[str],
                                 title: str) -> None:
    _checked(render(ReportInput(entries, notes), title=title))


@given(raw=st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_any_junit_bytes_give_a_page_or_one_line(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.xml"
        path.write_bytes(b'<?xml version="1.0"?><testsuites>' + raw
                         if raw[:1] == b"<" else raw)
        try:
            inp = read_junit(path)
        except UserError as exc:
            assert "\n" not in exc.oneline()
            return
        _checked(render(inp))


RESULTS = st.builds(
    StageResult, stage=NAME, status=st.sampled_from(list(Status)), summary=NAME,
    findings=st.lists(st.builds(Finding, NAME, NAME, st.sampled_from(list(Severity)), NAME),
                      max_size=3),
    properties=st.dictionaries(METRIC_KEYS | NAME, SCALAR, max_size=5),
    artefacts=st.dictionaries(NAME, NAME, max_size=2))


@given(cases=st.lists(st.tuples(NAME, RESULTS), max_size=4))
def test_junit_qnn_ci_wrote_reads_back_escaped(cases: list[tuple[str, StageResult]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        writer = JUnitWriter(Path(tmp) / "j.xml")
        for export, result in cases:
            writer.add(junit_case(Path(tmp) / "qnn-ci.yaml", export, 3, result))
        writer.flush()
        inp = read_junit(Path(tmp) / "j.xml")
        _checked(render(inp))


@given(raw=st.binary(max_size=300) | JSONISH.map(lambda v: json.dumps(v).encode())
       | st.fixed_dictionaries({"result": st.fixed_dictionaries(
           {"status": SCALAR, "properties": JSONISH, "data": JSONISH, "findings": JSONISH}),
           "roots": JSONISH}).map(lambda v: json.dumps(v).encode()))
def test_any_result_json_gives_a_page_or_a_note(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "e" / "sim_numerics"
        stage.mkdir(parents=True)
        (stage / "result.json").write_bytes(raw)
        inp = read_workdir(Path(tmp))
        assert len(inp.entries) + len(inp.notes) == 1
        _checked(render(inp))


VALUES = st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e300, 1e300)


@given(series=st.dictionaries(NAME, st.lists(st.tuples(NAME, NAME, VALUES), max_size=12),
                              max_size=3))
def test_any_trend_values_give_one_chart_each_inside_its_picture(
        series: dict[str, list[tuple[str, str, float]]]) -> None:
    from qnn_ci.report.plots import TREND_H, TREND_W, trend_geometry
    from qnn_ci.report.trend_data import Point, Trends

    trends = Trends(series={"e": {label: [Point(d, c, v) for d, c, v in points]
                                  for label, points in series.items()}})
    page = render(ReportInput(), trends=trends)
    _checked(page)
    assert page.count('<img class="plot"') == len(series)
    for points in series.values():
        for x, y in trend_geometry([v for _, _, v in points])[2]:
            assert 0 <= x <= TREND_W and 0 <= y <= TREND_H
