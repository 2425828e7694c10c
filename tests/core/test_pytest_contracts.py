"""pytest's contracts hold for qnn-ci items: every item, cached or not, goes through
pytest's own runtest protocol, so what pytest and its plugins promise for a test
holds for a stage -- a conftest's runtest hooks see it, ``-W error`` applies,
coverage contexts name it, reruns and timeouts act on it."""

from __future__ import annotations

import json
import sqlite3
import textwrap
import time
from pathlib import Path

import pytest

from tests.core.pytester_project import qnn_project

pytest_plugins = ["pytester"]

MANIFEST = """
exports:
  - name: a
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 3, held_out: 1}
  - name: b
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 2, held_out: 0}
"""

# Every runtest hook a conftest can implement, with what pytest's own protocol sets
# around an item's call (PYTEST_CURRENT_TEST), written to hooks.jsonl.
HOOKS_CONFTEST = '''
import json, os

import pytest

def _log(kind, item_or_report, **extra):
    nodeid = getattr(item_or_report, "nodeid", "")
    with open("hooks.jsonl", "a") as fh:
        fh.write(json.dumps({"hook": kind, "nodeid": nodeid, **extra}) + "\\n")

def pytest_runtest_setup(item):
    _log("setup", item)

@pytest.hookimpl(trylast=True)   # after pytest's own call hook: the item has run
def pytest_runtest_call(item):
    _log("call", item, current=os.environ.get("PYTEST_CURRENT_TEST", ""))

def pytest_runtest_teardown(item, nextitem):
    _log("teardown", item)

def pytest_runtest_makereport(item, call):
    _log("makereport", item, when=call.when)
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return qnn_project(pytester, monkeypatch, MANIFEST)


def _hooks(project: pytest.Pytester) -> list[dict[str, str]]:
    path = project.path / "hooks.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.unlink()
    return rows


def _one_export(project: pytest.Pytester, name: str, generator: str, samples: int = 2) -> None:
    """Make ``qnn-ci.yaml`` a single export calibrated from ``generator``."""
    (project.path / "qnn-ci.yaml").write_text(textwrap.dedent(f"""
        exports:
          - name: {name}
            model: m.onnx
            inputs: {{x: {{shape: [1, 4]}}}}
            calibration: {{generator: "{generator}", samples: {samples}, held_out: 0}}
    """).lstrip())


def _item_ids(project: pytest.Pytester) -> list[str]:
    res = project.runpytest("--collect-only", "-q", "-m", "qnn")
    return [line for line in res.outlines if line.startswith("qnn-ci.yaml::")]


def test_a_conftests_runtest_hooks_see_every_item_on_a_cached_run(
        project: pytest.Pytester) -> None:
    project.makeconftest(HOOKS_CONFTEST)
    ids = _item_ids(project)
    assert len(ids) >= 10
    first = project.runpytest("-m", "qnn")
    first.assert_outcomes(passed=4, skipped=len(ids) - 4)
    _hooks(project)
    gen_log = project.path / "gen.log"
    made = gen_log.read_text()
    cached = project.runpytest("-m", "qnn", "-rA")
    cached.assert_outcomes(passed=4, skipped=len(ids) - 4)
    assert gen_log.read_text() == made        # cached: no calibration sample made again
    rows = _hooks(project)
    seen = {hook: [r["nodeid"] for r in rows if r["hook"] == hook]
            for hook in ("setup", "call", "teardown")}
    assert seen["setup"] == ids and seen["teardown"] == ids
    reports = {(r["nodeid"], r["when"]) for r in rows if r["hook"] == "makereport"}
    assert {(i, "setup") for i in ids} <= reports and {(i, "teardown") for i in ids} <= reports
    # a skip known without running anything shows at set-up (as a skip mark does);
    # every other item is called, with pytest's own PYTEST_CURRENT_TEST set
    called = {r["nodeid"]: r["current"] for r in rows if r["hook"] == "call"}
    passed = {ln.split(" ", 1)[1] for ln in cached.outlines if ln.startswith("PASSED ")}
    assert passed and passed <= set(called)
    for nodeid, current in called.items():
        assert current == f"{nodeid} (call)"
        assert (nodeid, "call") in reports


GEN_WARNS = '''
import warnings
import numpy as np

