"""JUnit XML for `qnn-ci run`, written with the junit-xml package.

Each (export, stage) is a testcase named like the pytest node id; the numbers
go in as <properties> (valid under the xunit1 / "legacy" family). The file is
rewritten atomically after every stage, so an interrupted or crashing run still
leaves a valid report of what ran.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from qnn_ci.errors import UserError
from qnn_ci.results import StageResult, Status


def property_value(value: Any) -> str:
    """A property's text: numbers as numbers, structures as JSON."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def testcase(manifest: Path, export: str, line: int, result: StageResult) -> TestCase:
    tc = TestCase(name=f"{export}::{result.stage}", classname=f"{manifest.name}.{export}",
                  elapsed_sec=result.duration_s, file=str(manifest), line=line,
                  stdout=result.summary or None)
    props = {f"qnn.{k}": property_value(v) for k, v in result.properties.items()}
    props |= {f"qnn.artefact.{k}": str(v) for k, v in result.artefacts.items()}
    if result.cached:
        props["qnn.cached"] = "true"
    tc.properties = props  # type: ignore[attr-defined]
    if result.status == Status.FAILED:
        tc.add_failure_info(message=result.summary, output=result.failure_text())
    elif result.status == Status.ERROR:
        tc.add_error_info(message=result.summary, output=result.failure_text())
    elif result.status == Status.SKIPPED:
        tc.add_skipped_info(message=result.summary)
    return tc


class JUnitWriter:
    def __init__(self, path: Path, suite_name: str = "qnn-ci") -> None:
        self.path = path
        self.suite_name = suite_name
        self.cases: list[TestCase] = []
        self.write()

    def add(self, case: TestCase) -> None:
        self.cases.append(case)
        self.write()

    def write(self, *, interrupted: str | None = None) -> None:
        suite = TestSuite(self.suite_name, list(self.cases))
        if interrupted:
            suite.properties = {"qnn.interrupted": interrupted}
        xml = to_xml_report_string([suite], prettyprint=True, encoding="utf-8")
        xml = _properties_to_xml(xml, self.cases)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(xml, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            raise UserError(f"cannot write the JUnit report: {exc.strerror or exc} "
                            f"({exc.filename})", file=self.path, key="--junit") from None


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
