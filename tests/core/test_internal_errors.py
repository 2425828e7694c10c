"""Internal errors (bugs in qnn-ci, never the user's input): exit 3, one stderr line
pointing at a log file holding the traceback, an `<error>` in the JUnit report, and
a stage that crashed counted as one (the other exports still run). pytest exits 3
too, and a manifest qnn-ci crashes on is one failing item.

There is no real bug to trigger on purpose, so each test injects one (a real
function of the engine made to raise) and checks everything around it is real."""

from __future__ import annotations

import tempfile
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from qnn_ci.cli import main
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages.static_shapes import StaticShapesStage
from tests.core.graphs import scale_model

pytest_plugins = ["pytester"]

GEN = '''
import numpy as np

def floats(count):
    rng = np.random.default_rng(3)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 8)).astype(np.float32)}
'''

MANIFEST = """
defaults:
  inputs: {x: {shape: [1, 8]}}
  calibration: {generator: "gens:floats", samples: 3, held_out: 0}
exports:
  - name: a
    model: m.onnx
  - name: b
    model: m.onnx
"""


def project(folder: Path) -> Path:
    scale_model(folder / "m.onnx", dims=["N", 8])
    (folder / "gens.py").write_text(GEN)
    p = folder / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(MANIFEST).lstrip())
    return p


CRASH_CONFTEST = """
from qnn_ci.stages.static_shapes import StaticShapesStage

real = StaticShapesStage.run

def run(self, ctx):
    if ctx.export.name == "a":
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")
    return real(self, ctx)

StaticShapesStage.run = run
"""


def crash_stage_of(monkeypatch: pytest.MonkeyPatch, export: str) -> None:
    """static_shapes of ``export`` hits a bug (TypeError); other exports run it for real."""
    real = StaticShapesStage.run

    def run(self: StaticShapesStage, ctx: StageContext) -> StageResult:
        if ctx.export.name == export:
            raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")
        return real(self, ctx)

    monkeypatch.setattr(StaticShapesStage, "run", run)


def cases(junit: Path) -> dict[str, ET.Element]:
    return {c.get("name", ""): c for c in ET.parse(junit).getroot().iter("testcase")}


def suite_props(junit: Path) -> dict[str, str | None]:
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    return {p.get("name", ""): p.get("value") for p in suite.findall("properties/property")}


@pytest.fixture(autouse=True)
def _no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


def test_stage_crash_is_an_internal_error_and_the_rest_still_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = project(tmp_path)
    crash_stage_of(monkeypatch, "a")
    junit = tmp_path / "j.xml"
    code = main(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--junit", str(junit),
                 "--stage", "calibration"])
    out, err = capsys.readouterr()
    assert code == 3, err
    assert "CRASH static_shapes" in out and "Traceback" not in out + err
    crash_log = tmp_path / "w" / "a" / "static_shapes" / "crash.log"
    assert ("qnn-ci run: a::static_shapes: internal error in stage static_shapes: TypeError: "
            "unsupported operand type(s) for +: 'int' and 'NoneType' (traceback in "
            f"{crash_log}; please report it)") in err.splitlines()
    assert "Traceback (most recent call last)" in crash_log.read_text()
    got = cases(junit)
    error = got["a::static_shapes"].find("error")
    assert error is not None and error.get("type") == "internal-error"
    assert "raise TypeError" in (error.text or "")          # the traceback is in the report
    assert got["a::calibration"].find("skipped") is not None   # blocked by the crash
    assert got["b::calibration"].find("failure") is None and \
        got["b::calibration"].find("skipped") is None       # b ran for real, and passed