def warns(count):
    warnings.warn("calibration data is synthetic", UserWarning, stacklevel=1)
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32)}
'''


def test_minus_w_error_turns_a_warning_raised_in_a_stage_into_a_failure(
        project: pytest.Pytester) -> None:
    (project.path / "gens_warn.py").write_text(GEN_WARNS)
    _one_export(project, "w", "gens_warn:warns")
    plain = project.runpytest("-m", "qnn", "-k", "calibration")
    plain.assert_outcomes(passed=1)
    assert "calibration data is synthetic" in plain.stdout.str()   # pytest's warnings summary
    strict = project.runpytest("-m", "qnn", "-k", "calibration", "--qnn-no-cache",
                               "-W", "error::UserWarning")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*calibration data is synthetic*"])


def test_coverage_contexts_name_a_cached_item(project: pytest.Pytester) -> None:
    """pytest-cov's ``--cov-context=test`` charges a cached item's lines (the plugin
    asking the engine, the engine reading the cache) to that item."""
    project.runpytest("-m", "qnn")        # fill the cache
    res = project.runpytest_subprocess("-m", "qnn", "-p", "no:cacheprovider", "--cov=qnn_ci",
                                       "--cov-context=test", "--cov-report=")
    assert res.ret == 0, res.stdout.str()
    db = sqlite3.connect(project.path / ".coverage")
    rows = db.execute(
        "select context.context, file.path from line_bits "
        "join context on context.id = line_bits.context_id "
        "join file on file.id = line_bits.file_id").fetchall()
    by_context: dict[str, set[str]] = {}
    for context, path in rows:
        by_context.setdefault(context, set()).add(Path(path).as_posix())
    for nodeid in ("qnn-ci.yaml::a::static_shapes", "qnn-ci.yaml::b::calibration"):
        run = by_context.get(f"{nodeid}|run", set())
        assert any(f.endswith("qnn_ci/plugin/items.py") for f in run), (nodeid, run)
        assert any(f.endswith("qnn_ci/engine/pipeline.py") for f in run), (nodeid, run)
        # the cached result is read when the item first asks for it (set-up or call)
        asked = run | by_context.get(f"{nodeid}|setup", set())
        assert any(f.endswith("qnn_ci/engine/cache.py") for f in asked), (nodeid, asked)



def test_reruns_act_on_a_failing_item(project: pytest.Pytester) -> None:
    _one_export(project, "bad", "gens:doubles")
    res = project.runpytest("-m", "qnn", "-k", "calibration", "-p", "rerunfailures",
                            "--reruns", "2")
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("rerun") == 2, outcomes


GEN_SLOW = '''
import time
import numpy as np

def slow(count):
    time.sleep(60)
    yield {"x": np.ones((1, 4), np.float32)}
'''


def test_a_timeout_stops_a_stage_that_hangs(project: pytest.Pytester) -> None:
    (project.path / "gens_slow.py").write_text(GEN_SLOW)
    _one_export(project, "s", "gens_slow:slow", samples=1)
    began = time.monotonic()
    res = project.runpytest_subprocess("-m", "qnn", "-k", "calibration", "-p", "timeout",
                                       "--timeout", "3")
    assert time.monotonic() - began < 45
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*Timeout*"])


def test_the_plugin_replaces_no_part_of_pytests_protocol() -> None:
    import qnn_ci.plugin as plugin

    hooks = {name for name in dir(plugin) if name.startswith("pytest_")}
    assert hooks, "the plugin's hooks are found on its module"
    assert not hooks & {"pytest_runtestloop", "pytest_runtest_protocol",
                        "pytest_runtest_setup", "pytest_runtest_call",
                        "pytest_runtest_teardown", "pytest_runtest_makereport"}
