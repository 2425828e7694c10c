"""The Action's scripts fed anything: the fork guard's event reader and decision (whatever
the payload, a decision -- 0 or 1 -- and single-line workflow commands, never an
exception) and the input splitting of `run` (an argv or the one-line `InputError`)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.gha import InputError, Unverifiable, fork_guard, pytest_argv, untrusted_source

KEYS = st.sampled_from(["pull_request", "head", "base", "repo", "full_name", "id", "fork",
                        "number", "issue", "comment", "workflow_run", "head_repository",
                        "repository", "name", "run_number"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
JSON = st.recursive(SCALARS, lambda c: st.lists(c, max_size=4)
                    | st.dictionaries(KEYS | st.text(max_size=8), c, max_size=5), max_leaves=30)
EVENT_NAMES = st.sampled_from(["pull_request", "pull_request_target", "issue_comment",
                               "workflow_run", "push", "pull_request_review_comment", ""])
RUNNERS = st.sampled_from(["self-hosted", "github-hosted", "", "other"])


@given(event_name=EVENT_NAMES, event=JSON)
def test_untrusted_source_decides_or_says_why_not(event_name: str, event: object) -> None:
    try:
        source = untrusted_source(event_name, event, {"GITHUB_REPOSITORY": "acme/models"})
    except Unverifiable as exc:
        assert str(exc)
    else:
        assert source is None or (isinstance(source, str) and source)


def _guard(payload: bytes, event_name: str, runner: str, allow: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "event.json"
        path.write_bytes(payload)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = fork_guard({"GITHUB_EVENT_PATH": str(path), "GITHUB_EVENT_NAME": event_name,
                               "RUNNER_ENVIRONMENT": runner, "QNN_CI_ALLOW_FORK_PRS": allow})
    return code, out.getvalue()


def _check(code: int, out: str, runner: str) -> None:
    assert code in (0, 1)
    lines = out.splitlines()
    assert all(line.startswith("::") for line in lines), out
    assert len([line for line in lines if line.startswith("::error")]) == code
    if runner == "github-hosted":
        assert (code, out) == (0, "")


@given(payload=st.binary(max_size=300), event_name=EVENT_NAMES, runner=RUNNERS,
       allow=st.sampled_from(["", "true"]))
def test_fork_guard_on_any_bytes(payload: bytes, event_name: str, runner: str,
                                 allow: str) -> None:
    code, out = _guard(payload, event_name, runner, allow)
    _check(code, out, runner)


@given(event=JSON, event_name=EVENT_NAMES, runner=RUNNERS, allow=st.sampled_from(["", "true"]))
def test_fork_guard_on_any_json(event: object, event_name: str, runner: str,
                                allow: str) -> None:
    code, out = _guard(json.dumps(event).encode(), event_name, runner, allow)
    _check(code, out, runner)


@given(manifests=st.text(max_size=40), pytest_args=st.text(max_size=40))
def test_run_inputs_split_or_name_the_input(manifests: str, pytest_args: str) -> None:
    try:
        argv = pytest_argv({"QNN_CI_MANIFESTS": manifests, "QNN_CI_PYTEST_ARGS": pytest_args})
    except InputError as exc:
        assert exc.input in ("manifests", "pytest-args")
        assert "\n" not in str(exc) and f"The {exc.input} input" in str(exc)
    else:
        assert argv[1:3] == ["-m", "pytest"] and all(isinstance(a, str) for a in argv)
