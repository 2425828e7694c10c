"""The action's fork guard, run as action.yml runs it (`python3 qnn_ci/gha.py fork-guard`,
before qnn-ci is installed) with the environment Actions sets and the event payloads in
tests/core/events/ (shapes from GitHub's webhook documentation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EVENTS = Path(__file__).resolve().parent / "events"
GUARD_ERROR = "::error title=qnn-ci fork guard::"


def guard(event_name: str, event: Path | str | None, runner: str | None = "self-hosted",
          **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CI": "true", "GITHUB_ACTIONS": "true",
           "GITHUB_REPOSITORY": "acme/models", "GITHUB_EVENT_NAME": event_name,
           "RUNNER_OS": "Linux", **extra}
    if event is not None:
        env["GITHUB_EVENT_PATH"] = str(event)
    if runner is not None:
        env["RUNNER_ENVIRONMENT"] = runner
    # -I: no site-packages, no script folder on sys.path -- the guard is stdlib only.
    return subprocess.run([sys.executable, "-I", str(ROOT / "qnn_ci/gha.py"), "fork-guard"],
                          env=env, capture_output=True, text=True, timeout=60)


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.stderr == "", proc.stderr          # never a traceback
    lines = proc.stdout.splitlines()
    assert all(line.startswith("::") for line in lines), proc.stdout
    return [line for line in lines if line.startswith("::error")]


REFUSED = [
    ("pull_request", "pull_request_fork.json", "pull request #7 from the fork someone/models"),
    ("pull_request_target", "pull_request_fork.json",
     "pull request #7 from the fork someone/models"),
    ("pull_request", "pull_request_deleted_fork.json", "pull request #9 from a deleted fork"),
    ("pull_request_target", "pull_request_deleted_fork.json",
     "pull request #9 from a deleted fork"),
    ("pull_request_review_comment", "pull_request_review_comment_fork.json",
     "pull request #11 from the fork someone/models"),
    ("issue_comment", "issue_comment_on_pull_request.json", "a comment on pull request #12"),
    ("workflow_run", "workflow_run_fork.json",
     "a run of the workflow 'qnn-ci pr', triggered from the fork someone/models"),
    ("workflow_run", "workflow_run_deleted_fork.json",
     "a run of the workflow 'qnn-ci pr', triggered from a deleted fork"),
]
ALLOWED = [
    ("pull_request", "pull_request_same_repo.json"),
    ("pull_request_target", "pull_request_same_repo.json"),
    ("pull_request", "pull_request_in_forked_repo.json"),   # the base repo is itself a fork
    ("issue_comment", "issue_comment_on_issue.json"),
    ("workflow_run", "workflow_run_same_repo.json"),
    ("push", "push.json"),
    ("schedule", "schedule.json"),
]


@pytest.mark.parametrize(("event_name", "payload", "what"), REFUSED)
@pytest.mark.parametrize("runner", ["self-hosted", None, "something-new"])
def test_fork_code_is_refused_on_self_hosted_runners(event_name: str, payload: str, what: str,
                                                     runner: str | None) -> None:
    proc = guard(event_name, EVENTS / payload, runner)
    assert proc.returncode == 1, proc.stdout
    (line,) = errors(proc)
    assert line.startswith(GUARD_ERROR + f"Refused {what}"), line
    assert f"(event {event_name})" in line and "QNN_CI_ALLOW_FORK_PRS=true" in line
    if runner != "self-hosted":     # unknown runner kind: fails closed, and says why
        assert f"RUNNER_ENVIRONMENT={runner or 'unset'}, treated as self-hosted" in line


@pytest.mark.parametrize(("event_name", "payload", "what"), REFUSED)
def test_hosted_runners_run_forks(event_name: str, payload: str, what: str) -> None:
    proc = guard(event_name, EVENTS / payload, "github-hosted")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.parametrize(("event_name", "payload"), ALLOWED)
def test_own_code_runs_on_self_hosted_runners(event_name: str, payload: str) -> None:
    proc = guard(event_name, EVENTS / payload, "self-hosted")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_the_runner_machine_can_allow_forks() -> None:
    """QNN_CI_ALLOW_FORK_PRS from the runner's own environment (its .env file)."""
    proc = guard("pull_request", EVENTS / "pull_request_fork.json",
                 QNN_CI_ALLOW_FORK_PRS="true", QNN_CI_ALLOW_FORK_PRS_FROM_WORKFLOW="")
    assert proc.returncode == 0, proc.stdout
    assert errors(proc) == []
    assert proc.stdout.startswith("::notice title=qnn-ci fork guard::Running pull request #7 "
                                  "from the fork someone/models")


