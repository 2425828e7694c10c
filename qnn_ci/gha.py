"""The GitHub Action's scripts (`action.yml` runs ``python -m qnn_ci.gha ...``).

Inputs arrive as environment variables set through the action's ``env:`` blocks
(never pasted into ``run:`` text, which is how script injection happens):

- ``fork-guard``: on a self-hosted runner (or one that cannot be told apart from
  one), refuse an event that would run a fork's code -- see :func:`untrusted_source`
  -- unless the runner machine itself allows it (``QNN_CI_ALLOW_FORK_PRS`` in the
  runner's environment, e.g. its ``.env`` file). A fork's code would run on the
  machine that holds the board and the SDK.
- ``install``: choose the interpreter the checks run in (the ``python`` input: an
  existing interpreter or virtual environment with the user's project; else a fresh
  venv of the action's own) and install, in ONE pip call so one resolver sees it all,
  qnn-ci with its extras, the ``requirements`` files and the ``install`` arguments
  (``-e .[dev]``: the user's own project, which a calibration generator may import).
  Writes ``python=<interpreter>`` to ``$GITHUB_OUTPUT`` for the ``run`` step.
- ``run``: build and run the pytest command, then write counts to ``$GITHUB_OUTPUT``.

Standard library only: ``fork-guard`` and ``install`` run as plain scripts before
qnn-ci is installed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# `run`'s exit status when an input cannot be used and pytest never ran: EX_USAGE from
# sysexits.h, outside pytest's own 0-5. action.yml's last step tests for this number.
INPUT_ERROR = 64

GUARD_TITLE = "qnn-ci fork guard"
ALLOW_VAR = "QNN_CI_ALLOW_FORK_PRS"
# action.yml passes `${{ env.QNN_CI_ALLOW_FORK_PRS }}` here: the `env` context holds only
# what the workflow (job, step, $GITHUB_ENV) set, never the runner machine's environment.
WORKFLOW_ALLOW_VAR = "QNN_CI_ALLOW_FORK_PRS_FROM_WORKFLOW"
# The deprecated `allow-fork-prs` input: a fork's pull request brings its own workflow
# file, so it could set this; it never allows anything.
INPUT_ALLOW_VAR = "QNN_CI_ALLOW_FORK_PRS_INPUT"

# Events whose payload carries the pull request (`pull_request` key) and whose code
# may come from the head repository.
PR_EVENTS = frozenset({"pull_request", "pull_request_target", "pull_request_review",
                       "pull_request_review_comment"})


class InputError(Exception):
    """An action input that cannot be used; ``input`` names it as the workflow spells it."""

    def __init__(self, input_name: str, message: str) -> None:
        super().__init__(message)
        self.input = input_name


class Unverifiable(Exception):
    """The event payload cannot show where the code comes from."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _escape(text: str) -> str:
    """Workflow-command message escaping (`%`, CR, LF), so a payload value is one line."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _command(kind: str, message: str) -> None:
    print(f"::{kind} title={GUARD_TITLE}::{_escape(message)}", flush=True)


def _name(repo: object, where: str) -> str:
    if not isinstance(repo, dict) or not isinstance(repo.get("full_name"), str) \
            or not repo["full_name"]:
        raise Unverifiable(f"the payload has no {where}.full_name")
    return str(repo["full_name"])


def _same_repo(head: dict, base: dict, where: str) -> bool:
    if type(head.get("id")) is int and type(base.get("id")) is int:
        return bool(head["id"] == base["id"])
    return _name(head, where).casefold() == _name(base, "base repository").casefold()


def _base_repo(event: dict, environ: dict[str, str]) -> dict:
    repo = event.get("repository")
    if isinstance(repo, dict) and repo.get("full_name"):
        return repo
    if environ.get("GITHUB_REPOSITORY"):
        return {"full_name": environ["GITHUB_REPOSITORY"]}
    raise Unverifiable("the payload names no repository and GITHUB_REPOSITORY is unset")


def _pull_request_source(pr: object, event: dict, environ: dict[str, str]) -> str | None:
    if not isinstance(pr, dict):
        raise Unverifiable("the payload has no pull_request object")
    number = pr.get("number", event.get("number", "?"))
    head = pr.get("head")
    if not isinstance(head, dict) or "repo" not in head:
        raise Unverifiable("the payload has no pull_request.head.repo")
    if head["repo"] is None:
        return f"pull request #{number} from a deleted fork"
    if not isinstance(head["repo"], dict):
        raise Unverifiable("pull_request.head.repo is not an object")
    base = pr.get("base")
    base = base.get("repo") if isinstance(base, dict) else None
    if not isinstance(base, dict):
        base = _base_repo(event, environ)
    if _same_repo(head["repo"], base, "pull_request.head.repo"):
        return None
    return f"pull request #{number} from the fork {_name(head['repo'], 'head repository')}"


def _comment_source(event: dict) -> str | None:
    issue = event.get("issue")
    if not isinstance(issue, dict):
        raise Unverifiable("the payload has no issue object")
    if not issue.get("pull_request"):
        return None     # a comment on a plain issue runs the default branch's code
    # The payload does not name the pull request's head repository, and a workflow
    # that reacts to a comment usually checks the pull request out.
    return (f"a comment on pull request #{issue.get('number', '?')}, whose head repository "
            "the event does not show")


def _workflow_run_source(event: dict, environ: dict[str, str]) -> str | None:
    run = event.get("workflow_run")
    if not isinstance(run, dict) or "head_repository" not in run:
        raise Unverifiable("the payload has no workflow_run.head_repository")
    head = run["head_repository"]
    name = run.get("name")
    what = f"a run of the workflow {name!r}" if isinstance(name, str) else "a workflow run"
    if head is None:
        return f"{what}, triggered from a deleted fork"
    if not isinstance(head, dict):
        raise Unverifiable("workflow_run.head_repository is not an object")
    if _same_repo(head, _base_repo(event, environ), "workflow_run.head_repository"):
        return None
    return f"{what}, triggered from the fork {_name(head, 'workflow_run.head_repository')}"


def untrusted_source(event_name: str, event: object, environ: dict[str, str]) -> str | None:
    """Describe where a fork's code comes into this run, or None when it does not.

    Raises :class:`Unverifiable` when the payload cannot tell (the caller fails closed).
    """
    if not isinstance(event, dict):
        raise Unverifiable("the payload is not a JSON object")
    if event_name in PR_EVENTS or "pull_request" in event:
        return _pull_request_source(event.get("pull_request"), event, environ)
    if event_name == "issue_comment" or (isinstance(event.get("issue"), dict)
                                         and "comment" in event):
        return _comment_source(event)
    if event_name == "workflow_run" or "workflow_run" in event:
        return _workflow_run_source(event, environ)
    return None


def read_event(path: str | None) -> object:
    """The event payload; :class:`Unverifiable` with the reason when it cannot be read."""
    if not path:
        raise Unverifiable("GITHUB_EVENT_PATH is not set")
    try:
        return json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise Unverifiable(f"cannot read the event payload {path}: "
                           f"{exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:   # JSONDecodeError and UnicodeDecodeError
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise Unverifiable(f"the event payload {path} is not valid JSON: {reason}") from None


def fork_guard(environ: dict[str, str]) -> int:
    if _truthy(environ.get(INPUT_ALLOW_VAR)):
        _command("warning", f"The allow-fork-prs input is deprecated and ignored: a fork's pull "
                 f"request supplies its own workflow file, so it could set it. To accept fork "
                 f"pull requests on a self-hosted runner, set {ALLOW_VAR}=true in the runner "
                 "machine's environment (the runner's .env file).")
    runner = environ.get("RUNNER_ENVIRONMENT", "")
    if runner == "github-hosted":
        return 0
    event_name = environ.get("GITHUB_EVENT_NAME", "") or "unknown"
    unverifiable = ""
    try:
        source = untrusted_source(event_name, read_event(environ.get("GITHUB_EVENT_PATH")),
                                  environ)
    except Unverifiable as exc:
        source, unverifiable = f"an event that cannot be checked ({exc})", str(exc)
    if source is None:
        return 0
    from_workflow = (environ.get(WORKFLOW_ALLOW_VAR) or "").strip()
    if _truthy(environ.get(ALLOW_VAR)) and not from_workflow:
        _command("notice", f"Running {source} on this self-hosted runner: {ALLOW_VAR} is set "
                 "in the runner machine's environment.")
        return 0
    if from_workflow:
        _command("warning", f"{ALLOW_VAR} is set by the workflow (env: or $GITHUB_ENV), which a "
                 "fork's pull request can edit, so it is ignored; set it in the runner "
                 "machine's environment (the runner's .env file) instead.")
    where = ("this self-hosted runner" if runner == "self-hosted" else
             f"this runner (RUNNER_ENVIRONMENT={runner or 'unset'}, treated as self-hosted)")
    allow = (f"set {ALLOW_VAR}=true in the runner machine's environment (the runner's .env "
             "file) if you accept that risk.")
    if unverifiable:
        _command("error", f"Cannot check the {event_name} event on {where}: {unverifiable}. "
                 "Refusing to run, since a fork's code could reach the machine that holds the "
                 f"board and the QAIRT SDK; {allow}")
    else:
        _command("error", f"Refused {source} (event {event_name}) on {where}: a fork's code "
                 "would run on the machine that holds the board and the QAIRT SDK. Run fork "
                 f"pull requests on GitHub-hosted runners, or {allow}")
    return 1


def _split(environ: dict[str, str], var: str, input_name: str) -> list[str]:
    try:
        return shlex.split(environ.get(var, ""))
    except ValueError as exc:
        raise InputError(input_name, f"The {input_name} input cannot be split into arguments "
                         f"({exc}): it is split like a shell command line, so balance its "
                         """quotes, e.g. -k "a or b".""") from None


def pytest_argv(environ: dict[str, str]) -> list[str]:
    manifests = _split(environ, "QNN_CI_MANIFESTS", "manifests") or ["qnn-ci.yaml"]
    # Collect the default names in folders, plus every file named explicitly (a
    # qnn-boards.yaml next to a manifest is not a manifest).
    names = ["qnn-ci.yaml", "qnn-ci.yml"]
    names += [Path(m).name for m in manifests
              if Path(m).suffix in (".yaml", ".yml") and Path(m).name not in names]
    argv = [sys.executable, "-m", "pytest", *manifests, "-p", "qnn_ci", "-rs",
            "-o", "junit_family=xunit1", "-o", "qnn_manifests=" + "\n".join(names),
            f"--junitxml={environ.get('QNN_CI_JUNIT', 'qnn-ci-junit.xml')}"]
    marker = environ.get("QNN_CI_MARKERS", "qnn")
    if marker:
        argv += ["-m", marker]
    for opt, var in (("--qnn-sdk-root", "QNN_CI_SDK_ROOT"), ("--qnn-workdir", "QNN_CI_WORKDIR"),
                     ("--qnn-board", "QNN_CI_BOARD"),
                     ("--qnn-boards-file", "QNN_CI_BOARDS_FILE")):
        if environ.get(var):
            argv.append(f"{opt}={environ[var]}")
    if environ.get("QNN_CI_HTML"):
        argv.append(f"--qnn-html={environ['QNN_CI_HTML']}")
    since = changed_since(environ)
    if since:
        argv.append(f"--qnn-changed-since={since}")
    argv += _split(environ, "QNN_CI_PYTEST_ARGS", "pytest-args")
    return argv


PR_EVENTS = ("pull_request", "pull_request_target")


def changed_since(environ: dict[str, str]) -> str | None:
    """The revision for ``--qnn-changed-since``: the ``changed-since`` input, else the
    pull request's base commit on pull_request events; None runs every export."""
    given = environ.get("QNN_CI_CHANGED_SINCE", "").strip()
    if given.lower() == "all":
        return None
    if given:
        if given.startswith("-") or any(c.isspace() for c in given):
            raise InputError("changed-since", f"The changed-since input {given!r} is not a "
                             "git revision; give a branch, tag or commit, or all")
        return given
    if environ.get("GITHUB_EVENT_NAME") not in PR_EVENTS:
        return None
    try:
        event = read_event(environ.get("GITHUB_EVENT_PATH"))
    except Unverifiable as exc:
        _command("warning", f"changed-since: {exc}; running every export")
        return None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    base = pr.get("base") if isinstance(pr, dict) else None
    sha = base.get("sha") if isinstance(base, dict) else None
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):
        _command("warning", "changed-since: no base commit in the pull request event; "
                 "running every export")
        return None
    ensure_commit(sha, environ)
    return sha