def test_crash_of_the_run_itself_is_one_line_a_log_and_a_junit_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = project(tmp_path)
    real = Pipeline.run_export

    def run_export(self: Pipeline, name: str, only: set[str] | None = None) -> Any:
        if name == "b":
            raise KeyError("convert")
        return real(self, name, only)

    monkeypatch.setattr(Pipeline, "run_export", run_export)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    junit = tmp_path / "j.xml"
    workdir = tmp_path / "w"
    code = main(["run", str(manifest), "--workdir", str(workdir), "--junit", str(junit),
                 "--stage", "calibration", "--json"])
    out, err = capsys.readouterr()
    assert code == 3, err
    assert out == ""            # no half report on stdout (annotations went to stderr)
    (log,) = workdir.glob("qnn-ci-internal-error-*.log")
    line = (f"qnn-ci run: internal error: KeyError: 'convert' (traceback in {log}; "
            "please report it)")
    assert line in err.splitlines() and "Traceback" not in err
    assert "KeyError: 'convert'" in log.read_text() and "run_export" in log.read_text()
    got = cases(junit)
    assert list(got) == ["a::static_shapes", "a::calibration", "b::static_shapes",
                         "b::calibration", "qnn-ci::internal-error"]
    internal = got["qnn-ci::internal-error"].find("error")
    assert internal is not None and internal.get("type") == "internal-error"
    assert "KeyError" in (internal.text or "")
    for name in ("b::static_shapes", "b::calibration"):
        skipped = got[name].find("skipped")
        assert skipped is not None and skipped.get("message") == \
            "not run: qnn-ci internal error"
    assert suite_props(junit)["qnn.internal_error"] == str(log)
    assert "qnn-ci internal error" in (tmp_path / "summary.md").read_text()
    assert "::error title=qnn-ci internal error::qnn-ci run: internal error: KeyError" in err


def test_other_commands_log_to_a_temporary_file(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import qnn_ci.cli.schema_cmd as schema_cmd

    def schema() -> dict[str, Any]:
        raise AttributeError("'NoneType' object has no attribute 'items'")

    monkeypatch.setattr(schema_cmd, "schema", schema)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["schema"]) == 3
    out, err = capsys.readouterr()
    (log,) = tmp_path.glob("qnn-ci-internal-error-*.log")
    assert out == ""
    assert err == (f"qnn-ci schema: internal error: AttributeError: 'NoneType' object has no "
                   f"attribute 'items' (traceback in {log}; please report it)\n")


def test_user_errors_stay_exit_2_not_internal(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    p = project(tmp_path)
    p.write_text(p.read_text().replace("samples: 3", "samples: many"))
    assert main(["run", str(p), "--workdir", str(tmp_path / "w")]) == 2
    assert "internal error" not in capsys.readouterr().err
    assert not list((tmp_path / "w").glob("qnn-ci-internal-error-*"))


# -- pytest ------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_pytest_exits_3_when_a_stage_crashed(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch,
                                             workers: list[str]) -> None:
    project(pytester.path)
    (pytester.path / "conftest.py").write_text(CRASH_CONFTEST)   # reaches xdist workers
    res = pytester.runpytest_subprocess("-k", "static_shapes or calibration", *workers)
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR
    res.assert_outcomes(passed=2, failed=1, skipped=1)
    text = res.stdout.str()
    assert "internal error in stage static_shapes: TypeError" in text
    assert "qnn-ci: internal error in a::static_shapes (traceback in " in text


def test_pytest_manifest_qnn_ci_crashes_on_is_one_failing_item(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import qnn_ci.runner.session  # the plugin looks open_pipeline up there when it collects

    project(pytester.path)
    other = pytester.path / "other"
    other.mkdir()
    project(other).write_text(textwrap.dedent(MANIFEST).lstrip().replace("name: a", "name: c")
                              .replace("name: b", "name: d"))
    real = qnn_ci.runner.session.open_pipeline

    def open_pipeline(path: Path, opts: Any) -> Any:
        if path.parent.name == "other":
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, opts)

    monkeypatch.setattr(qnn_ci.runner.session, "open_pipeline", open_pipeline)
    res = pytester.runpytest("-k", "static_shapes or internal", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR
    res.assert_outcomes(passed=2, failed=1)   # the other manifest's exports still ran
    text = res.stdout.str()
    assert "qnn-ci: internal error: RecursionError: maximum recursion depth exceeded " \
           "(traceback in " in text
    logs = list((pytester.path / ".qnn-ci").glob("qnn-ci-internal-error-*.log"))
    assert len(logs) == 1 and "RecursionError" in logs[0].read_text()