def test_the_workflow_cannot_allow_forks() -> None:
    """A fork's pull request brings its own workflow file: its `env:` (seen through the
    `env` context, which action.yml passes on) and the old input never allow."""
    proc = guard("pull_request", EVENTS / "pull_request_fork.json",
                 QNN_CI_ALLOW_FORK_PRS="true", QNN_CI_ALLOW_FORK_PRS_FROM_WORKFLOW="true")
    assert proc.returncode == 1
    (line,) = errors(proc)
    assert line.startswith(GUARD_ERROR + "Refused pull request #7")
    assert "::warning title=qnn-ci fork guard::QNN_CI_ALLOW_FORK_PRS is set by the workflow" \
        in proc.stdout

    proc = guard("pull_request", EVENTS / "pull_request_fork.json",
                 QNN_CI_ALLOW_FORK_PRS_INPUT="true")
    assert proc.returncode == 1
    assert len(errors(proc)) == 1
    assert proc.stdout.startswith("::warning title=qnn-ci fork guard::The allow-fork-prs input "
                                  "is deprecated and ignored")


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("missing.json", None, "cannot read the event payload"),
    ("truncated.json", b'{"pull_request": {"head": ', "is not valid JSON"),
    ("latin1.json", b'{"repository": "caf\xe9"}', "is not valid JSON"),
    ("deep.json", b"[" * 200_000 + b"]" * 200_000, "is not valid JSON"),
    ("list.json", b"[]", "the payload is not a JSON object"),
    ("no_pr.json", b'{"action": "opened"}', "the payload has no pull_request object"),
    ("no_head_repo.json", b'{"pull_request": {"number": 3, "head": {"ref": "x"}}}',
     "the payload has no pull_request.head.repo"),
])
def test_an_unreadable_event_fails_closed(tmp_path: Path, name: str, content: bytes | None,
                                          reason: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    proc = guard("pull_request", path, "self-hosted")
    assert proc.returncode == 1, proc.stdout
    (line,) = errors(proc)
    assert line.startswith(GUARD_ERROR + "Cannot check the pull_request event on this "
                           "self-hosted runner: ")
    assert reason in line
    assert proc.stdout.count("\n") == 1      # one line, whatever the bytes
    # A hosted runner has nothing to protect: it does not even read the file.
    assert guard("pull_request", path, "github-hosted").returncode == 0


def test_a_missing_event_path_fails_closed(tmp_path: Path) -> None:
    proc = guard("pull_request", None, None)
    assert proc.returncode == 1
    (line,) = errors(proc)
    assert line.startswith(GUARD_ERROR + "Cannot check the pull_request event on this runner "
                           "(RUNNER_ENVIRONMENT=unset, treated as self-hosted): "
                           "GITHUB_EVENT_PATH is not set.")
    assert guard("pull_request", tmp_path, "self-hosted").returncode == 1   # a folder


def test_action_yml_feeds_the_guard_from_trusted_places() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    first = action["runs"]["steps"][0]
    assert first["run"] == 'python3 "$GITHUB_ACTION_PATH/qnn_ci/gha.py" fork-guard'
    # The step must not set QNN_CI_ALLOW_FORK_PRS itself: that would hide the runner
    # machine's value. What the workflow set reaches the guard under another name.
    assert first["env"] == {
        "QNN_CI_ALLOW_FORK_PRS_INPUT": "${{ inputs.allow-fork-prs }}",
        "QNN_CI_ALLOW_FORK_PRS_FROM_WORKFLOW": "${{ env.QNN_CI_ALLOW_FORK_PRS }}"}
    # The runner refuses to load a composite action that mentions the vars context.
    assert "vars." not in json.dumps(action)
