"""A JUnit ``<testcase>`` as text: what ``qnn_ci.report.junit``'s writer joins into the
report. Each case is serialised once, when it is added, into a ``Line`` (its text and
what the suite's counters need of it).

Two ways in, one text out:

- ``case_xml(TestCase)``: any testcase (the not-run cases of a stopped run, the
  ``qnn-ci::internal-error`` case);
- ``result_line(manifest, export, line, StageResult)``: a stage's result straight to
  its text, without building the ``TestCase`` first (a cached run adds a thousand a
  second; the test suite holds this to ``case_xml(testcase(...))`` character for
  character, whatever the result holds).

Every text is made XML-writable on the way out (``xml_text``): the report must
always parse.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from qnn_ci.engine.internal_error import crash_log
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.report.property_text import property_value

if TYPE_CHECKING:
    from qnn_ci.report.junit_case import TestCase

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
@functools.cache
def _not_xml() -> re.Pattern[str]:
    """The characters above, as one class (compiled when a text first needs it: most
    reports never do)."""
    return re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in (
        (0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x84), (0x86, 0x9F),
        (0xD800, 0xDFFF), (0xFDD0, 0xFDDF),
        *((p + 0xFFFE, p + 0xFFFF) for p in range(0, 0x110000, 0x10000)))) + "]")


def xml_text(text: str) -> str:
    """``text`` with every character XML cannot hold replaced."""
    if text.isascii() and text.isprintable():    # the common case, without the regex
        return text
    return _not_xml().sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else "\ufffd", text)


class Line:
    """One testcase as its line of the report (XML text, indented, newline-ended) and
    what the suite's counters need of it. A plain class: a run makes a thousand."""

    __slots__ = ("elapsed", "kind", "text")

    def __init__(self, text: str, kind: str, elapsed: float) -> None:
        self.text = "    " + text + "\n"
        self.kind = kind            # "error" | "failure" | "skipped" | ""
        self.elapsed = elapsed

    @classmethod
    def of_case(cls, case: TestCase) -> Line:
        return cls(case_xml(case), _kind(case), case.elapsed_sec or 0.0)


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
    if d["properties"]:
        children.append(_properties(d["properties"]))
    for tag, entries in (("failure", d["failures"]), ("error", d["errors"])):
        for entry in entries:
            if entry["output"] or entry["message"]:
                children.append(_problem(tag, entry["type"], entry["message"], entry["output"]))
    for skipped in d["skipped"]:
        children.append(_child("skipped", skipped["message"], skipped["output"]))
    if d["stdout"]:
        children.append(_child("system-out", None, d["stdout"]))
    if d["stderr"]:
        children.append(_child("system-err", None, d["stderr"]))
    if not children:
        return head + " />"
    return head + ">" + _INNER + _INNER.join(children) + "\n    </testcase>"


def _properties(props: dict[str, str]) -> str:
    return ("<properties>" + "".join(
        [f"{_PROPERTY}{_attr(k)} value={_attr(v)} />" for k, v in props.items()])
        + _INNER + "</properties>")


def _problem(tag: str, kind: str | None, message: str | None, output: str | None) -> str:
    """A <failure> or an <error> element."""
    sub = {"type": kind or tag}
    if message:
        sub["message"] = message
    return _element(tag, sub, output, "")


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


def result_properties(result: StageResult) -> dict[str, str]:
    """A stage result's JUnit properties: its own as ``qnn.<name>``, its artefacts as
    ``qnn.artefact.<name>`` and ``qnn.cached`` = true when read from the cache."""
    props = {f"qnn.{k}": property_value(v) for k, v in result.properties.items()}
    if result.artefacts:
        props |= {f"qnn.artefact.{k}": str(v) for k, v in result.artefacts.items()}
    if result.cached:
        props["qnn.cached"] = "true"
    return props


def result_problem(result: StageResult) -> tuple[str, str | None, str, str] | None:
    """What a result's testcase reports besides passing: (element, type, message,
    text) for a failure, an error or a skip (whose text is unused); None when it
    passed. A stage that crashed (a bug in qnn-ci) is an ``internal-error`` <error>
    with its traceback (``with_log``), not a failed check."""
    crashed = crash_log(result)
    if crashed:
        return "error", "internal-error", result.summary, with_log(result.failure_text(),
                                                                    crashed)
    if result.status == Status.FAILED:
        return "failure", None, result.summary, result.failure_text()
    if result.status == Status.ERROR:
        return "error", None, result.summary, result.failure_text()
    if result.status == Status.SKIPPED:
        return "skipped", None, result.summary, ""
    return None


def with_log(text: str, log: str | Path | None, limit: int = 20_000) -> str:
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


# Per export: its name as it goes into a testcase name (quoted, without the quotes)
# and the attributes every stage of it shares (classname, file, line), quoted.
_EXPORTS: dict[tuple[Path, str, int], tuple[str, str]] = {}
# The rest of a testcase after its head, for a result with nothing but a status and
# a summary (most skips): (status, summary) -> (text, kind).
_BODIES: dict[tuple[Status, str], tuple[str, str]] = {}
# Statuses whose text needs nothing of a result but its summary (and that it did
# not crash): a failure's or an error's text holds its findings and diagnosis too.
_PLAIN = (Status.PASSED, Status.SKIPPED)


def result_line(manifest: Path, export: str, line: int, result: StageResult) -> Line:
    """The ``Line`` of ``testcase(manifest, export, line, result)``, made without it."""
    key = (manifest, export, line)
    known = _EXPORTS.get(key)
    if known is None:
        known = (_attr(export)[1:-1],   # quoting is character by character: the parts'
                 f" classname={_attr(f'{manifest.name}.{export}')}"   # quoted, joined
                 f" file={_attr(str(manifest))}" + (f" line={_attr(str(line))}" if line else ""))
        if len(_EXPORTS) < 10_000:
            _EXPORTS[key] = known
    elapsed = result.duration_s
    head = '<testcase name="' + known[0] + "::" + _attr(result.stage)[1:]
    if elapsed is not None:
        head += f' time="{elapsed:f}"'
    head += known[1]
    plain = result.status in _PLAIN and not (
        result.properties or result.artefacts or result.cached or crash_log(result))
    body = _BODIES.get((result.status, result.summary)) if plain else None
    if body is None:
        body = _body(result)
        if plain and len(_BODIES) < 10_000 and len(result.summary) < 2048:
            _BODIES[result.status, result.summary] = body
    return Line(head + body[0], body[1], elapsed or 0.0)


def _body(result: StageResult) -> tuple[str, str]:
    """A result's testcase after its head, and its counter kind."""
    children: list[str] = []
    props = result_properties(result)
    if props:
        children.append(_properties(props))
    kind = ""
    problem = result_problem(result)
    if problem is not None:
        tag, type_, message, output = problem
        if tag == "skipped":
            children.append(_child("skipped", message or None, None))
            kind = "skipped" if message else ""
        elif output or message:
            children.append(_problem(tag, type_, message or None, output or None))
            kind = tag
    if result.summary:
        children.append(_child("system-out", None, result.summary))
    if not children:
        return " />", kind
    return ">" + _INNER + _INNER.join(children) + "\n    </testcase>", kind