def ensure_commit(sha: str, environ: dict[str, str]) -> None:
    """Fetch ``sha`` (its tree is all the diff needs) when a shallow checkout lacks it."""
    cwd = environ.get("GITHUB_WORKSPACE") or None
    have = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=cwd,
                          capture_output=True, check=False)
    if have.returncode == 0:
        return
    print(f"::group::git fetch the pull request's base commit {sha[:12]}", flush=True)
    done = subprocess.run(["git", "fetch", "--no-tags", "--depth=1", "origin", sha], cwd=cwd,
                          check=False)
    print("::endgroup::", flush=True)
    if done.returncode != 0:
        _command("warning", f"changed-since: could not fetch the base commit {sha[:12]}; "
                 "qnn-ci will say so and stop (set changed-since: all to run everything)")


def junit_counts(path: Path) -> dict[str, int]:
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for suite in root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0) or 0)
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def _write_outputs(environ: dict[str, str], lines: list[str]) -> None:
    out = environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.writelines(line + "\n" for line in lines)


def _summary_line(environ: dict[str, str], text: str) -> None:
    path = environ.get("GITHUB_STEP_SUMMARY")
    if path:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            pass


def copy_summary(environ: dict[str, str]) -> Path | None:
    """This step's job summary, copied where a later step or job (a PR comment) can read
    it: ``<workdir>/qnn-ci-summary.md``, uploaded with the work folder. None when
    there is no summary."""
    src = environ.get("GITHUB_STEP_SUMMARY")
    if not src or not Path(src).is_file():
        return None
    dst = Path(environ.get("QNN_CI_WORKDIR") or ".qnn-ci") / "qnn-ci-summary.md"
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        text = Path(src).read_text("utf-8", errors="replace")
        dst.write_text(text[:60000] + ("\n\n(cut: see the job summary)\n"
                                       if len(text) > 60000 else ""), "utf-8")
    except OSError:
        return None
    return dst.resolve()


