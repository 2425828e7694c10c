"""Typed results every stage returns: a status, findings, numbers, artefacts."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"      # bad input (exit 2 semantics)


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass
class Finding:
    """One named check result: `check` is a stable id (e.g. ``fp16.tensor``)."""

    check: str
    message: str
    severity: Severity = Severity.ERROR
    subject: str | None = None   # tensor / node / output / key the finding is about

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "message": self.message,
                "severity": str(self.severity), "subject": self.subject}


def status_of(findings: list[Finding]) -> Status:
    """FAILED when any finding is an error, else PASSED."""
    return Status.FAILED if any(f.severity == Severity.ERROR for f in findings) \
        else Status.PASSED


def first_error(findings: list[Finding]) -> str | None:
    """The first error finding's message (its first line), for a stage's summary."""
    return next((f.message.splitlines()[0] for f in findings
                 if f.severity == Severity.ERROR and f.message), None)


@dataclass
class StageResult:
    """What a stage returns. ``data`` holds the stage's typed payload as plain
    JSON-able values so it can be cached and read by downstream stages."""

    stage: str
    status: Status
    summary: str = ""                                   # one line, the key number
    findings: list[Finding] = field(default_factory=list)
    properties: dict[str, Any] = field(default_factory=dict)  # JUnit properties
    artefacts: dict[str, str] = field(default_factory=dict)   # name -> absolute path
    data: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == Status.PASSED

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def failure_text(self) -> str:
        """The summary, each error finding, and a diagnosis of a numeric failure
        (where the error enters and what fixes it, ``data["diagnosis_text"]``)."""
        lines = [self.summary] if self.summary else []
        lines += [f"- [{f.check}] {f.message}" for f in self.errors()
                  if f.message not in self.summary]
        diagnosis = self.data.get("diagnosis_text")
        if isinstance(diagnosis, str) and diagnosis:
            lines.append(diagnosis)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        d["findings"] = [f.to_dict() for f in self.findings]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageResult:
        return cls(
            stage=d["stage"], status=Status(d["status"]), summary=d.get("summary", ""),
            findings=[Finding(f["check"], f["message"], Severity(f["severity"]),
                              f.get("subject")) for f in d.get("findings", [])],
            properties=d.get("properties", {}), artefacts=d.get("artefacts", {}),
            data=d.get("data", {}), duration_s=d.get("duration_s", 0.0),
            cached=d.get("cached", False),
        )
