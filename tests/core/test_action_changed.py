"""The Action's changed-since input: the pull request's base commit by default
(fetched into a shallow checkout), "all" elsewhere, bad revisions refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from qnn_ci.gha import InputError, changed_since, pytest_argv


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def shallow(tmp_path: Path) -> tuple[Path, str]:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    git(origin, "config", "user.email", "ci@example.com")
    git(origin, "config", "user.name", "ci")
    (origin / "a.txt").write_text("1")
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "base")
    base = git(origin, "rev-parse", "HEAD")
    (origin / "a.txt").write_text("2")
    git(origin, "commit", "-qam", "head")
    git(origin, "config", "uploadpack.allowReachableSHA1InWant", "true")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth=1", f"file://{origin}", str(clone)],
                   check=True)
    return clone, base


def _event(tmp_path: Path, payload: object) -> str:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    return str(path)


def test_pull_request_base_is_fetched_and_used(shallow: tuple[Path, str], tmp_path: Path
                                               ) -> None:
    clone, base = shallow
    have = subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{base}^{{commit}}"],
                          capture_output=True, check=False)
    assert have.returncode != 0            # the shallow checkout lacks it
    env = {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_WORKSPACE": str(clone),
           "GITHUB_EVENT_PATH": _event(tmp_path, {"pull_request": {"base": {"sha": base}}})}
    assert changed_since(env) == base
    git(clone, "cat-file", "-e", f"{base}^{{commit}}")     # fetched
    assert f"--qnn-changed-since={base}" in pytest_argv(env)


def test_push_runs_everything_and_all_means_all(tmp_path: Path) -> None:
    assert changed_since({"GITHUB_EVENT_NAME": "push"}) is None
    env = {"GITHUB_EVENT_NAME": "pull_request", "QNN_CI_CHANGED_SINCE": "all"}
    assert changed_since(env) is None
    assert not any(a.startswith("--qnn-changed-since") for a in pytest_argv(env))


def test_explicit_revision_is_passed_and_option_like_refused() -> None:
    assert changed_since({"QNN_CI_CHANGED_SINCE": "origin/main"}) == "origin/main"
    with pytest.raises(InputError):
        changed_since({"QNN_CI_CHANGED_SINCE": "--upload-pack=touch /tmp/x"})


def test_unreadable_event_runs_everything(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    env = {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(tmp_path / "none")}
    assert changed_since(env) is None
    assert "::warning" in capsys.readouterr().out


def test_summary_is_copied_into_the_work_folder(tmp_path: Path) -> None:
    from qnn_ci.gha import copy_summary

    summary = tmp_path / "step-summary.md"
    summary.write_text("## changed exports\n\n- **det**: model changed\n")
    work = tmp_path / "work"
    got = copy_summary({"GITHUB_STEP_SUMMARY": str(summary), "QNN_CI_WORKDIR": str(work)})
    assert got == (work / "qnn-ci-summary.md").resolve()
    assert got.read_text().startswith("## changed exports")
    assert copy_summary({"QNN_CI_WORKDIR": str(work)}) is None
