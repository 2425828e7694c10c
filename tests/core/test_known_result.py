"""Cached stage items are reported without pytest's per-item set-up
(``qnn_ci.known_result``) -- with the same reports, and never where that could change
an answer: stages that run, failures, skip/xfail marks, a conftest's phase hooks."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.core.pytester_project import qnn_project

pytest_plugins = ["pytester"]

MANIFEST = """
exports:
  - name: a
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 3, held_out: 0}
  - name: bad
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:doubles"}
  - name: b
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 2, held_out: 0}
"""

# Counts the items pytest's own protocol set up (a conftest with no hooks: neutral).
COUNTING = '''
import atexit, json, os
import _pytest.runner as runner

SEEN = []
_setup = runner.SetupState.setup

def _counting(self, item):
    SEEN.append(item.nodeid)
    return _setup(self, item)

runner.SetupState.setup = _counting
atexit.register(lambda: open(os.environ["SETUP_LOG"], "w").write(json.dumps(SEEN)))
'''
# Every report as a reporter sees it (a logreport hook is not a phase hook: neutral).
REPORTS = '''

REPORTS = []

def pytest_runtest_logreport(report):
    longrepr = report.longrepr
    REPORTS.append([report.nodeid, report.when, report.outcome, list(report.location),
                    list(longrepr) if isinstance(longrepr, tuple) else str(longrepr),
                    sorted(report.keywords), report.sections,
                    [[k, str(v)] for k, v in report.user_properties
                     if k not in ("qnn.date", "qnn.duration_s")]])

def pytest_sessionfinish(session):
    open(os.environ["REPORT_LOG"], "w").write(json.dumps(REPORTS))
'''
PHASE_HOOK = '''

def pytest_runtest_setup(item):
    pass
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("SETUP_LOG", str(pytester.path / "setup.json"))
    monkeypatch.setenv("REPORT_LOG", str(pytester.path / "reports.json"))
    return qnn_project(pytester, monkeypatch, MANIFEST)


def _cases(path: Path) -> dict[str, tuple[str, str, list[tuple[str, str]]]]:
    """testcase -> (outcome, its message, properties but the run's date and a
    re-run stage's duration)."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        kinds = [c for c in case if c.tag in ("skipped", "failure", "error")]
        outcome = kinds[0].tag if kinds else "passed"
        message = kinds[0].get("message", "") if kinds else ""
        props = [(p.get("name", ""), p.get("value", "")) for p in case.iter("property")
                 if p.get("name") not in ("qnn.date", "qnn.duration_s")]
        out[f"{case.get('classname')}::{case.get('name')}"] = (outcome, message, props)
    return out


def _set_up(project: pytest.Pytester) -> list[str]:
    return json.loads((project.path / "setup.json").read_text())


def test_cached_rerun_same_reports_without_item_setup(project: pytest.Pytester) -> None:
    (project.path / "conftest.py").write_text(COUNTING)
    first = project.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=first.xml")
    first.assert_outcomes(passed=5, skipped=30, failed=1)
    ran = _set_up(project)   # nothing cached: the stages that ran were set up by pytest
    assert ran == [f"qnn-ci.yaml::{e}::{s}" for e in ("a", "bad", "b")
                   for s in ("static_shapes", "calibration", "regression")]

    (project.path / "conftest.py").write_text(COUNTING + REPORTS)
    fast = project.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=fast.xml", "-rs")
    fast.assert_outcomes(passed=5, skipped=30, failed=1)
    # Set up by pytest: the failed stage (not cached: it runs again), the stage that
    # reads it, and the last item (it tears the session down).
    assert _set_up(project) == ["qnn-ci.yaml::bad::calibration", "qnn-ci.yaml::bad::regression",
                                "qnn-ci.yaml::b::regression"]
    fast.stdout.fnmatch_lines(["*bad::calibration*", "*float64*"])
    fast_reports = json.loads((project.path / "reports.json").read_text())

    (project.path / "conftest.py").write_text(COUNTING + REPORTS + PHASE_HOOK)  # not neutral
    slow = project.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=slow.xml", "-rs")
    slow.assert_outcomes(passed=5, skipped=30, failed=1)
    assert len(_set_up(project)) == 36   # a conftest's phase hook: pytest's own protocol
    # the same reports, phase by phase: outcome, location, skip line, keywords, properties
    slow_reports = json.loads((project.path / "reports.json").read_text())
    # a pass or failure: set-up, call, teardown; a skip known without running: the
    # skip at set-up (as a skip mark's), then teardown -- on either path
    assert len(fast_reports) == len(slow_reports) == 6 * 3 + 30 * 2
    phases: dict[str, list[tuple[str, str]]] = {}
    for nodeid, when, outcome, *_ in slow_reports:
        phases.setdefault(nodeid, []).append((when, outcome))
    assert sorted(map(tuple, phases.values())) == sorted(
        [(("setup", "passed"), ("call", "passed"), ("teardown", "passed"))] * 5
        + [(("setup", "passed"), ("call", "failed"), ("teardown", "passed"))]
        + [(("setup", "skipped"), ("teardown", "passed"))] * 30)
    for fast_one, slow_one in zip(fast_reports, slow_reports, strict=True):
        if fast_one[2] != "failed":   # a failure's traceback names the path it took
            assert fast_one == slow_one
    # pytest's location: the manifest relative to the root, the export's line (0-based)
    line_of = {ln.split("name: ")[1]: i for i, ln in enumerate(
        (project.path / "qnn-ci.yaml").read_text().splitlines()) if "- name: " in ln}
    for nodeid, _, _, location, *_ in fast_reports:
        export, stage = nodeid.split("::")[1:]
        assert location == ["qnn-ci.yaml", line_of[export], f"{export}::{stage}"]
    skipped = [r for r in fast_reports if r[2] == "skipped"]
    assert skipped and all(r[4][0].endswith("qnn-ci.yaml") and r[4][2].startswith("Skipped: ")
                           for r in skipped)

    fast_cases, slow_cases = _cases(project.path / "fast.xml"), _cases(project.path / "slow.xml")
    assert fast_cases == slow_cases
    assert fast_cases["qnn-ci.yaml.a::static_shapes"][0] == "passed"
    assert ("qnn.cached", "True") in fast_cases["qnn-ci.yaml.a::static_shapes"][2]
    outcome, message, _ = fast_cases["qnn-ci.yaml.b::convert"]
    assert outcome == "skipped" and "QNN_SDK_ROOT is not set" in message
    # the skip is shown at the export's line in the manifest, as before
    lines = [ln for ln in slow.outlines if ln.startswith("SKIPPED")]
    assert lines and lines == [ln for ln in fast.outlines if ln.startswith("SKIPPED")]


def test_marks_and_a_makereport_wrapper_still_apply(project: pytest.Pytester) -> None:
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5, skipped=30, failed=1)
    (project.path / "conftest.py").write_text(textwrap.dedent('''
        import pytest

        PHASES = []

        def pytest_collection_modifyitems(items):
            for item in items:
                if item.nodeid == "qnn-ci.yaml::a::static_shapes":
                    item.add_marker(pytest.mark.xfail(strict=True, reason="known"))
                if item.nodeid == "qnn-ci.yaml::b::static_shapes":
                    item.add_marker(pytest.mark.skip(reason="not today"))

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            PHASES.append((item.nodeid, call.when))
            return report

        def pytest_sessionfinish(session):
            import json
            open("phases.json", "w").write(json.dumps(PHASES))
        '''))
    res = project.runpytest("-p", "no:cacheprovider", "-rsX")
    # a cached pass under a strict xfail fails as XPASS(strict); a skip mark skips
    res.assert_outcomes(passed=3, skipped=31, failed=2)
    res.stdout.fnmatch_lines(["*_ a::static_shapes _*", "[[]XPASS(strict)[]] known"])
    res.stdout.fnmatch_lines(["*not today*"])
    phases = json.loads((project.path / "phases.json").read_text())
    per_item: dict[str, list[str]] = {}
    for nodeid, when in phases:
        per_item.setdefault(nodeid, []).append(when)
    assert len(per_item) == 36
    # a known skip is reported at set-up (no call phase), as the skip mark's is
    assert per_item.pop("qnn-ci.yaml::b::static_shapes") == ["setup", "teardown"]
    assert sorted(map(tuple, per_item.values())) == sorted(
        [("setup", "call", "teardown")] * 5 + [("setup", "teardown")] * 30)


