"""Human reports: the terminal table, the GitHub Actions job summary (Markdown,
kept under the 1 MiB step-summary limit) and `::error` annotations."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from qnn_ci.engine.internal_error import crash_log
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.report import diagnosis_summary
from qnn_ci.report.hub_links import hub_jobs
from qnn_ci.util.listing import shown

STEP_SUMMARY_LIMIT = 1024 * 1024
FINDINGS_SHOWN = 8                         # a failure's findings in the terminal table
_BUDGET = STEP_SUMMARY_LIMIT - 16 * 1024   # headroom for anything else the job writes

_MARK = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.SKIPPED: "skip",
         Status.ERROR: "ERROR"}
_ICON = {Status.PASSED: "✅", Status.FAILED: "❌", Status.SKIPPED: "⏭️", Status.ERROR: "⛔"}


@dataclass
class Row:
    """One stage result of the summary table, with where its export is declared."""

    manifest: Path
    export: str
    line: int
    result: StageResult


def _mark(r: StageResult) -> str:
    return "CRASH" if crash_log(r) else _MARK[r.status]


def _icon(r: StageResult) -> str:
    return "💥 internal error" if crash_log(r) else f"{_ICON[r.status]} {r.status.value}"


# What makes a line an action a reader must copy whole: a command (in backticks,
# `qnn-ci ...`, `pytest ...`, `pip install`, an option such as --dim), a path or a
# file name, a setting (a dotted manifest key such as target.soc, NAME=VALUE, an
# environment variable such as QNN_SDK_ROOT).
_ACTION = re.compile(
    r"`|\bqnn-ci\s+[a-z]|\bpytest\s|\bpip install\b"
    r"|(?:^|[\s(\[])--?[A-Za-z][\w-]*"
    r"|[\w.~-]/[\w.-]"
    r"|\b[\w-]+\.(?:ya?ml|onnx|json|txt|raw|so|bin|xml|html|csv|log|py|encodings|cpp)\b"
    r"|\b[a-z_][a-z0-9_]+\.[a-z_][a-z0-9_]+"
    r"|\b[A-Za-z_]\w*=\S"
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")


def carries_action(text: str) -> bool:
    """Whether ``text`` holds something a reader acts on (a command, a path, a
    setting): such a line is never cut."""
    return _ACTION.search(text) is not None


def fit(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` with "…", unless there is no width (not a terminal:
    a CI log keeps every line whole) or it carries an action (``carries_action``).
    Long value lists are cut where they are made, with "(+N more)"
    (``qnn_ci.util.listing``), never here."""
    if width is None or len(text) <= width or carries_action(text):
        return text
    return text[: width - 1] + "…"


def terminal_width(isatty: bool) -> int | None:
    """The width summary lines are cut to: the terminal's (at least 100) when the
    output is a terminal; None (nothing cut) when it is a pipe or a file (a CI log)."""
    if not isatty:
        return None
    return max(100, shutil.get_terminal_size((140, 24)).columns)


