"""The pytest plugin, driven by pytester: items and node ids, markers, skip
reasons, blocked-by skips, failure locations, JUnit properties, the job summary,
and exactly-once stage work under pytest-xdist."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.core.graphs import scale_model
from tests.core.pytester_project import qnn_project

pytest_plugins = ["pytester"]

MANIFEST = """
exports:
  - name: a
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 4, held_out: 1}
    target: {soc: QCS6490}
  - name: b
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:floats", samples: 3, held_out: 0}
  - name: bad
    model: m.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: "gens:doubles"}
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return qnn_project(pytester, monkeypatch, MANIFEST)


def test_items_node_ids_and_markers(project: pytest.Pytester) -> None:
    res = project.runpytest("--collect-only", "-q")
    ids = [line for line in res.outlines if "::" in line]
    assert "qnn-ci.yaml::a::static_shapes" in ids
    assert "qnn-ci.yaml::a::calibration" in ids
    stages = [i.split("::")[2] for i in ids if i.startswith("qnn-ci.yaml::a::")]
    order = ["static_shapes", "calibration", "sim_npu", "sim_numerics", "dry_run", "convert",
             "contract", "fp16_gate", "model_lib", "so_load", "htp_vs_cpu", "context_binary",
             "context_run", "regression"]
    assert [s for s in order if s in stages] == stages  # pipeline order
    res = project.runpytest("--collect-only", "-q", "-m", "qnn")   # every stage item
    assert [ln for ln in res.outlines if ln.startswith("qnn-ci.yaml::a::")] == \
        [i for i in ids if i.startswith("qnn-ci.yaml::a::")]
    res = project.runpytest("--collect-only", "-q", "-m", "qnn and not qnn_sdk and not qnn_board")
    kept = {line.split("::")[2] for line in res.outlines if line.startswith("qnn-ci.yaml::a::")}
    assert {"static_shapes", "calibration"} <= kept
    assert not kept & {"dry_run", "convert", "contract", "fp16_gate", "model_lib", "so_load"}
    res = project.runpytest("--collect-only", "-q", "-m", "qnn_sdk")
    sdk = {line.split("::")[2] for line in res.outlines if line.startswith("qnn-ci.yaml::a::")}
    assert sdk and sdk <= {"dry_run", "convert", "contract", "fp16_gate", "model_lib"}
    res = project.runpytest("--markers")
    assert any(line.startswith("@pytest.mark.qnn_board:") for line in res.outlines)


