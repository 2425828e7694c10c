"""The `regression` stage in the real pipeline, on the collapse model (one conv whose
per-tensor 8-bit weights collapse; per-channel they do not) on onnxruntime-qnn's
HTP simulator: a baseline written with `per_channel: true` makes the per-tensor run
fail `regression` with the exact line; the reverse is an improvement; a missing
baseline or nothing measured is a skip with its reason, never a pass; the stage's
cache follows what it compares; pytest writes baselines too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    DiagnosisSpec,
    ExportSpec,
    InputSpec,
    QuantizationSpec,
    RegressionSpec,
    SimSpec,
    TargetSpec,
)
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.registry import load_stages
from tests.diagnose.graphs import COLLAPSE_INPUT, COLLAPSE_SHAPE, collapse_model, collapse_samples
from tests.sim.conftest import needs_sim, write_samples

MANIFEST = """\
exports:
  - name: collapse
    model: collapse.onnx
    inputs: {x: {shape: [1, 3, 32, 32]}}
    calibration: {input_list: data/input_list.txt, held_out: 2}
    quantization: {per_channel: PER_CHANNEL}
    target: {soc: QCS6490}
    sim: {samples: 1}
    diagnosis: {enabled: false}
"""
LINE = re.compile(r"^logits cosine 0\.\d{5} → 0\.\d{5} \(baseline from ([0-9a-f]{7}), "
                  r"\d{4}-\d\d-\d\d; tolerance 0\.001\)$")
SIM_STAGES = ("static_shapes", "calibration", "sim_npu", "sim_numerics", "regression")


def _project(folder: Path, per_channel: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    collapse_model(folder / "collapse.onnx")
    write_samples(folder / "data", collapse_samples(10, seed=1) + collapse_samples(2, seed=9),
                  "input_list")
    _per_channel(folder, per_channel)
    return folder


def _per_channel(folder: Path, on: bool) -> None:
    (folder / "qnn-ci.yaml").write_text(MANIFEST.replace("PER_CHANNEL", str(on).lower()))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("QNN_SDK_ROOT", "GITHUB_ACTIONS", "ESDK_ENV")}
    return env | {"COLUMNS": "300"}


def _qnn_ci(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qnn_ci", *args], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=600)


def _run_json(folder: Path) -> dict[str, dict]:
    done = _qnn_ci(folder, "run", "--json")
    assert done.returncode in (0, 1), done.stderr
    return {r["stage"]: r for r in json.loads(done.stdout)}


def _git(folder: Path) -> str:
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "models"], check=True)
    return subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


@needs_sim
def test_per_tensor_after_a_per_channel_baseline_fails_regression(tmp_path: Path) -> None:
    folder = _project(tmp_path / "repo", per_channel=True)
    head = _git(folder)
    done = _qnn_ci(folder, "baseline", "update")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{folder / 'qnn-baselines.yaml'}: collapse QCS6490 " \
                                  "simulator: updated"
    first = _run_json(folder)
    assert first["regression"]["status"] == "passed", first["regression"]
    assert first["regression"]["summary"] == "4 metric(s) within tolerance of the baseline"
    assert _qnn_ci(folder, "baseline", "update").stdout.strip().endswith(": unchanged")

    _per_channel(folder, False)                     # the deliberately degraded export
    res = _run_json(folder)
    assert res["sim_numerics"]["status"] == "failed"   # read, though failed: not blocked
    reg = res["regression"]
    assert reg["status"] == "failed"
    worse = [f["message"] for f in reg["findings"] if f["check"] == "regression.worse"]
    cosine = [m for m in worse if m.startswith("logits cosine")]
    assert len(cosine) == 1 and LINE.match(cosine[0]), cosine
    assert LINE.match(cosine[0]).group(1) == head
    assert reg["summary"].startswith(f"{len(worse)} metric(s) worse than the baseline: ")
    assert "logits snr" in reg["summary"]

    # the degraded numbers as the baseline: per-channel again is an improvement
    assert _qnn_ci(folder, "baseline", "update").returncode == 0
    _per_channel(folder, True)
    back = _run_json(folder)["regression"]
    assert back["status"] == "passed"
    improved = [f["message"] for f in back["findings"] if f["check"] == "regression.improved"]
    assert any(m.startswith("improved: logits cosine ") and m.endswith(
        "(update the baseline: qnn-ci baseline update qnn-ci.yaml --export collapse)")
        for m in improved), improved


def _export(folder: Path, **kw: object) -> ExportSpec:
    lst = write_samples(folder / "data", collapse_samples(10, seed=1) +
                        collapse_samples(2, seed=9), "input_list")
    spec = ExportSpec("collapse", collapse_model(folder / "collapse.onnx"),
                      folder / "qnn-ci.yaml", 3,
                      inputs={COLLAPSE_INPUT: InputSpec(COLLAPSE_INPUT, COLLAPSE_SHAPE,
                                                        "float32")},
                      calibration=CalibrationSpec(input_list=lst, held_out=2),
                      quantization=QuantizationSpec(per_channel=True),
                      target=TargetSpec(soc="QCS6490"), sim=SimSpec(samples=1),
                      diagnosis=DiagnosisSpec(enabled=False),
                      regression=RegressionSpec(baselines=folder / "b.yaml"))
    return replace(spec, **kw)  # type: ignore[arg-type]


def _pipe(export: ExportSpec, work: Path) -> dict[str, object]:
    p = Pipeline([export], Environment(workdir=work, environ=_env()),
                 stages=load_stages(SIM_STAGES))
    return {r.stage: r for r in p.run_export(export.name)}


@needs_sim
def test_skips_say_why_and_the_cache_follows_what_is_compared(tmp_path: Path) -> None:
    from qnn_ci.nightly import baselines as bl

    export = _export(tmp_path)
    work = tmp_path / "work"
    reg = _pipe(export, work)["regression"]
    assert reg.status == Status.SKIPPED                        # never a pass
    assert reg.summary.startswith(f"no baselines file {tmp_path / 'b.yaml'}: create it with "
                                  "`qnn-ci baseline update ")
    assert "--export collapse`" in reg.summary
    # a skip is cached like a pass (its fingerprint covers what it depends on)...
    again = _pipe(export, work)["regression"]
    assert again.status == Status.SKIPPED and again.cached and again.summary == reg.summary
    # ...and re-run when that changes: an entry for another SoC only: skipped, naming
    # what is missing
    bl.write(tmp_path / "b.yaml", {("collapse", "SM8550", "simulator"): bl.Entry({"x": 1})})
    reg = _pipe(export, work)["regression"]
    assert reg.status == Status.SKIPPED and not reg.cached
    assert reg.summary.startswith("no baseline for collapse on QCS6490 (simulator) in ")
    # a baseline: passes; the next run reuses it; a changed baseline re-runs it
    results = _pipe(export, work)
    bl.update(tmp_path / "b.yaml", bl.entries_for("collapse", "QCS6490", results, None,
                                                  ("abcdef1", "2026-11-28")))
    first = _pipe(export, work)["regression"]
    assert first.status == Status.PASSED and not first.cached
    again = _pipe(export, work)["regression"]
    assert again.status == Status.PASSED and again.cached
    entry = bl.load(tmp_path / "b.yaml").get("collapse", "QCS6490", "simulator")
    bl.write(tmp_path / "b.yaml", {("collapse", "QCS6490", "simulator"): replace(
        entry, metrics=entry.metrics | {"nodes_on_htp": entry.metrics["nodes_on_htp"] + 2})})
    fewer = _pipe(export, work)["regression"]
    assert fewer.status == Status.FAILED and not fewer.cached
    assert fewer.findings[0].message.startswith(
        f"nodes_on_htp {int(entry.metrics['nodes_on_htp']) + 2} → "
        f"{int(entry.metrics['nodes_on_htp'])} (baseline from abcdef1, 2026-11-28; "
        "tolerance 0)")
    # a tolerance that allows it: re-runs (its setting changed) and passes
    loose = replace(export, regression=replace(export.regression,
                                               tolerances={"nodes_on_htp": 5}))
    assert _pipe(loose, work)["regression"].status == Status.PASSED


def test_nothing_measured_and_unknown_tolerances(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    export = _export(tmp_path, target=TargetSpec())          # no SoC: no simulator stage
    reg = _pipe(export, tmp_path / "work")["regression"]
    assert reg.status == Status.SKIPPED
    assert reg.summary.startswith("nothing to compare: sim_npu skipped: ")
    assert "no target.soc in the manifest" in reg.summary
    # settled by the upstream results alone: found again without the cache
    again = _pipe(export, tmp_path / "work")["regression"]
    assert not again.cached and again.summary == reg.summary
    assert not list((tmp_path / "work").glob("**/regression/result.json"))
    bad = _export(tmp_path, regression=RegressionSpec(tolerances={"cosin": 0.1}))
    reg = _pipe(bad, tmp_path / "work")["regression"]
    assert reg.status == Status.ERROR
    assert reg.summary == (
        f"{tmp_path / 'qnn-ci.yaml'}:3: exports.collapse.regression.tolerances: unknown "
        "metric 'cosin' (did you mean 'cosine'?); allowed: cosine, snr, max_abs, latency, "
        "nodes_on_htp, library_bytes or one metric of the baseline such as "
        "sim_vs_fp32.<output>.cosine")
    off = _export(tmp_path, regression=RegressionSpec(enabled=False))
    assert "regression" not in _pipe(off, tmp_path / "work")


@needs_sim
def test_pytest_writes_the_baselines_and_reads_only_selected_stages(tmp_path: Path) -> None:
    folder = _project(tmp_path / "p", per_channel=True)
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "qnn-ci.yaml"]
    # the simulator deselected: regression does not run it for its comparison
    done = subprocess.run([*base, "-m", "not qnn_sim", "-rs"], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert "nothing to compare" in done.stdout, done.stdout
    assert not (folder / ".qnn-ci" / "collapse" / "sim_npu").exists()
    done = subprocess.run([*base, "--qnn-update-baselines"], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{folder / 'qnn-baselines.yaml'}: collapse QCS6490 simulator: updated" \
        in done.stdout
    text = (folder / "qnn-baselines.yaml").read_text()
    assert "sim_vs_fp32.logits.cosine: " in text and "nodes_on_htp: 34" in text
    # the CLI, from the same cached results at full precision: nothing to rewrite
    again = _qnn_ci(folder, "baseline", "update")
    assert again.returncode == 0 and again.stdout.strip().endswith(": unchanged"), again
    assert (folder / "qnn-baselines.yaml").read_text() == text
