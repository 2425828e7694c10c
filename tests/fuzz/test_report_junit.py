"""The reports of `qnn-ci run` fed any text (tool output with control characters,
undecodable names, odd property values): the JUnit file always parses and holds
every testcase, also when interrupted or crashed; the job summary, table and
annotations are always made."""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.report.junit import JUnitWriter, internal_error_case, xml_text
from qnn_ci.report.junit import testcase as junit_case
from qnn_ci.report.junit_xml import Line, result_line
from qnn_ci.report.summary import Row, annotations, markdown_summary, terminal_table

# Any code point, surrogates and control characters included.
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
VALUES: st.SearchStrategy[Any] = (st.none() | st.booleans() | st.integers()
                                  | st.floats() | TEXT | st.lists(TEXT, max_size=3)
                                  | st.dictionaries(TEXT, TEXT, max_size=3))
RESULTS = st.builds(
    StageResult, stage=TEXT, status=st.sampled_from(list(Status)), summary=TEXT,
    findings=st.lists(st.builds(Finding, TEXT, TEXT, st.sampled_from(list(Severity)), TEXT),
                      max_size=3),
    properties=st.dictionaries(TEXT, VALUES, max_size=4),
    artefacts=st.dictionaries(TEXT, TEXT, max_size=2),
    data=st.dictionaries(st.sampled_from(["internal_error", "not_run", "other"]), TEXT,
                         max_size=2),
    duration_s=st.floats(0, 1e6), cached=st.booleans())
ROWS = st.lists(st.tuples(TEXT, TEXT, st.integers(1, 10**6), RESULTS), max_size=4)


@given(rows=ROWS, interrupted=st.none() | TEXT, crash=st.none() | TEXT)
def test_junit_always_parses_with_every_testcase(rows: list[tuple[str, str, int, StageResult]],
                                                 interrupted: str | None,
                                                 crash: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.xml"
        writer = JUnitWriter(path)
        for i, (manifest, export, line, result) in enumerate(rows):
            where = Path(tmp) / (xml_text(manifest) or "m")
            if i % 2:
                writer.add(junit_case(where, export, line, result))
            else:
                writer.add_result(where, export, line, result)
        if crash is not None:
            writer.replace([*(junit_case(Path(tmp) / (xml_text(m) or "m"), e, n, r)
                              for m, e, n, r in rows),
                            internal_error_case(RuntimeError(crash), Path(tmp) / "no.log")])
        writer.write(interrupted=interrupted, internal_error=crash)
        names = [c.get("name") for c in ET.parse(path).getroot().iter("testcase")]
        assert len(names) == len(rows) + (crash is not None)
        for (_m, export, _l, result), name in zip(rows, names, strict=False):
            # (tabs and line breaks in an attribute are written as character references:
            # they read back as they were)
            assert name == xml_text(f"{export}::{result.stage}")
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["j.xml"]


@given(manifest=TEXT, export=TEXT, line=st.integers(0, 10**6), result=RESULTS,
       summary=st.sampled_from(["", "why & <how>"]) | TEXT,
       crash_log=st.none() | st.just("") | st.just("missing.log") | st.just("real.log"))
def test_a_result_is_written_as_its_testcase_is(manifest: str, export: str, line: int,
                                                 result: StageResult, summary: str,
                                                 crash_log: str | None) -> None:
    """``add_result`` writes a stage's result straight to text, without the TestCase:
    the same text, counter kind and time as the TestCase's, whatever it holds (an
    empty summary too: a skip without a reason is not counted as skipped)."""
    result.summary = summary
    with tempfile.TemporaryDirectory() as tmp:
        if crash_log is not None:
            result.data["internal_error"] = crash_log and str(Path(tmp) / crash_log)
            (Path(tmp) / "real.log").write_text("Traceback ...\nValueError: <x> & y\n")
        where = Path(tmp) / (xml_text(manifest) or "m")
        direct = result_line(where, export, line, result)
        via = Line.of_case(junit_case(where, export, line, result))
        assert (direct.text, direct.kind, direct.elapsed) == (via.text, via.kind, via.elapsed)


@given(rows=ROWS, interrupted=st.none() | TEXT, crash=st.none() | TEXT)
def test_summaries_are_always_made(rows: list[tuple[str, str, int, StageResult]],
                                   interrupted: str | None, crash: str | None) -> None:
    table = [Row(Path(m or "m"), e, line, r) for m, e, line, r in rows]
    text = markdown_summary(table, interrupted=interrupted, internal_error=crash)
    assert text.startswith("## qnn-ci")
    assert terminal_table(table, width=100)
    for line in annotations(table, root=Path("/")):
        assert line.startswith("::error ") and "\n" not in line
