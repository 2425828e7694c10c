"""JUnit XML for `qnn-ci run` (testcases are ``qnn_ci.report.junit_case.TestCase``,
written as text by ``qnn_ci.report.junit_xml``).

Each (export, stage) is a testcase named like the pytest node id; the numbers
go in as <properties> (valid under the xunit1 / "legacy" family). Each testcase
is serialised once; the file is replaced atomically as the run goes (at most every
``JUnitWriter.interval_s``, before a stage starts running, at the end, and when the
run stops early), so an interrupted or crashing run still leaves a valid report
of what ran. A stage that crashed (a bug in qnn-ci) is an
``<error type="internal-error">`` with its traceback, as is the
``qnn-ci::internal-error`` testcase of a run that crashed.

The testsuite's properties say when and from what the run was made: ``qnn.date``
(UTC, ISO 8601, when the run started) and, when the manifest is in a git work tree,
``qnn.commit`` (HEAD), ``qnn.commit.short`` (``+dirty`` with uncommitted changes to
tracked files) and ``qnn.dirty``; ``qnn-ci history add`` records them.

A testcase's ``time`` is this run's: a stage read from the cache takes the
read's time (near zero), with ``qnn.cached`` = true and the run that made it
as ``qnn.original_duration_s`` (``qnn_ci.engine.pipeline`` sets both).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.internal_error import TESTCASE, describe
from qnn_ci.engine.results import StageResult
from qnn_ci.errors import UserError
from qnn_ci.report.junit_xml import (
    Line,
    quoteattr,
    result_line,
    result_problem,
    result_properties,
    with_log,
    xml_text,
)

if TYPE_CHECKING:
    from qnn_ci.report.junit_case import TestCase


def testcase(manifest: Path, export: str, line: int, result: StageResult) -> TestCase:
    """The testcase of one (export, stage) result (``result_line`` writes the same text
    without it)."""
    from qnn_ci.report.junit_case import TestCase

    tc = TestCase(name=f"{export}::{result.stage}", classname=f"{manifest.name}.{export}",
                  elapsed_sec=result.duration_s, file=str(manifest), line=line,
                  stdout=result.summary or None, properties=result_properties(result))
    problem = result_problem(result)
    if problem is None:
        return tc
    tag, kind, message, output = problem
    if tag == "skipped":
        tc.add_skipped_info(message=message)
    elif tag == "failure":
        tc.add_failure_info(message=message, output=output)
    else:
        tc.add_error_info(message=message, output=output, error_type=kind)
    return tc


def internal_error_case(exc: BaseException, log: Path | None) -> TestCase:
    """The testcase that reports a crash of the run itself (``qnn-ci::internal-error``)."""
    where = f"traceback in {log}" if log else "traceback could not be saved"
    message = f"internal error: {describe(exc)} ({where}; please report it)"
    from qnn_ci.report.junit_case import TestCase

    tc = TestCase(name=TESTCASE, classname="qnn-ci")
    tc.add_error_info(message=message, output=with_log(message, log),
                      error_type="internal-error")
    return tc


def run_date(at: float | None = None) -> str:
    """Now (or the epoch time ``at``), UTC, ISO 8601 to the second
    (``2026-12-01T02:00:00Z``): ``qnn.date``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def git_state(folder: Path) -> dict[str, str]:
    """The ``qnn.commit`` properties of the git work tree holding ``folder``: the full
    commit of HEAD, ``qnn.commit.short`` (``3f2c1ab``, ``+dirty`` when a tracked file
    differs from it) and ``qnn.dirty`` = true then. One ``git status`` (which reads HEAD
    and the changes at once); ``{}`` outside git, without git, or on any failure."""
    import subprocess

    from qnn_ci.engine.relocate import git_top

    try:
        outside = not os.environ.get("GIT_DIR") and git_top(folder) is None
    except (OSError, RuntimeError, ValueError):
        outside = False    # cannot tell: let git say
    if outside:
        return {}      # no .git above: no process to start
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(folder), "status", "--porcelain=v2",
             "--branch", "--untracked-files=no", "--ignore-submodules=all"],
            capture_output=True, text=True, errors="replace", timeout=20, check=False,
            stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    if done.returncode != 0:
        return {}
    commit, dirty = "", False
    for line in done.stdout.splitlines():
        if line.startswith("# branch.oid "):
            commit = line.split()[-1]
        elif line and not line.startswith("#"):
            dirty = True
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):   # "(initial)": no commit yet
        return {}
    short = commit[:7] + ("+dirty" if dirty else "")
    return {"qnn.commit": commit, "qnn.commit.short": short} | (
        {"qnn.dirty": "true"} if dirty else {})