def test_the_loop_reports_known_items_unless_other_plugins_take_part(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """With only pytest's own plugins, known items are reported straight from the test
    loop, outside the protocol's per-item wrappers (warning capture, here counted);
    a plugin's protocol hook puts every item back through the protocol, and -x stops
    at the first failure either way."""
    import _pytest.warnings

    wrapped: list[str] = []
    real = _pytest.warnings.catch_warnings_for_item

    def counting(config, ihook, when, item):  # type: ignore[no-untyped-def]
        if when == "runtest":
            wrapped.append(item.nodeid)
        return real(config, ihook, when, item)

    monkeypatch.setattr(_pytest.warnings, "catch_warnings_for_item", counting)
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5, skipped=30, failed=1)
    wrapped.clear()
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5, skipped=30, failed=1)
    # only the items pytest's protocol runs: the failed stage (it runs again), the
    # stage that reads it, the last item (it tears the session down)
    assert wrapped == ["qnn-ci.yaml::bad::calibration", "qnn-ci.yaml::bad::regression",
                       "qnn-ci.yaml::b::regression"]
    wrapped.clear()
    stopped = project.runpytest("-p", "no:cacheprovider", "-x")
    stopped.assert_outcomes(passed=3, skipped=10, failed=1)
    assert wrapped == ["qnn-ci.yaml::bad::calibration"]

    (project.path / "conftest.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(item, nextitem):
            return (yield)
        '''))
    wrapped.clear()
    project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5, skipped=30, failed=1)
    assert len(wrapped) == 36
    wrapped.clear()
    project.runpytest("-p", "no:cacheprovider", "-x").assert_outcomes(
        passed=3, skipped=10, failed=1)
    assert len(wrapped) == 14


@pytest.mark.parametrize("flag", ["--setup-only", "--setup-plan"])
def test_setup_only_and_plan_run_no_stage(project: pytest.Pytester, flag: str) -> None:
    """Set-up looks the result up and nothing more: on a fresh project no stage runs
    (the generator is never called, nothing is cached); a skip known without running
    anything shows as skipped, every other item as set up."""
    fresh = project.runpytest_subprocess("-p", "no:cacheprovider", flag)
    assert fresh.ret == 0, fresh.stdout.str()
    outcomes = fresh.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and "failed" not in outcomes
    assert not (project.path / "gen.log").exists()
    assert not list(project.path.glob(".qnn-ci/**/result.json"))
