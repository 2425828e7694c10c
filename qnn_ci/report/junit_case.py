"""One JUnit ``<testcase>`` as a plain record: what junit-xml's ``TestCase`` holds
(name, classname, time, file, line, output, failures, errors, skips), without the
package (and the ``xml.etree`` import under it): `qnn-ci run --junit` builds a
thousand of these on a cached run, and ``qnn_ci.report.junit`` writes them itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Entry = dict[str, Any]     # {"message": ..., "output": ..., "type": ...}


@dataclass(eq=False)
class TestCase:
    """One JUnit testcase: name, time, file, output, properties, failures, errors, skips."""

    name: str
    classname: str | None = None
    elapsed_sec: float | None = None
    stdout: str | None = None
    stderr: str | None = None
    file: str | None = None
    line: int | None = None
    assertions: int | None = None
    timestamp: str | None = None
    status: str | None = None
    category: str | None = None
    log: str | None = None
    url: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    failures: list[Entry] = field(default_factory=list)
    errors: list[Entry] = field(default_factory=list)
    skipped: list[Entry] = field(default_factory=list)

    __test__ = False          # not a pytest test class, whatever its name

    def add_failure_info(self, message: str | None = None, output: str | None = None,
                         failure_type: str | None = None) -> None:
        _merge(self.failures, message, output, failure_type)

    def add_error_info(self, message: str | None = None, output: str | None = None,
                       error_type: str | None = None) -> None:
        _merge(self.errors, message, output, error_type)

    def add_skipped_info(self, message: str | None = None, output: str | None = None) -> None:
        _merge(self.skipped, message, output, None, typed=False)

    def is_failure(self) -> bool:
        return any(e["message"] or e["output"] for e in self.failures)

    def is_error(self) -> bool:
        return any(e["message"] or e["output"] for e in self.errors)

    def is_skipped(self) -> bool:
        return any(e["message"] or e["output"] for e in self.skipped)


def _merge(entries: list[Entry], message: str | None, output: str | None,
           kind: str | None, *, typed: bool = True) -> None:
    """One entry per kind (as junit-xml keeps it): the first call makes it, later
    calls fill in what they give."""
    if not entries:
        entries.append({"message": message, "output": output} |
                       ({"type": kind} if typed else {}))
        return
    if message:
        entries[0]["message"] = message
    if output:
        entries[0]["output"] = output
    if kind and typed:
        entries[0]["type"] = kind
