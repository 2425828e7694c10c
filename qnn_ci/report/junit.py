"""JUnit XML for `qnn-ci run`, written with the junit-xml package.

Each (export, stage) is a testcase named like the pytest node id; the numbers
go in as <properties> (valid under the xunit1 / "legacy" family). The file is
rewritten atomically after every stage, so an interrupted or crashing run still
leaves a valid report of what ran. A stage that crashed (a bug in qnn-ci) is an
``<error type="internal-error">`` with its traceback, as is the
``qnn-ci::internal-error`` testcase of a run that crashed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from qnn_ci.errors import UserError
from qnn_ci.internal_error import TESTCASE, crash_log, describe
from qnn_ci.results import StageResult, Status


def property_value(value: Any) -> str:
    """A property's text: numbers as numbers, structures as JSON."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


# Characters XML 1.0 cannot hold or junit-xml drops (control characters from tool
# output, lone surrogates from undecodable file names, non-characters): shown as
# \xNN / U+FFFD instead, so nothing silently disappears from the report.
_NOT_XML = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in (
    (0x00, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x7F, 0x84), (0x86, 0x9F), (0xD800, 0xDFFF),
    (0xFDD0, 0xFDDF), *((p + 0xFFFE, p + 0xFFFF) for p in range(0, 0x110000, 0x10000)))) + "]")


def xml_text(text: str) -> str:
    """``text`` with every character XML cannot hold replaced."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else "\ufffd", text)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return xml_text(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _cleaned(tc: TestCase) -> TestCase:
    """Every text of a testcase made writable as XML (the report must always parse)."""
    for key, value in vars(tc).items():
        setattr(tc, key, _clean(value))
    return tc


def testcase(manifest: Path, export: str, line: int, result: StageResult) -> TestCase:
    tc = TestCase(name=f"{export}::{result.stage}", classname=f"{manifest.name}.{export}",
                  elapsed_sec=result.duration_s, file=str(manifest), line=line,
                  stdout=result.summary or None)
    props = {f"qnn.{k}": property_value(v) for k, v in result.properties.items()}
    props |= {f"qnn.artefact.{k}": str(v) for k, v in result.artefacts.items()}
    if result.cached:
        props["qnn.cached"] = "true"
    tc.properties = props  # type: ignore[attr-defined]
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
    return _cleaned(tc)


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
    return _cleaned(tc)


class JUnitWriter:
    def __init__(self, path: Path, suite_name: str = "qnn-ci") -> None:
        self.path = path
        self.suite_name = suite_name
        self.cases: list[TestCase] = []
        self.write()

    def add(self, case: TestCase) -> None:
        self.cases.append(case)
        self.write()

    def write(self, *, interrupted: str | None = None,
              internal_error: str | None = None) -> None:
        """Rewrite the whole report atomically: a reader (or a second signal) sees the
        previous report or this one, never a mix. ``interrupted`` (the reason) and
        ``internal_error`` (the traceback's log file) become suite properties."""
        suite = TestSuite(self.suite_name, list(self.cases))
        props = {}
        if interrupted:
            props["qnn.interrupted"] = interrupted
        if internal_error:
            props["qnn.internal_error"] = internal_error
        if props:
            suite.properties = _clean(props)
        xml = to_xml_report_string([suite], prettyprint=True, encoding="utf-8")
        xml = _properties_to_xml(xml, self.cases)
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


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def _properties_to_xml(xml: str, cases: list[TestCase]) -> str:
    """junit-xml writes suite properties only; add per-testcase <properties>."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    elems = root.findall(".//testcase")
    for elem, case in zip(elems, cases, strict=False):
        props = getattr(case, "properties", None)
        if not props:
            continue
        pe = ET.Element("properties")
        for k, v in props.items():
            ET.SubElement(pe, "property", name=k, value=v)
        elem.insert(0, pe)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")
