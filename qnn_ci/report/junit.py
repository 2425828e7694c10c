"""JUnit XML for `qnn-ci run` (testcases are ``qnn_ci.report.junit_case.TestCase``).

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
as ``qnn.original_duration_s`` (``qnn_ci.pipeline`` sets both).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.internal_error import TESTCASE, crash_log, describe
from qnn_ci.report.junit_case import TestCase
from qnn_ci.report.property_text import property_value
from qnn_ci.results import StageResult, Status

_ATTR_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
                                "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def quoteattr(value: str) -> str:
    """``value`` as a double-quoted XML attribute (what ``xml.sax.saxutils.quoteattr``
    gives, always with double quotes; that module costs ~20 ms of imports), every
    character XML cannot hold replaced first (``xml_text``)."""
    if not (value.isascii() and value.isprintable()):   # printable: no line breaks
        value = xml_text(value)
    elif _MARKUP.search(value) is None:                  # the common case: as it is
        return '"' + value + '"'
    return '"' + value.translate(_ATTR_ESCAPES) + '"'


_MARKUP = re.compile(r'[&<>"]')


# Characters XML 1.0 cannot hold or junit-xml drops (control characters from tool
# output, lone surrogates from undecodable file names, non-characters): shown as
# \xNN / U+FFFD instead, so nothing silently disappears from the report.
_NOT_XML = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in (
    (0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x84), (0x86, 0x9F), (0xD800, 0xDFFF),
    (0xFDD0, 0xFDDF), *((p + 0xFFFE, p + 0xFFFF) for p in range(0, 0x110000, 0x10000)))) + "]")


def xml_text(text: str) -> str:
    """``text`` with every character XML cannot hold replaced."""
    if text.isascii() and text.isprintable():    # the common case, without the regex
        return text
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else "\ufffd", text)


def testcase(manifest: Path, export: str, line: int, result: StageResult) -> TestCase:
    props = {f"qnn.{k}": property_value(v) for k, v in result.properties.items()}
    if result.artefacts:
        props |= {f"qnn.artefact.{k}": str(v) for k, v in result.artefacts.items()}
    if result.cached:
        props["qnn.cached"] = "true"
    tc = TestCase(name=f"{export}::{result.stage}", classname=f"{manifest.name}.{export}",
                  elapsed_sec=result.duration_s, file=str(manifest), line=line,
                  stdout=result.summary or None, properties=props)
    crashed = crash_log(result)
    if crashed:   # a bug in qnn-ci, not a failed check: an <error> with the traceback
        tc.add_error_info(message=result.summary, output=_with_log(result.failure_text(), crashed),
                          error_type="internal-error")
    elif result.status == Status.FAILED:
        tc.add_failure_info(message=result.summary, output=result.failure_text())
    elif result.status == Status.ERROR:
        tc.add_error_info(message=result.summary, output=result.failure_text())
    elif result.status == Status.SKIPPED:
        tc.add_skipped_info(message=result.summary)
    return tc


def _with_log(text: str, log: str | Path | None, limit: int = 20_000) -> str:
    """``text`` and the end of the log file at ``log`` (the traceback)."""
    if not log:
        return text
    try:
        body = Path(log).read_text("utf-8", errors="replace")
    except (OSError, ValueError) as exc:   # ValueError: a NUL in the path
        return f"{text}\n(cannot read {log}: {getattr(exc, 'strerror', None) or exc})"
    if len(body) > limit:
        body = "…" + body[-limit:]
    return f"{text}\n\n{log}:\n{body}"


def internal_error_case(exc: BaseException, log: Path | None) -> TestCase:
    """The testcase that reports a crash of the run itself (``qnn-ci::internal-error``)."""
    where = f"traceback in {log}" if log else "traceback could not be saved"
    message = f"internal error: {describe(exc)} ({where}; please report it)"
    tc = TestCase(name=TESTCASE, classname="qnn-ci")
    tc.add_error_info(message=message, output=_with_log(message, log),
                      error_type="internal-error")
    return tc


class _Serialised:
    """One testcase as its line of the report (XML text, indented, newline-ended), and
    what the suite's counters need of it. A plain class: a run makes a thousand."""

    __slots__ = ("case", "elapsed", "kind", "line")

    def __init__(self, case: TestCase) -> None:
        self.case = case        # kept so the id() this is cached under stays this case's
        self.line = "    " + case_xml(case) + "\n"
        self.kind = _kind(case)     # "error" | "failure" | "skipped" | ""
        self.elapsed = case.elapsed_sec or 0.0


# An attribute value, quoted: line breaks and tabs as character references, so they
# read back as they were (as ElementTree writes them). Names, paths, class names and
# many values repeat across a run's cases: each is quoted once.
_QUOTED: dict[str, str] = {}


def _attr(value: str) -> str:
    quoted = _QUOTED.get(value)
    if quoted is None:
        quoted = quoteattr(value)
        if len(_QUOTED) < 50_000 and len(value) < 512:
            _QUOTED[value] = quoted
    return quoted