def run(environ: dict[str, str]) -> int:
    env = dict(environ)
    if environ.get("QNN_CI_ESDK_ENV"):
        env["ESDK_ENV"] = environ["QNN_CI_ESDK_ENV"]
    try:
        argv = pytest_argv(environ)
    except InputError as exc:
        print(f"::error title=qnn-ci input {exc.input}::{_escape(str(exc))}", flush=True)
        _write_outputs(environ, [f"exit-code={INPUT_ERROR}"])
        return INPUT_ERROR
    print("::group::pytest " + shlex.join(argv[1:]), flush=True)
    code = subprocess.call(argv, env=env)
    print("::endgroup::", flush=True)
    junit = Path(environ.get("QNN_CI_JUNIT", "qnn-ci-junit.xml"))
    counts = junit_counts(junit)
    html = Path(environ["QNN_CI_HTML"]) if environ.get("QNN_CI_HTML") else None
    if html is not None and html.is_file():
        _summary_line(environ, f"\nHTML report: `{html}` (in this job's qnn-ci artifact)\n")
    summary = copy_summary(environ)
    _write_outputs(environ, [f"junit-path={junit.resolve()}",
                             *([f"summary-path={summary}"] if summary else []),
                             *([f"html-report={html.resolve()}"]
                               if html is not None and html.is_file() else []),
                             *(f"{key}={counts.get(key, 0)}"
                               for key in ("passed", "failures", "errors", "skipped", "tests")),
                             f"exit-code={code}"])
    return code


