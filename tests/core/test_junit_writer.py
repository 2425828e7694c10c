"""The JUnit writer of `qnn-ci run`: each testcase serialised once, the file replaced
whole (at most every ``interval_s`` while cases come in, always on ``flush`` and
``write``), counters and texts read back exactly."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from qnn_ci.report.junit import JUnitWriter
from qnn_ci.report.junit import testcase as case_of
from qnn_ci.results import Finding, StageResult, Status


def cases(path: Path) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter("testcase"))


def result(i: int, status: Status = Status.PASSED) -> StageResult:
    return StageResult(f"s{i}", status, f"summary {i}", findings=[Finding("c", f"bad {i}")],
                       properties={"n": i}, duration_s=0.5)


def test_throttled_adds_leave_a_whole_report_and_flush_completes_it(tmp_path: Path) -> None:
    path = tmp_path / "out" / "r.xml"
    writer = JUnitWriter(path, interval_s=3600)
    assert cases(path) == []                      # whole from the start
    for i in range(3):
        writer.add(case_of(tmp_path / "m.yaml", "e", 3, result(i)))
    assert cases(path) == []                      # not rewritten per case ...
    writer.flush()                                # ... but on flush
    assert [c.get("name") for c in cases(path)] == ["e::s0", "e::s1", "e::s2"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.xml"]


def test_without_interval_every_add_is_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path, interval_s=0)
    for i in range(4):
        writer.add(case_of(tmp_path / "m.yaml", "e", 3, result(i)))
        assert len(cases(path)) == i + 1


def test_counters_properties_and_texts_read_back(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path)
    odd = 'a&b <c> "d"\n\tend'
    statuses = [Status.PASSED, Status.FAILED, Status.ERROR, Status.SKIPPED, Status.SKIPPED]
    for i, status in enumerate(statuses):
        r = result(i, status)
        r.summary = f"{odd} {i}"
        r.properties["odd"] = odd
        writer.add(case_of(tmp_path / "m.yaml", odd, 7, r))
    writer.write(interrupted=odd)
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("5", "1", "1", "2")
    assert root.get("tests") == "5" and float(root.get("time") or 0) == 2.5
    assert [p.get("value") for p in suite.findall("properties/property")] == [odd]
    got = cases(path)
    assert [c.get("name") for c in got] == [f"{odd}::s{i}" for i in range(5)]
    props = {p.get("name"): p.get("value") for p in got[1].findall("properties/property")}
    assert props["qnn.odd"] == odd and props["qnn.n"] == "1"
    failure = got[1].find("failure")
    assert failure is not None and failure.get("message") == f"{odd} 1"
    assert (failure.text or "").startswith(f"{odd} 1")
    assert got[0].find("failure") is None and got[3].find("skipped") is not None


def test_replaced_cases_are_written_as_given(tmp_path: Path) -> None:
    """`qnn-ci run` replaces the list when a run stops early (the not-run cases)."""
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path)
    writer.add(case_of(tmp_path / "m.yaml", "e", 3, result(0)))
    writer.cases = [case_of(tmp_path / "m.yaml", "e", 3, result(1, Status.SKIPPED))]
    writer.write(interrupted="interrupted by SIGTERM")
    assert [c.get("name") for c in cases(path)] == ["e::s1"]


def test_a_cached_case_keeps_a_zero_time_and_its_original_duration(tmp_path: Path) -> None:
    """The pipeline times a cached stage as this run's read; a read that rounds to
    0 s is still written as time="0.000000", not left out."""
    r = result(0)
    r.cached, r.duration_s = True, 0.0
    r.properties["original_duration_s"] = 23.4
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path)
    writer.add(case_of(tmp_path / "m.yaml", "e", 3, r))
    writer.flush()
    [case] = cases(path)
    assert case.get("time") == "0.000000"
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["qnn.cached"] == "true" and props["qnn.original_duration_s"] == "23.4"