def _text(value: str) -> str:
    return xml_text(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _element(tag: str, attrs: dict[str, str], text: str | None, pad: str) -> str:
    head = pad + "<" + tag + "".join(f" {k}={_attr(v)}" for k, v in attrs.items())
    return f"{head}>{_text(text)}</{tag}>" if text else head + " />"


# (attribute, XML name) after name and time, in junit-xml's order
_CASE_ATTRS = (("timestamp", "timestamp"), ("classname", "classname"), ("status", "status"),
               ("category", "class"), ("file", "file"), ("line", "line"), ("log", "log"),
               ("url", "url"))
_INNER = "\n      "
_PROPERTY = _INNER + "  <property name="
# A skip's or a summary's element, by its text: a run's skips share a few reasons.
_CHILDREN: dict[tuple[str, str | None, str | None], str] = {}


def case_xml(case: TestCase) -> str:
    """One ``<testcase>`` as text, indented for its place in the report: the elements
    and attributes junit-xml writes, plus the case's <properties> first. Every text
    is made XML-writable on the way out (``xml_text``: the report must always parse)."""
    d = vars(case)      # read once each, not through attribute lookups: a run has
    head = "<testcase name=" + _attr(d["name"])     # a thousand of these
    if d["assertions"]:
        head += " assertions=" + _attr(f"{d['assertions']:d}")
    if d["elapsed_sec"] is not None:     # a cached stage's near-zero read included
        head += f' time="{d["elapsed_sec"]:f}"'
    for attr, key in _CASE_ATTRS:
        value = d[attr]
        if value:
            head += " " + key + "=" + _attr(value if type(value) is str else str(value))
    children: list[str] = []
    props = d["properties"]
    if props:
        children.append("<properties>" + "".join(
            [f"{_PROPERTY}{_attr(k)} value={_attr(v)} />" for k, v in props.items()])
            + _INNER + "</properties>")
    for tag, entries in (("failure", d["failures"]), ("error", d["errors"])):
        for entry in entries:
            if entry["output"] or entry["message"]:
                sub = {"type": entry["type"] or tag}
                if entry["message"]:
                    sub["message"] = entry["message"]
                children.append(_element(tag, sub, entry["output"], ""))
    for skipped in d["skipped"]:
        children.append(_child("skipped", skipped["message"], skipped["output"]))
    if d["stdout"]:
        children.append(_child("system-out", None, d["stdout"]))
    if d["stderr"]:
        children.append(_child("system-err", None, d["stderr"]))
    if not children:
        return head + " />"
    return head + ">" + _INNER + _INNER.join(children) + "\n    </testcase>"


def _child(tag: str, message: str | None, text: str | None) -> str:
    """A <skipped> (with its message) or a <system-out>/<system-err> element, made
    once per text (bounded, as ``_QUOTED``)."""
    key = (tag, message, text)
    known = _CHILDREN.get(key)
    if known is None:
        attrs = {} if tag != "skipped" else (
            {"type": "skipped", "message": message} if message else {"type": "skipped"})
        known = _element(tag, attrs, text, "")
        if len(_CHILDREN) < 10_000 and len(text or "") + len(message or "") < 2048:
            _CHILDREN[key] = known
    return known


def _kind(case: TestCase) -> str:
    if case.errors and case.is_error():
        return "error"
    if case.failures and case.is_failure():
        return "failure"
    return "skipped" if case.skipped and case.is_skipped() else ""


def run_date(at: float | None = None) -> str:
    """Now (or the epoch time ``at``), UTC, ISO 8601 to the second
    (``2026-12-01T02:00:00Z``): ``qnn.date``."""
    import datetime as dt

    when = dt.datetime.now(dt.UTC) if at is None else dt.datetime.fromtimestamp(at, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def git_state(folder: Path) -> dict[str, str]:
    """The ``qnn.commit`` properties of the git work tree holding ``folder``: the full
    commit of HEAD, ``qnn.commit.short`` (``3f2c1ab``, ``+dirty`` when a tracked file
    differs from it) and ``qnn.dirty`` = true then. One ``git status`` (which reads HEAD
    and the changes at once); ``{}`` outside git, without git, or on any failure."""
    import subprocess

    from qnn_ci.relocate import git_top

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

    Each testcase is serialised once (when first written); a write joins the cached
    texts between a fresh head (the counters) and tail, and replaces the file
    atomically. ``add`` writes at most every ``interval_s`` seconds (a cached run
    adds a thousand cases a second; rewriting after each one is quadratic);
    ``flush`` writes whatever is pending -- call it before a stage that takes a
    while starts and at the end of the run. ``write`` always writes (also the
    interrupted / internal-error reports). A run killed outright (SIGKILL) leaves
    the last written report: whole, at most ``interval_s`` behind.
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
        self.cases: list[TestCase] = []
        self._texts: dict[int, _Serialised] = {}
        self._pending = False
        self._last = 0.0
        self.write()

    def add(self, case: TestCase) -> None:
        if self._git and case.file:
            self._git = False
            self.run |= git_state(Path(os.path.abspath(case.file)).parent)
        self.cases.append(case)
        self._pending = True
        if time.monotonic() - self._last >= self.interval_s:
            self.write()

    def flush(self) -> None:
        """Write the report if a case was added since the last write."""
        if self._pending:
            self.write()

    def _serialised(self, case: TestCase) -> _Serialised:
        known = self._texts.get(id(case))
        if known is None or known.case is not case:
            known = _Serialised(case)
            self._texts[id(case)] = known
        return known

    def render(self, *, interrupted: str | None = None,
               internal_error: str | None = None) -> str:
        """The whole report as text (see ``write``)."""
        cases = [self._serialised(c) for c in self.cases]
        if len(self._texts) > 2 * len(cases) + 16:   # cases replaced (``cases = [...]``)
            self._texts = {id(s.case): s for s in cases}
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
        body = "".join([s.line for s in cases])
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