def run_properties(folder: Path | None, date: str | None = None) -> dict[str, str]:
    """The run's suite properties: ``qnn.date`` (``date`` or now) and, when ``folder``
    is in a git work tree, its commit (``git_state``)."""
    return {"qnn.date": date or run_date()} | (git_state(folder) if folder else {})


def add_to_pytest_junit(config: Any, folder: Path | None, date: str | None = None) -> bool:
    """Put ``run_properties(folder, date)`` into the JUnit report pytest writes
    (``--junitxml``) as testsuite properties; False when there is none."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return False
    for name, value in run_properties(folder, date).items():
        xml.add_global_property(name, value)
    return True


class JUnitWriter:
    """The report of one run, whole on disk at every moment.

    Each testcase is serialised once, when added (``add`` a ``TestCase``, or
    ``add_result`` a stage's result straight to text); a write joins the texts
    between a fresh head (the counters) and tail, and replaces the file atomically.
    Adding writes at most every ``interval_s`` seconds (a cached run adds a thousand
    cases a second; rewriting after each one is quadratic); ``flush`` writes whatever
    is pending -- call it before a stage that takes a while starts and at the end of
    the run. ``write`` always writes (also the interrupted / internal-error reports).
    A run killed outright (SIGKILL) leaves the last written report: whole, at most
    ``interval_s`` behind.
    """

    def __init__(self, path: Path, suite_name: str = "qnn-ci", *,
                 interval_s: float = 0.25, git: bool = True) -> None:
        self.path = path
        self.suite_name = suite_name
        self.interval_s = interval_s
        # The run's date (when it started) and, once a case names its manifest, the
        # commit of the manifest's git work tree: one git call per run, at most.
        self.run: dict[str, str] = {"qnn.date": run_date()}
        self._git = git
        self.lines: list[Line] = []
        self._pending = False
        self._last = 0.0
        self.write()

    def add(self, case: TestCase) -> None:
        self._added(case.file, Line.of_case(case))

    def add_result(self, manifest: Path, export: str, line: int, result: StageResult) -> None:
        """Add ``testcase(manifest, export, line, result)``, without making it."""
        self._added(manifest, result_line(manifest, export, line, result))

    def replace(self, cases: Iterable[TestCase]) -> None:
        """Make ``cases`` the report's testcases (a run that stopped early lists what
        ran and what did not); written by the next ``write``."""
        self.lines = [Line.of_case(c) for c in cases]
        self._pending = True

    def _added(self, file: str | Path | None, line: Line) -> None:
        if self._git and file:
            self._git = False
            self.run |= git_state(Path(os.path.abspath(file)).parent)
        self.lines.append(line)
        self._pending = True
        if time.monotonic() - self._last >= self.interval_s:
            self.write()

    def flush(self) -> None:
        """Write the report if a case was added since the last write."""
        if self._pending:
            self.write()

    def render(self, *, interrupted: str | None = None,
               internal_error: str | None = None) -> str:
        """The whole report as text (see ``write``)."""
        cases = self.lines
        counts = dict.fromkeys(("error", "failure", "skipped", ""), 0)
        for s in cases:
            counts[s.kind] += 1
        total = round(sum([s.elapsed for s in cases]), 6)
        common = (f'disabled="0" errors="{counts["error"]}" failures="{counts["failure"]}"')
        head = [
            '<?xml version="1.0" encoding="utf-8"?>',
            f'<testsuites {common} tests="{len(cases)}" time="{total}">',
            f'  <testsuite {common} name={quoteattr(xml_text(self.suite_name))} '
            f'skipped="{counts["skipped"]}" tests="{len(cases)}" time="{total}">',
        ]
        props = dict(self.run)
        if interrupted:
            props["qnn.interrupted"] = interrupted
        if internal_error:
            props["qnn.internal_error"] = internal_error
        if props:
            head.append("    <properties>")
            head += [f"      <property name={quoteattr(xml_text(k))} "
                     f"value={quoteattr(xml_text(v))} />" for k, v in props.items()]
            head.append("    </properties>")
        body = "".join([s.text for s in cases])
        return "\n".join(head) + "\n" + body + "  </testsuite>\n</testsuites>\n"

    def write(self, *, interrupted: str | None = None,
              internal_error: str | None = None) -> None:
        """Write the whole report atomically: a reader (or a second signal) sees the
        previous report or this one, never a mix. ``interrupted`` (the reason) and
        ``internal_error`` (the traceback's log file) become suite properties."""
        xml = self.render(interrupted=interrupted, internal_error=internal_error)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(xml, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            _discard(tmp)
            raise UserError(f"cannot write the JUnit report: {exc.strerror or exc} "
                            f"({exc.filename})", file=self.path, key="--junit") from None
        except BaseException:   # interrupted half-way: leave no temporary file behind
            _discard(tmp)
            raise
        self._pending = False
        self._last = time.monotonic()


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
