"""The JUnit writer of `qnn-ci run`: each testcase serialised once, the file replaced
whole (at most every ``interval_s`` while cases come in, always on ``flush`` and
``write``), counters and texts read back exactly."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

from qnn_ci.engine.results import Finding, StageResult, Status
from qnn_ci.report.junit import JUnitWriter, git_state
from qnn_ci.report.junit import testcase as case_of


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
    suite_props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert suite_props["qnn.interrupted"] == odd
    got = cases(path)
    assert [c.get("name") for c in got] == [f"{odd}::s{i}" for i in range(5)]
    props = {p.get("name"): p.get("value") for p in got[1].findall("properties/property")}
    assert props["qnn.odd"] == odd and props["qnn.n"] == "1"
    failure = got[1].find("failure")
    assert failure is not None and failure.get("message") == f"{odd} 1"
    assert (failure.text or "").startswith(f"{odd} 1")
    assert got[0].find("failure") is None and got[3].find("skipped") is not None


def test_every_testcase_attribute_and_child_in_order(tmp_path: Path) -> None:
    """The attributes junit-xml writes, in its order, whichever are set; a skip's message
    and output and both captured streams read back."""
    from qnn_ci.report.junit_case import TestCase

    full = TestCase("n", classname="c", elapsed_sec=1.5, stdout="out", stderr="err <e>",
                    file="f.yaml", line=3, assertions=2, timestamp="2026-12-02T00:00:00",
                    status="run", category="cat", log="l.txt", url="http://x/y?a&b",
                    properties={"p": "v"})
    full.add_skipped_info("why & how", "skip output")
    plain = TestCase("m", classname="c", file="f.yaml", line=4)
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path, git=False)
    writer.add(full)
    writer.add(plain)
    writer.flush()
    text = path.read_text()
    assert re.search(r'<testcase name="n" assertions="2" time="1.500000" '
                     r'timestamp="2026-12-02T00:00:00" classname="c" status="run" '
                     r'class="cat" file="f.yaml" line="3" log="l.txt" url="http://x/y\?a&amp;b">',
                     text)
    assert '<testcase name="m" classname="c" file="f.yaml" line="4" />' in text
    first = cases(path)[0]
    assert [c.tag for c in first] == ["properties", "skipped", "system-out", "system-err"]
    skipped = first.find("skipped")
    assert skipped is not None and skipped.get("message") == "why & how"
    assert skipped.text == "skip output" and first.findtext("system-err") == "err <e>"


def test_replaced_cases_are_written_as_given(tmp_path: Path) -> None:
    """`qnn-ci run` replaces the list when a run stops early (the not-run cases)."""
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path)
    writer.add(case_of(tmp_path / "m.yaml", "e", 3, result(0)))
    writer.replace([case_of(tmp_path / "m.yaml", "e", 3, result(1, Status.SKIPPED))])
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


# -- the run's date and commit (testsuite properties) ---------------------------------

def suite_properties(path: Path) -> dict[str, str | None]:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return {p.get("name") or "": p.get("value") for p in suite.findall("properties/property")}


def git_repo(repo: Path) -> str:
    """A work tree with one commit of ``qnn-ci.yaml``; returns the commit."""
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "qnn-ci.yaml").write_text("exports: []\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "qnn-ci.yaml"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_report_carries_the_run_date_and_the_manifest_repository_commit(
        tmp_path: Path) -> None:
    head = git_repo(tmp_path / "repo")
    manifest = tmp_path / "repo" / "qnn-ci.yaml"
    before = datetime.now(UTC).replace(microsecond=0)
    path = tmp_path / "elsewhere" / "r.xml"        # the report is written outside the repo
    writer = JUnitWriter(path)
    writer.add(case_of(manifest, "e", 3, result(0)))
    writer.flush()
    props = suite_properties(path)
    assert props["qnn.commit"] == head and props["qnn.commit.short"] == head[:7]
    assert "qnn.dirty" not in props
    date = str(props["qnn.date"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", date)
    assert before <= datetime.fromisoformat(date.replace("Z", "+00:00")) \
        <= datetime.now(UTC)
    # a tracked file changed: +dirty (an untracked one alone does not count)
    (tmp_path / "repo" / "new.txt").write_text("untracked")
    assert git_state(tmp_path / "repo").get("qnn.dirty") is None
    (tmp_path / "repo" / "qnn-ci.yaml").write_text("exports: [] # changed\n")
    writer = JUnitWriter(path)
    writer.add(case_of(manifest, "e", 3, result(0)))
    writer.flush()
    props = suite_properties(path)
    assert (props["qnn.commit"], props["qnn.commit.short"], props["qnn.dirty"]) == \
        (head, head[:7] + "+dirty", "true")


def test_outside_git_or_without_git_only_the_date(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.xml"
    writer = JUnitWriter(path)
    writer.add(case_of(tmp_path / "m.yaml", "e", 3, result(0)))
    writer.flush()
    assert sorted(suite_properties(path)) == ["qnn.date"]
    git_repo(tmp_path / "repo")
    assert git_state(tmp_path / "repo")                    # git is there ...
    monkeypatch.setenv("PATH", str(tmp_path / "no-git"))   # ... and now it is not
    assert git_state(tmp_path / "repo") == {}
    assert git_state(tmp_path / "missing" / "folder") == {}


def test_git_runs_once_per_run_not_per_case(tmp_path: Path) -> None:
    """The commit is read when the first case names its manifest; later cases (a
    thousand per second on a cached run) do not run git again."""
    head = git_repo(tmp_path / "repo")
    writer = JUnitWriter(tmp_path / "r.xml", interval_s=3600)
    writer.add(case_of(tmp_path / "repo" / "qnn-ci.yaml", "e", 3, result(0)))
    assert writer.run["qnn.commit"] == head
    writer.run["qnn.commit"] = "kept"       # were git asked again, this would be replaced
    for i in range(1, 50):
        writer.add(case_of(tmp_path / "repo" / "qnn-ci.yaml", "e", 3, result(i)))
    writer.flush()
    assert suite_properties(tmp_path / "r.xml")["qnn.commit"] == "kept"


PYTEST_PROJECT = """
from pathlib import Path

