"""The GitHub Action's scripts (`action.yml` runs ``python -m qnn_ci.gha ...``).

Inputs arrive as environment variables set through the action's ``env:`` blocks
(never pasted into ``run:`` text, which is how script injection happens):

- ``fork-guard``: on a self-hosted runner, refuse a pull request from a fork unless
  ``QNN_CI_ALLOW_FORK_PRS`` is true — a fork's code would run on the machine that
  holds the board and the SDK.
- ``run``: build and run the pytest command, then write counts to ``$GITHUB_OUTPUT``.

Standard library only: ``fork-guard`` runs before qnn-ci is installed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def fork_pr(event: dict) -> str | None:
    """The fork's name when the event is a pull request from a fork, else None."""
    pr = event.get("pull_request")
    if not isinstance(pr, dict):
        return None
    head = (pr.get("head") or {}).get("repo") or {}
    base = (pr.get("base") or {}).get("repo") or {}
    if head.get("fork") or (head.get("full_name") and base.get("full_name")
                            and head["full_name"] != base["full_name"]):
        return str(head.get("full_name") or "a fork")
    return None


def fork_guard(environ: dict[str, str]) -> int:
    if environ.get("RUNNER_ENVIRONMENT", "") != "self-hosted":
        return 0
    event_path = environ.get("GITHUB_EVENT_PATH")
    if not event_path or not Path(event_path).is_file():
        return 0
    event = json.loads(Path(event_path).read_text("utf-8"))
    fork = fork_pr(event)
    if fork is None or _truthy(environ.get("QNN_CI_ALLOW_FORK_PRS")):
        return 0
    print(f"::error title=qnn-ci refused a fork pull request::This pull request comes from "
          f"{fork} and this job runs on a self-hosted runner. A fork's code would run on the "
          "machine that holds the board and the QAIRT SDK. Run the hosted-runner checks for "
          "forks, or set `allow-fork-prs: true` if you accept that risk.")
    return 1


def pytest_argv(environ: dict[str, str]) -> list[str]:
    manifests = shlex.split(environ.get("QNN_CI_MANIFESTS", "") or "qnn-ci.yaml")
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
    argv += shlex.split(environ.get("QNN_CI_PYTEST_ARGS", ""))
    return argv


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


def run(environ: dict[str, str]) -> int:
    env = dict(environ)
    if environ.get("QNN_CI_ESDK_ENV"):
        env["ESDK_ENV"] = environ["QNN_CI_ESDK_ENV"]
    argv = pytest_argv(environ)
    print("::group::pytest " + shlex.join(argv[1:]), flush=True)
    code = subprocess.call(argv, env=env)
    print("::endgroup::", flush=True)
    junit = Path(environ.get("QNN_CI_JUNIT", "qnn-ci-junit.xml"))
    counts = junit_counts(junit)
    out = environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(f"junit-path={junit.resolve()}\n")
            for key in ("passed", "failures", "errors", "skipped", "tests"):
                fh.write(f"{key}={counts.get(key, 0)}\n")
            fh.write(f"exit-code={code}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["fork-guard"]:
        return fork_guard(dict(os.environ))
    if args == ["run"]:
        return run(dict(os.environ))
    print("usage: python -m qnn_ci.gha {fork-guard|run}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
