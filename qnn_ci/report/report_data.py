"""What the HTML report shows, read from where a run left it: JUnit XML files that
qnn-ci wrote (``qnn-ci run --junit`` or pytest's ``--junitxml`` with the plugin's
``qnn.*`` properties), a work folder's cached stage results (``result.json``: the
comparison data with the error histograms), or the pytest plugin's collected rows.

Every reader ends in rows, notes (what could not be read, shown on the page) or one
``UserError`` line; nothing a file holds raises anything else.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.util.safe_read import read_bytes, read_text

log = logging.getLogger(__name__)

JUNIT_CAP = 128 * 1024 * 1024        # bytes of one JUnit XML file
RESULT_CAP = 64 * 1024 * 1024        # bytes of one result.json
STATUSES = ("passed", "failed", "skipped", "error")


@dataclass
class StageEntry:
    """One (export, stage) as the report shows it."""

    export: str
    stage: str
    status: str                                    # one of STATUSES
    summary: str = ""
    findings: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)   # without the "qnn." prefix
    data: dict[str, Any] = field(default_factory=dict)         # result.json's data, if read
    manifest: str = ""
    line: int = 0


@dataclass
class ReportInput:
    """What the report's readers found: stage entries, and notes on what was unreadable."""

    entries: list[StageEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what could not be read, one line each


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _int(value: Any) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return 0
    return n if 0 <= n < 1 << 31 else 0


def _status(value: Any) -> str | None:
    text = _text(value).strip().lower()
    return text if text in STATUSES else None


def entry_from_properties(props: dict[str, Any], findings: list[str] | None = None,
                          *, status: str | None = None, summary: str = "",
                          manifest: str = "", line: int = 0) -> StageEntry | None:
    """An entry from ``qnn.*`` properties (a JUnit testcase, a pytest report's
    user_properties); None when they name no export and stage."""
    export, stage = props.get("qnn.export"), props.get("qnn.stage")
    if not isinstance(export, str) or not isinstance(stage, str) or not export or not stage:
        return None
    own = {k[4:]: _text(v) for k, v in props.items()
           if isinstance(k, str) and k.startswith("qnn.") and k not in
           ("qnn.export", "qnn.stage", "qnn.status", "qnn.summary", "qnn.manifest",
            "qnn.line", "qnn.finding", "qnn.warning")}
    return StageEntry(
        export=export, stage=stage,
        status=_status(props.get("qnn.status")) or status or "passed",
        summary=_text(props.get("qnn.summary") or summary),
        findings=list(findings or []), properties=own,
        manifest=_text(props.get("qnn.manifest") or manifest),
        line=_int(props.get("qnn.line") or line))


def from_plugin_rows(rows: list[dict[str, Any]]) -> ReportInput:
    """The pytest plugin's collected rows (each a dict of ``qnn.*`` properties plus
    ``findings``: [(key, text)])."""
    out = ReportInput()
    for row in rows:
        findings = [_text(text) for _key, text in row.get("findings", [])]
        entry = entry_from_properties({k: v for k, v in row.items() if k.startswith("qnn.")},
                                      findings)
        if entry is not None:
            out.entries.append(entry)
    return out


# -- JUnit ---------------------------------------------------------------------------

def _case_entry(case: ET.Element) -> StageEntry | None:
    props: dict[str, Any] = {}
    findings: list[str] = []
    for prop in case.iter("property"):
        name, value = prop.get("name"), prop.get("value")
        if name is None or value is None:
            continue
        if name == "qnn.finding":
            findings.append(value)
        elif name != "qnn.warning":
            props[name] = value
    status, summary = "passed", ""
    for tag, kind in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
        child = case.find(tag)
        if child is not None:
            status, summary = kind, child.get("message") or ""
            if not findings and child.text:
                findings = [line[2:] for line in child.text.splitlines()
                            if line.startswith("- [")]
            break
    out_text = case.findtext("system-out") or ""
    name = case.get("name") or ""
    if "qnn.export" not in props and "::" in name:     # `qnn-ci run --junit`
        props["qnn.export"], _, props["qnn.stage"] = name.rpartition("::")
    return entry_from_properties(props, findings, status=status,
                                 summary=summary or out_text.strip(),
                                 manifest=case.get("file") or "", line=_int(case.get("line")))


def read_junit(path: Path) -> ReportInput:
    """The qnn-ci testcases of a JUnit XML file. Not XML, or XML that declares a
    DTD (JUnit never does; entity expansion is refused): one ``UserError`` line."""
    raw = read_bytes(path, cap=JUNIT_CAP, what="JUnit XML file",
                     hint="give the file `qnn-ci run --junit` or pytest --junitxml wrote")
    if b"<!DOCTYPE" in raw or b"<!ENTITY" in raw:
        raise UserError("a JUnit report has no DTD or entities; this one declares some "
                        "(give the file qnn-ci or pytest wrote)", file=path)
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        raise UserError(f"not valid XML ({exc}); give the file `qnn-ci run --junit` or "
                        "pytest --junitxml wrote", file=path) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise UserError(f"XML that cannot be read ({type(exc).__name__}); give the file "
                        "`qnn-ci run --junit` or pytest --junitxml wrote", file=path) from None
    out = ReportInput()
    for case in root.iter("testcase"):
        entry = _case_entry(case)
        if entry is not None:
            out.entries.append(entry)
    if not out.entries:
        out.notes.append(f"{path}: no qnn-ci testcases in this JUnit file")
    return out


# -- the work folder -------------------------------------------------------------

def _load_result(path: Path, workdir: Path) -> dict[str, Any]:
    from qnn_ci.engine.relocate import Roots, detokenize
    from qnn_ci.util.safe_read import load_json

    payload = load_json(read_text(path, cap=RESULT_CAP, what="stage result"), path,
                        hint="a stage result qnn-ci wrote (delete the folder to re-run it)")
    raw = payload.get("result") if isinstance(payload, dict) else None
    if not isinstance(raw, dict):
        raise UserError("no \"result\" object in this stage result", file=path)
    roots = payload.get("roots")
    if isinstance(roots, dict):
        project = roots.get("project")
        raw = detokenize(raw, Roots(str(workdir.resolve()),
                                    project if isinstance(project, str) else None))
    return raw


def _entry_from_result(raw: dict[str, Any], export: str, stage: str) -> StageEntry:
    from qnn_ci.report.property_text import property_value

    props = raw.get("properties")
    props = {_text(k): property_value(v) for k, v in props.items()} \
        if isinstance(props, dict) else {}
    artefacts = raw.get("artefacts")
    if isinstance(artefacts, dict):
        props |= {f"artefact.{_text(k)}": _text(v) for k, v in artefacts.items()}
    findings = raw.get("findings")
    texts = [f"[{_text(f.get('check'))}] {_text(f.get('message'))}"
             for f in findings if isinstance(f, dict) and f.get("severity") == "error"] \
        if isinstance(findings, list) else []
    data = raw.get("data")
    return StageEntry(export=export, stage=stage,
                      status=_status(raw.get("status")) or "error",
                      summary=_text(raw.get("summary") or ""), findings=texts,
                      properties=props, data=data if isinstance(data, dict) else {})


def read_workdir(workdir: Path) -> ReportInput:
    """Every cached stage result below ``workdir`` (``<export>/<stage>/result.json``);
    one that cannot be read is a note."""
    if not workdir.is_dir():
        raise UserError("not a folder (give the --workdir `qnn-ci run` used)", file=workdir)
    out = ReportInput()
    for path in sorted(workdir.glob("*/*/result.json")):
        export, stage = path.parent.parent.name, path.parent.name
        try:
            raw = _load_result(path, workdir)
        except UserError as exc:
            out.notes.append(exc.oneline())
            continue
        out.entries.append(_entry_from_result(raw, export, stage))
    return out


def merge(primary: ReportInput, extra: ReportInput) -> ReportInput:
    """``primary``'s entries (a JUnit report, the plugin's rows), each given the data
    (comparison histograms) of the same (export, stage) in ``extra`` (a work folder);
    an (export, stage) only in ``extra`` is added when ``primary`` has none at all."""
    by_key = {(e.export, e.stage): e for e in extra.entries}
    out = ReportInput(list(primary.entries), primary.notes + extra.notes)
    if not primary.entries:
        out.entries = list(extra.entries)
        return out
    for entry in out.entries:
        known = by_key.get((entry.export, entry.stage))
        if known is not None and not entry.data:
            entry.data = known.data
            for k, v in known.properties.items():
                entry.properties.setdefault(k, v)
    return out


def stage_order() -> dict[str, int]:
    from qnn_ci.engine.stage import STAGE_ORDER

    return {name: i for i, name in enumerate(STAGE_ORDER)}