def pytest_sessionstart(session):
    from qnn_ci.report.junit import add_to_pytest_junit
    add_to_pytest_junit(session.config, Path(__file__).parent)
"""


def test_pytest_junitxml_gets_the_same_suite_properties(tmp_path: Path) -> None:
    """``add_to_pytest_junit``: what the plugin calls for pytest --junitxml."""
    repo = tmp_path / "repo"
    head = git_repo(repo)
    (repo / "conftest.py").write_text(PYTEST_PROJECT)
    (repo / "test_x.py").write_text("def test_x():\n    pass\n")
    xml = tmp_path / "pytest.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:qnn_ci", f"--junitxml={xml}", "test_x.py"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    props = suite_properties(xml)
    assert props["qnn.commit"] == head and props["qnn.commit.short"] == head[:7]  # untracked
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(props["qnn.date"]))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_plugin_puts_date_and_commit_into_pytest_junitxml(tmp_path: Path,
                                                              workers: list[str]) -> None:
    """pytest --junitxml on a manifest (serially and under xdist, where the controller
    writes the file): the same qnn.date / qnn.commit as `qnn-ci run --junit`; an
    unrelated test run with --junitxml gets none of them."""
    from tests.core.graphs import FLOATS_GEN, scale_model

    repo = tmp_path / "repo"
    head = git_repo(repo)
    scale_model(repo / "m.onnx", dims=[1, 8])
    (repo / "gens.py").write_text(FLOATS_GEN)
    (repo / "qnn-ci.yaml").write_text(
        "exports:\n  - name: a\n    model: m.onnx\n"
        "    calibration: {generator: 'gens:floats', samples: 2, held_out: 0}\n")
    (repo / "test_other.py").write_text("def test_other():\n    pass\n")
    before = datetime.now(UTC).replace(microsecond=0)
    xml = tmp_path / "qnn.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *workers, f"--junitxml={xml}", "-m", "qnn", "qnn-ci.yaml"],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    props = suite_properties(xml)
    assert props["qnn.commit"] == head
    # the manifest was committed empty and then written: a tracked change
    assert props["qnn.commit.short"] == head[:7] + "+dirty"
    started = datetime.strptime(str(props["qnn.date"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= started <= datetime.now(UTC)
    other = tmp_path / "other.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *workers, f"--junitxml={other}", "test_other.py"],
                          cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [k for k in suite_properties(other) if k.startswith("qnn.")]