def terminal_table(rows: list[Row], *, width: int | None = None) -> str:
    """Exports x stages with each stage's key number. With a ``width`` (a terminal:
    ``terminal_width``) a row that carries no action is cut to it (a failure, a
    command, a path or a setting never is); without one nothing is cut."""
    out: list[str] = []
    current: tuple[Path, str] | None = None
    name_width = max([14, *(len(row.result.stage) for row in rows)])   # dlc_context_binary
    indent = " " * (8 + name_width)
    for row in rows:
        if (row.manifest, row.export) != current:
            current = (row.manifest, row.export)
            out.append(f"{row.export}  ({row.manifest.name}:{row.line})")
        r = row.result
        note = r.summary.replace("\n", " ")
        if r.cached:
            note = f"(cached) {note}"
        text = f"  {_mark(r):<5} {r.stage:<{name_width}} {note}"
        if r.status in (Status.FAILED, Status.ERROR):
            out.append(text)  # a failure is shown whole, with its findings
            kept, more = shown([f for f in r.errors() if f.message not in r.summary],
                               FINDINGS_SHOWN)
            out += [f"{indent}- {f.message}" for f in kept]
            if more:
                out.append(f"{indent}(+{more} more: see the JUnit report or --json)")
            diagnosis = diagnosis_summary.headline(r)
            if diagnosis:
                out.append(f"{indent}{diagnosis}")
        else:
            out.append(fit(text, width))
    counts = {s: sum(r.result.status == s for r in rows) for s in Status}
    out.append(", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "nothing ran")
    return "\n".join(out)


def _cell(text: str, limit: int = 300) -> str:
    """A Markdown table cell: one line, ``|`` escaped, cut to ``limit`` unless it
    carries an action (a command, a path, a setting: ``carries_action``)."""
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit or carries_action(text) else text[: limit - 1] + "…"


def markdown_summary(rows: list[Row], *, title: str = "qnn-ci", interrupted: str | None = None,
                     internal_error: str | None = None, root: Path | None = None) -> str:
    """One table per export, exports with failures first, then the diagnosis of each
    failed numeric stage (links relative to ``root``, default the working folder);
    truncated to fit. An ``interrupted`` run (the reason) or one that crashed
    (``internal_error``: the one-line report) says so first."""
    root = Path.cwd() if root is None else root
    by_export: dict[tuple[Path, str], list[Row]] = {}
    for row in rows:
        by_export.setdefault((row.manifest, row.export), []).append(row)

    def badness(item: tuple[tuple[Path, str], list[Row]]) -> tuple[int, str]:
        statuses = {r.result.status for r in item[1]}
        rank = 0 if Status.ERROR in statuses else 1 if Status.FAILED in statuses else 2
        return rank, item[0][1]

    counts = {s: sum(r.result.status == s for r in rows) for s in Status}
    head = [f"## {title}", ""]
    if interrupted:
        head += [f"> ⚠️ **Run interrupted** ({_cell(interrupted)}): stages marked "
                 "\"not run\" did not run.", ""]
    if internal_error:
        head += [f"> 💥 **qnn-ci internal error**: {_cell(internal_error, 600)}", ""]
    head += [" · ".join(f"{_ICON[s]} {counts[s]} {s.value}" for s in Status if counts[s]), ""]
    parts: list[str] = []
    size = sum(len(h) + 1 for h in head)
    omitted = 0
    for (manifest, export), erows in sorted(by_export.items(), key=badness):
        block = [f"### {export} <sub>{manifest.name}:{erows[0].line}</sub>", "",
                 "| stage | result | details |", "|---|---|---|"]
        failed_first = sorted(erows, key=lambda r: r.result.status not in
                              (Status.FAILED, Status.ERROR))
        for r in failed_first:
            block.append(f"| `{r.result.stage}` | {_icon(r.result)} "
                         f"| {_cell(r.result.summary)} |")
            kept, more = shown(r.result.errors(), 5)
            for f in kept:
                block.append(f"| | | ↳ {_cell(f.message, 200)} |")
            if more:
                block.append(f"| | | ↳ (+{more} more: see the JUnit report) |")
            jobs = hub_jobs(r.result.properties)
            if jobs:
                block.append("| | | ↳ AI Hub: " + ", ".join(
                    f"[{kind} job {_cell(job, 40)}]({url.replace(')', '%29')})"
                    for kind, job, url in jobs) + " |")
        block.append("")
        for r in failed_first:
            if r.result.status == Status.FAILED:
                block += diagnosis_summary.markdown_block(r.result, root=root)
        text = "\n".join(block) + "\n"
        if size + _size(text) > _BUDGET:
            omitted += 1
            continue
        parts.append(text)
        size += _size(text)
    if omitted:
        parts.append(f"_{omitted} export(s) omitted to stay under the 1 MiB job-summary "
                     "limit; see the JUnit report._\n")
    # Whatever the names hold (lone surrogates from undecodable file names included),
    # the summary can be written as UTF-8.
    return _utf8("\n".join(head) + "\n" + "".join(parts))


def _utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(rows: list[Row], *, root: Path | None = None) -> list[str]:
    """`::error file=...,line=...::` workflow commands for failed stages."""
    out = []
    for row in rows:
        r = row.result
        if r.status not in (Status.FAILED, Status.ERROR):
            continue
        file = row.manifest
        if root is not None:
            try:
                file = row.manifest.relative_to(root)
            except ValueError:
                pass
        title = f"{row.export}::{r.stage}"
        out.append(f"::error file={_escape_prop(str(file))},line={row.line},"
                   f"title={_escape_prop(title)}::{_escape_data(r.failure_text() or r.summary)}")
    return out


def run_annotation(message: str, *, title: str = "qnn-ci") -> str:
    """An `::error` workflow command about the whole run (no file)."""
    return f"::error title={_escape_prop(title)}::{_escape_data(message)}"