def test_run_skips_blocks_and_points_at_the_manifest(project: pytest.Pytester) -> None:
    res = project.runpytest("-m", "not qnn_sim and not qnn_board", "-rs", "--qnn-export", "a",
                            "--qnn-export", "bad", f"--junitxml={project.path / 'j.xml'}",
                            "-o", "junit_family=xunit1")
    out = res.stdout.str()
    res.assert_outcomes(passed=3, failed=1, skipped=12)   # regression: nothing measured
    assert "QNN_SDK_ROOT is not set" in out
    assert "blocked by a::convert (skipped: QNN_SDK_ROOT is not set)" in out
    # The failure names the input, expected and got, at the export's manifest line.
    assert "input 'x' expected dtype float32, got float64" in out
    assert "qnn-ci.yaml:11: bad::calibration failed" in out
    assert "SKIPPED [3] qnn-ci.yaml:2: QNN_SDK_ROOT is not set" in out
    assert "qnn-ci summary" in out and "PASS  calibration" in out
    root = ET.parse(project.path / "j.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    cal = cases["calibration"] if "calibration" in cases else None
    assert cal is not None
    props = {p.get("name"): p.get("value") for c in root.iter("testcase")
             if c.get("classname", "").endswith("a") for p in c.iter("property")}
    assert props["qnn.samples"] == "4" and props["qnn.held_out"] == "1"
    assert props["qnn.artefact.input_list"].endswith("a/calibration/input_list.txt")
    assert "qnn.duration_s" in props


def test_github_job_summary_and_annotations(project: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    res = project.runpytest("-m", "not qnn_sim and not qnn_sdk and not qnn_board")
    out = res.stdout.str()
    assert "::error file=qnn-ci.yaml,line=11,title=bad%3A%3Acalibration::" in out
    md = summary.read_text()
    assert md.index("### bad") < md.index("### a")   # failures first
    bad = md[md.index("### bad"):md.index("### a")]
    assert "| `calibration` | ⛔ error | " in bad      # bad input: the generator's dtype
    assert "expected dtype float32, got float64" in bad
    assert "| `static_shapes` | ✅ passed |" in md


def test_xdist_runs_each_stage_once(project: pytest.Pytester) -> None:
    host = "qnn and not qnn_sim and not qnn_sdk and not qnn_board"
    res = project.runpytest_subprocess("-n", "2", "-m", host, "--qnn-no-cache",
                                       "--qnn-export", "a", "--qnn-export", "b")
    res.assert_outcomes(passed=4, skipped=2)      # regression: nothing measured
    # Both exports' calibration ran once each, though two workers ran items; a result
    # one worker made for another in this run is not called cached.
    assert (project.path / "gen.log").read_text().count("called") == 2
    assert "(cached)" not in res.stdout.str()
    res = project.runpytest_subprocess("-n", "2", "-m", host,
                                       "--qnn-export", "a", "--qnn-export", "b")
    res.assert_outcomes(passed=4, skipped=2)
    assert (project.path / "gen.log").read_text().count("called") == 2  # cached
    # the 4 passes; the 2 regression skips follow from the upstream results alone
    # (nothing measured): found again without the cache
    assert res.stdout.str().count("(cached)") == 4


def test_bad_manifest_is_one_failing_item(project: pytest.Pytester) -> None:
    (project.path / "qnn-ci.yaml").write_text("exports:\n  - name: a\n    modle: m.onnx\n")
    res = project.runpytest()
    res.assert_outcomes(failed=1)
    assert "exports[0].modle: unknown key 'modle' (did you mean 'model'?)" in res.stdout.str()


def test_ini_option_collects_other_manifest_names(project: pytest.Pytester) -> None:
    Path(project.path / "qnn-ci.yaml").rename(project.path / "models.qnn.yaml")
    project.makeini("[pytest]\nqnn_manifests = *.qnn.yaml\n")
    res = project.runpytest("--collect-only", "-q")
    assert "models.qnn.yaml::a::static_shapes" in res.stdout.str()


def test_selecting_a_downstream_export_and_unknown_names(project: pytest.Pytester) -> None:
    scale_model(project.path / "down.onnx", in_name="y", out_name="out", dims=[1, 4])
    text = (project.path / "qnn-ci.yaml").read_text()
    (project.path / "qnn-ci.yaml").write_text(
        text + "  - name: down\n    model: down.onnx\n    calibration: {from: a}\n")
    host = "qnn and not qnn_sim and not qnn_sdk and not qnn_board"
    res = project.runpytest("-m", host, "--qnn-export", "down", "-v")
    res.assert_outcomes(passed=2, skipped=1)      # regression: nothing measured
    res.stdout.fnmatch_lines(["*qnn-ci.yaml::down::calibration PASSED*"])
    assert "::a::" not in res.stdout.str()        # the upstream runs, but makes no items
    res = project.runpytest("-m", host, "--qnn-export", "dwn")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "'dwn': no such export (did you mean 'down'?)" in res.stderr.str()


def test_bad_manifest_reaches_the_job_summary(project: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (project.path / "qnn-ci.yaml").write_text("exports:\n  - name: a\n    modle: m.onnx\n")
    res = project.runpytest()
    res.assert_outcomes(failed=1)
    assert "::error file=qnn-ci.yaml,line=3,title=(manifest)%3A%3Amanifest::" in res.stdout.str()
    md = summary.read_text()
    assert "### (manifest)" in md and "unknown key 'modle'" in md
