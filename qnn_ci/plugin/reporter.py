"""What the plugin shows after the items ran: the qnn-ci summary table, warnings,
the job summary and annotations on GitHub Actions, the HTML report, JUnit run
properties, the baselines update, and the exit status `qnn-ci run` would give."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from qnn_ci.plugin.options import EXIT_BAD_INPUT, PIPELINES, run_options

if TYPE_CHECKING:   # the engine is imported when a manifest is collected, not before
    from qnn_ci.report.summary import Row

def _split_finding(text: str) -> tuple[str, str]:
    """"[check] message" -> (check, message)."""
    if text.startswith("[") and "] " in text:
        check, _, message = text[1:].partition("] ")
        return check, message
    return "stage", text


class Reporter:
    """Collects every stage item's report (on the xdist controller too, where the
    items do not run) for the summary table, job summary and annotations."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[dict[str, Any]] = []
        self.started = time.time()      # the JUnit report's qnn.date

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a stage's result shows in its call phase, or at set-up when a skip was known
        if report.when != "call" and not (report.when == "setup" and report.skipped):
            return
        props = dict(report.user_properties)
        if "qnn.stage" not in props:
            return
        self.rows.append(props | {
            "findings": [(k, v) for k, v in report.user_properties if k == "qnn.finding"],
            "warnings": [v for k, v in report.user_properties if k == "qnn.warning"]})

    def _rows(self) -> list[Row]:
        from qnn_ci.engine.internal_error import INTERNAL_ERROR
        from qnn_ci.engine.results import Finding, StageResult, Status
        from qnn_ci.engine.stage import STAGE_ORDER
        from qnn_ci.report.summary import Row

        rows = []
        statuses = {s.value: s for s in Status}
        manifests: dict[str, Path] = {}     # one Path per manifest, not per row
        for p in self.rows:
            status = statuses[p["qnn.status"]]
            findings = [Finding(*_split_finding(text)) for key, text in p["findings"]
                        if key == "qnn.finding"]
            res = StageResult(p["qnn.stage"], status, p.get("qnn.summary", ""),
                              findings=findings, cached=bool(p.get("qnn.cached")),
                              properties={k[4:]: v for k, v in p.items()
                                          if k.startswith("qnn.diagnosis.")})
            if p.get("qnn.internal_error"):
                res.data[INTERNAL_ERROR] = p["qnn.internal_error"]
            manifest = manifests.get(p["qnn.manifest"])
            if manifest is None:
                manifest = manifests[p["qnn.manifest"]] = Path(p["qnn.manifest"])
            rows.append(Row(manifest, p["qnn.export"], int(p["qnn.line"]), res))
        # Workers finish in any order: show manifests, exports and stages in order.
        order = {name: i for i, name in enumerate(("manifest", *STAGE_ORDER))}
        rows.sort(key=lambda r: (str(r.manifest), r.line, order.get(r.result.stage, 99)))
        return rows

    def _internal_errors(self) -> list[dict[str, Any]]:
        return [p for p in self.rows if "qnn.internal_error" in p]

    def _bad_input(self) -> list[dict[str, Any]]:
        from qnn_ci.engine.results import Status

        return [p for p in self.rows if p.get("qnn.status") == Status.ERROR.value]

    @pytest.hookimpl(tryfirst=True)   # before pytest's junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Exit as `qnn-ci run` would: a stage that crashed is a bug in qnn-ci, not a
        failed check: 3 (pytest's INTERNAL_ERROR too); else an item that stopped on
        bad input (a manifest error, a wrong SDK root: Status.ERROR): 2. With
        --junitxml and qnn-ci items, the report gets the run's date and commit."""
        if hasattr(self.config, "workerinput"):
            return
        if self.rows and getattr(self.config.option, "xmlpath", None):
            from qnn_ci.report.junit import add_to_pytest_junit, run_date

            add_to_pytest_junit(self.config, Path(self.rows[0]["qnn.manifest"]).parent,
                                run_date(self.started))
        if self.config.getoption("--qnn-update-baselines"):
            from qnn_ci.nightly.baselines_report import update_from_rows

            lines, ok = update_from_rows(self.rows)
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            for line in lines if tr is not None else ():
                tr.write_line(line, red=not ok)
            if not ok and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = EXIT_BAD_INPUT
        if not self.rows or session.exitstatus not in (pytest.ExitCode.OK,
                                                       pytest.ExitCode.TESTS_FAILED):
            return
        if self._internal_errors():
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        elif self._bad_input():
            session.exitstatus = EXIT_BAD_INPUT

    def _warnings(self) -> list[str]:
        """The "qnn-ci warnings" section: per item, its first warnings grouped."""
        from qnn_ci.engine.stage import STAGE_ORDER
        from qnn_ci.engine.warning_lines import warnings_report

        order = {name: i for i, name in enumerate(("manifest", *STAGE_ORDER))}
        rows = sorted(self.rows, key=lambda p: (str(p["qnn.manifest"]), int(p["qnn.line"]),
                                                order.get(p["qnn.stage"], 99)))
        return warnings_report((f"{p['qnn.export']}::{p['qnn.stage']}", p["warnings"])
                               for p in rows)

    def _changed(self) -> list[Any]:
        return [o for o in self.config.stash.get(PIPELINES, {}).values()
                if o.selection is not None]

    def _html(self, terminalreporter: Any) -> None:
        """--qnn-html: the page from the collected rows (and the work folder's results:
        the error histograms); a path that cannot be written is one red line."""
        path = self.config.getoption("--qnn-html")
        if not path:
            return
        from qnn_ci.errors import UserError
        from qnn_ci.report.html_report import make_report
        from qnn_ci.report.report_data import from_plugin_rows

        workdir = run_options(self.config).workdir
        try:
            make_report(from_plugin_rows(self.rows), Path(path),
                        workdir=workdir if workdir.is_dir() else None)
            terminalreporter.write_line(f"qnn-ci: HTML report written to {path}")
        except UserError as exc:
            terminalreporter.write_line(f"qnn-ci: HTML report not written: {exc.oneline()}",
                                        red=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        changed = self._changed()
        if changed:   # collected here (not under xdist, where the workers collect)
            terminalreporter.write_sep("=", "qnn-ci changed exports")
            for o in changed:
                for line in o.selection.lines():
                    terminalreporter.write_line(line)
        if not self.rows:
            return
        from qnn_ci.report.changed_summary import changed_heading
        from qnn_ci.report.summary import (
            annotations,
            markdown_summary,
            terminal_table,
            terminal_width,
        )

        rows = self._rows()
        self._html(terminalreporter)
        terminalreporter.write_sep("=", "qnn-ci summary")
        # cut to a terminal's width only; a CI log (a pipe, a file) keeps every line
        width = terminal_width(bool(getattr(terminalreporter, "isatty", False)))
        terminalreporter.write_line(terminal_table(rows, width=width))
        warned = self._warnings()
        if warned:
            terminalreporter.write_sep("=", "qnn-ci warnings")
            for line in warned:
                terminalreporter.write_line(line, yellow=True)
        for p in self._internal_errors():
            where = p["qnn.internal_error"] or "no log could be written"
            terminalreporter.write_line(
                f"qnn-ci: internal error in {p['qnn.export']}::{p['qnn.stage']} (traceback "
                f"in {where}; please report it)", red=True)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in annotations(rows, root=Path(self.config.rootpath)):
                terminalreporter.write_line(line)
            path = os.environ.get("GITHUB_STEP_SUMMARY")
            if path:
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(changed_heading(changed))
                    fh.write(markdown_summary(rows))