def interpreter(environ: dict[str, str]) -> Path | None:
    """The ``python`` input as an interpreter: a file, or a virtual environment's
    folder (its ``bin/python``); None when the input is empty."""
    given = environ.get("QNN_CI_PYTHON", "").strip()
    if not given:
        return None
    path = Path(given).expanduser()
    if not path.is_absolute():
        path = Path(environ.get("GITHUB_WORKSPACE") or ".") / path
    if path.is_dir():
        path = path / "bin" / "python"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise InputError("python", f"The python input {given!r} is not an interpreter or "
                         "a virtual environment (no executable bin/python there); give the "
                         "path of one, or leave it empty for the action's own venv")
    return path


def install_argv(environ: dict[str, str], python: Path) -> list[str]:
    """One pip call: qnn-ci (the action's own source) with its extras, the
    ``requirements`` files, the ``install`` arguments."""
    action = environ.get("QNN_CI_ACTION_PATH") or str(Path(__file__).resolve().parents[1])
    extras = environ.get("QNN_CI_EXTRAS", "").strip()
    if extras and not re.fullmatch(r"[A-Za-z0-9_-]+(\s*,\s*[A-Za-z0-9_-]+)*", extras):
        raise InputError("extras", f"The extras input {extras!r} is not a comma-separated "
                         "list of extra names (e.g. sim,report)")
    spec = f"{action}[{extras.replace(' ', '')}]" if extras else action
    argv = [str(python), "-m", "pip", "install", "--quiet", spec]
    workspace = Path(environ.get("GITHUB_WORKSPACE") or ".")
    for name in _split(environ, "QNN_CI_REQUIREMENTS", "requirements"):
        if not (workspace / name).is_file():
            raise InputError("requirements", f"The requirements input names {name}, which "
                             f"is not a file in {workspace}")
        argv += ["-r", name]
    return argv + _split(environ, "QNN_CI_INSTALL", "install")


def install(environ: dict[str, str]) -> int:
    try:
        python = interpreter(environ)
        if python is None:
            venv = Path(environ.get("RUNNER_TEMP") or ".") / "qnn-ci-venv"
            print(f"::group::python -m venv {venv}", flush=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            print("::endgroup::", flush=True)
            python = venv / "bin" / "python"
        argv = install_argv(environ, python)
    except InputError as exc:
        print(f"::error title=qnn-ci input {exc.input}::{_escape(str(exc))}", flush=True)
        return INPUT_ERROR
    print("::group::" + shlex.join(argv[1:]), flush=True)
    code = subprocess.call(argv, cwd=environ.get("GITHUB_WORKSPACE") or None)
    print("::endgroup::", flush=True)
    if code != 0:
        _command("error", f"pip could not install qnn-ci with your project (exit {code}): "
                 "see the install log above; check the install and requirements inputs")
        return code
    _write_outputs(environ, [f"python={python}"])
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["fork-guard"]:
        return fork_guard(dict(os.environ))
    if args == ["install"]:
        return install(dict(os.environ))
    if args == ["run"]:
        return run(dict(os.environ))
    print("usage: python -m qnn_ci.gha {fork-guard|install|run}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
