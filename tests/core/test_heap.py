"""The garbage collector around a qnn-ci pytest session (``qnn_ci.heap``): what lived
before is frozen while known items are reported and thawed before test code runs;
at exit the garbage is collected (its finalizers run) before the rest is frozen --
only in sessions with qnn-ci items, and never for a pytest run inside a longer
process."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.pytester_project import qnn_project

pytest_plugins = ["pytester"]

MANIFEST = """
exports:
  - name: a
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 2, held_out: 0}
"""
# What the collector looks like at the very end of the process (an atexit handler
# registered before qnn-ci's, so it runs after it), and late garbage: a cycle whose
# finalizer writes a file, made by ``_late_garbage`` (registered to run before
# qnn-ci's handler).
EXIT_WATCH = '''
import atexit, gc, json, os

def _last():
    with open("exit.json", "w") as fh:
        json.dump({"frozen": gc.get_freeze_count() > 0}, fh)

atexit.register(_last)

class Holder:
    def __init__(self, name="late.txt"):
        self.name = name

    def __del__(self):
        with open(self.name, "w") as fh:
            fh.write("kept")

def _late_garbage(name="late.txt"):
    h = Holder(name)
    h.me = h
    del h
'''
# The conftest: the exit watch, and whether each report is logged frozen.
CONFTEST = EXIT_WATCH + '''
FROZEN_AT_REPORT = {}

def pytest_runtest_logreport(report):
    FROZEN_AT_REPORT.setdefault(report.nodeid, gc.get_freeze_count() > 0)

def pytest_configure(config):
    # a cycle with a finalizer, alive through the session, dropped at unconfigure
    config.qnn_test_holder = Holder("unconfigure.txt")
    config.qnn_test_holder.me = config.qnn_test_holder
    config.add_cleanup(_last_cleanup)   # registered first: the last clean-up

def _last_cleanup():
    FROZEN_AT_REPORT["(clean-up)"] = gc.get_freeze_count() > 0
    with open("reports.json", "w") as fh:
        json.dump(FROZEN_AT_REPORT, fh)

def pytest_unconfigure(config):
    atexit.register(_late_garbage)
    del config.qnn_test_holder          # garbage now: collected, its finalizer runs
'''
# Runs after the manifest's items: its module-level cycle, made at collection, must be
# collectable inside the test, and nothing may be frozen while it runs.
AFTER = '''
import gc, weakref

class Node:
    pass

CYCLE = Node()
CYCLE.me = CYCLE
REF = weakref.ref(CYCLE)

def test_sees_every_object_collectable():
    global CYCLE
    assert gc.get_freeze_count() == 0
    CYCLE = None
    gc.collect()
    assert REF() is None
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    qnn_project(pytester, monkeypatch, MANIFEST)
    (pytester.path / "conftest.py").write_text(CONFTEST)
    (pytester.path / "z_after_test.py").write_text(AFTER)
    return pytester


def _read(project: pytest.Pytester, name: str) -> dict[str, bool]:
    return dict(json.loads((project.path / name).read_text()))


def test_known_items_reported_frozen_test_code_thawed_and_exit_loses_nothing(
        project: pytest.Pytester) -> None:
    project.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
        passed=3, skipped=10)                  # first run: the stages run
    assert _read(project, "exit.json") == {"frozen": True}
    assert (project.path / "late.txt").read_text() == "kept"   # collected: finalized
    (project.path / "late.txt").unlink()

    project.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
        passed=3, skipped=10)                  # cached: the items are known
    frozen = _read(project, "reports.json")
    stage_items = [n for n in frozen if n.startswith("qnn-ci.yaml::")]
    assert len(stage_items) == 12
    # known items are reported frozen; the Python test after them runs thawed
    assert all(frozen[n] for n in stage_items)
    assert frozen["z_after_test.py::test_sees_every_object_collectable"] is False
    # frozen at unconfigure, before pytest's own clean-up collects again; a cycle a
    # conftest dropped at its unconfigure (before qnn-ci's) was collected: finalized
    assert frozen["(clean-up)"] is True
    assert (project.path / "unconfigure.txt").read_text() == "kept"
    assert _read(project, "exit.json") == {"frozen": True}
    assert (project.path / "late.txt").read_text() == "kept"


def test_exit_is_left_alone_when_turned_off_or_without_qnn_items(
        project: pytest.Pytester) -> None:
    (project.path / "pytest.ini").write_text("[pytest]\nqnn_fast_exit = false\n")
    project.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
        passed=3, skipped=10)
    assert _read(project, "exit.json") == {"frozen": False}
    assert _read(project, "reports.json")["(clean-up)"] is False
    assert (project.path / "late.txt").read_text() == "kept"

    (project.path / "pytest.ini").unlink()
    project.runpytest_subprocess("-p", "no:cacheprovider", "z_after_test.py").assert_outcomes(
        passed=1)                              # no qnn-ci item: nothing changed
    assert _read(project, "exit.json") == {"frozen": False}


def test_objects_a_test_froze_stay_frozen(project: pytest.Pytester) -> None:
    """A test that freezes objects itself keeps them frozen through the known items
    after it: qnn-ci never thaws what it did not freeze."""
    (project.path / "z_after_test.py").unlink()
    (project.path / "a_freeze_test.py").write_text(
        "import gc\n\n\ndef test_freezes():\n    gc.freeze()\n")
    (project.path / "z_check_test.py").write_text(
        "import gc\n\n\ndef test_still_frozen():\n    assert gc.get_freeze_count() > 0\n")
    for _ in range(2):                                  # then cached: known items
        project.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
            passed=4, skipped=10)


def test_a_second_session_in_one_process_starts_thawed(project: pytest.Pytester) -> None:
    """`pytest.main` twice in one process: the first session's end froze the heap, the
    second thaws it when configured (its Python test sees every object collectable)."""
    (project.path / "conftest.py").unlink()
    (project.path / "twice.py").write_text(
        "import gc, json, pytest\n"
        "codes = [int(pytest.main(['-p', 'no:cacheprovider', '-q']))]\n"
        "between = gc.get_freeze_count() > 0\n"
        "codes.append(int(pytest.main(['-p', 'no:cacheprovider', '-q'])))\n"
        "print(json.dumps({'codes': codes, 'between': between}))\n")
    done = subprocess.run([sys.executable, "twice.py"], cwd=project.path,
                          capture_output=True, text=True)
    assert json.loads(done.stdout.splitlines()[-1]) == {"codes": [0, 0], "between": True}


def test_an_inline_run_leaves_this_process_unfrozen(project: pytest.Pytester) -> None:
    for name in ("conftest.py", "z_after_test.py"):   # their atexit hooks: not in here
        (project.path / name).unlink()
    for _ in range(2):                                  # then cached: known items
        project.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2, skipped=10)
        assert gc.get_freeze_count() == 0


def test_the_command_collects_then_freezes_at_exit(tmp_path: Path) -> None:
    """`qnn-ci` owns its process: at exit its garbage is collected (a finalizer made
    after the command ran still runs), then the heap is frozen."""
    script = tmp_path / "run.py"
    script.write_text(EXIT_WATCH + (
        "\nimport sys\nfrom qnn_ci.cli import main\n"
        "code = main(['schema'])\n"
        "atexit.register(_late_garbage)   # runs before qnn-ci's exit handler\n"
        "sys.exit(code)\n"))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "exit.json").read_text()) == {"frozen": True}
    assert (tmp_path / "late.txt").read_text() == "kept"
