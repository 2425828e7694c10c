"""Calibration warnings are shown, not only counted: the first few (grouped, with a
count) in `qnn-ci run`'s text output, its JUnit properties, and pytest's "qnn-ci
warnings" section and JUnit properties, from a real calibration run."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qnn_ci.cli import main
from qnn_ci.engine.warning_lines import group_warnings, warning_lines, warning_properties
from tests.core.graphs import scale_model

pytest_plugins = ["pytester"]

# 12 samples: 0, 3, 6, 9 all zeros (4 all_zero warnings; 3 of them also identical to
# sample 0), the others real data.
GEN = '''
import numpy as np

def some_zeros(count):
    rng = np.random.default_rng(7)
    for i in range(count):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        yield {"x": np.zeros_like(x) if i % 3 == 0 else x}
'''

MANIFEST = """
exports:
  - name: a
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:some_zeros", samples: 12, held_out: 0}
"""

ZERO_LINE = ("[inputs.all_zero] sample 0: x is all zeros (synthetic data? calibration needs "
             "real inference data) (+3 more like it)")
SAME_LINE = ("[inputs.identical] sample 3: x is identical to sample 0 (synthetic or "
             "duplicated data?) (+2 more like it)")


def _project(folder: Path) -> Path:
    scale_model(folder / "m.onnx", dims=["N", 4])
    (folder / "gens.py").write_text(GEN)
    manifest = folder / "qnn-ci.yaml"
    manifest.write_text(textwrap.dedent(MANIFEST).lstrip())
    return manifest


def _props(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def _case(xml: Path, name: str) -> ET.Element:
    cases = [c for c in ET.parse(xml).iter("testcase") if c.get("name", "").endswith(name)]
    assert len(cases) == 1, [c.get("name") for c in ET.parse(xml).iter("testcase")]
    return cases[0]


def test_run_text_output_and_junit_show_the_first_warnings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("COLUMNS", "400")       # the table cuts rows to the terminal width
    manifest = _project(tmp_path)
    junit = tmp_path / "report.xml"
    code = main(["run", str(manifest), "--stage", "calibration", "--workdir",
                 str(tmp_path / "w"), "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == 0, out     # warnings do not fail the stage
    # the table row counts them by kind; the warnings block shows them
    assert "7 warning(s): 4 inputs.all_zero, 3 inputs.identical" in out
    block = out[out.index("\nwarnings:\n"):].splitlines()
    assert block[2:5] == ["  a::calibration: 7 warning(s)", f"    - {ZERO_LINE}",
                          f"    - {SAME_LINE}"]
    props = _props(_case(junit, "a::calibration"))
    assert props["qnn.warnings.count"] == "7"
    assert props["qnn.warnings.0"] == ZERO_LINE
    assert props["qnn.warnings.1"] == SAME_LINE
    assert "qnn.warnings.2" not in props
    # a cached re-run says the same
    code = main(["run", str(manifest), "--stage", "calibration", "--workdir",
                 str(tmp_path / "w")])
    again = capsys.readouterr().out
    assert "(cached)" in again and f"    - {ZERO_LINE}" in again


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_pytest_shows_warnings_of_a_passing_item(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 workers: list[str]) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    _project(pytester.path)
    junit = pytester.path / "junit.xml"
    run = pytester.runpytest_subprocess if workers else pytester.runpytest
    res = run(*workers, "-k", "calibration", "--junitxml", str(junit),
              "-o", "junit_family=xunit1")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*= qnn-ci warnings =*", "a::calibration: 7 warning(s)",
                              f"  - {ZERO_LINE}", f"  - {SAME_LINE}"])
    props = _props(_case(junit, "calibration"))
    assert props["qnn.warnings.count"] == "7"
    assert props["qnn.warnings.0"] == ZERO_LINE


def test_no_warning_no_section(pytester: pytest.Pytester,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    _project(pytester.path)
    (pytester.path / "gens.py").write_text(GEN.replace("i % 3 == 0", "False"))
    res = pytester.runpytest("-k", "calibration")
    res.assert_outcomes(passed=1)
    assert "qnn-ci warnings" not in res.stdout.str()


def test_grouping_keeps_the_largest_groups_and_counts_the_rest() -> None:
    texts = [f"[k{i}] input in_cache{i} at line {n}: odd" for i in range(8)
             for n in range(i + 1)]
    groups = group_warnings(texts)
    # names with digits stay apart, line numbers group; largest first
    assert [(g.text, g.count) for g in groups[:2]] == [
        ("[k7] input in_cache7 at line 0: odd", 8), ("[k6] input in_cache6 at line 0: odd", 7)]
    lines = warning_lines(texts)
    assert len(lines) == 6
    assert lines[0] == "[k7] input in_cache7 at line 0: odd (+7 more like it)"
    assert lines[-1] == "+6 more warning(s) of 3 other kind(s)"   # 3 + 2 + 1
    props = warning_properties(texts)
    assert props["warnings.count"] == 36
    assert sorted(props) == ["warnings.0", "warnings.1", "warnings.2", "warnings.3",
                             "warnings.4", "warnings.count"]
    assert warning_properties([]) == {}


def test_warnings_that_differ_in_decimals_are_one_kind() -> None:
    """Seen on a real run: 13 `compare.accuracy` warnings differing only in their
    numbers were counted as "+13 more warning(s) of 13 other kind(s)"."""
    oracle = [f"[compare.accuracy] logits sample {i}: the HTP is less accurate than the CPU "
              f"backend beyond 0.400% of range {1.5 + i / 7:.4g} (largest excess "
              f"{1e-3 * (i + 1):.4g}, {0.1 * i:.3g}% of range)" for i in range(13)]
    first = [f"[check{i}] something else" for i in range(5)]
    lines = warning_lines(first + oracle)
    assert lines[0].endswith("(+12 more like it)") and "compare.accuracy" in lines[0]
    assert len(lines) == 6 and lines[-1] == "+1 more warning(s) of 1 other kind(s)"
    rest = [f"[check{i}] something else" for i in range(6)] + oracle[:3] + ["[check0] other"]
    assert warning_lines(rest)[-1] == "+3 more warning(s) of 3 kind(s), 1 of them shown above"
    # numbers inside names still tell warnings apart
    assert len(group_warnings(["[k] in_cache0 bad", "[k] in_cache1 bad"])) == 2
