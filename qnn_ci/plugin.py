"""The pytest plugin: each export in a `qnn-ci.yaml` is a collector, each of its
stages an item (`models/qnn-ci.yaml::text_encoder::fp16_gate`).

A thin shell over ``qnn_ci.pipeline``: an item asks the engine for its stage's
result; the engine runs what that needs once (file locks and the cache make
that true across pytest-xdist workers) and the item passes, fails, or skips
with the engine's reason.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from qnn_ci.defaults import DEFAULT_WORKDIR, MANIFEST_NAMES

if TYPE_CHECKING:   # the engine is imported when a manifest is collected, not before
    from qnn_ci.errors import UserError
    from qnn_ci.pipeline import Pipeline
    from qnn_ci.report.summary import Row
    from qnn_ci.results import StageResult
    from qnn_ci.session import Opened, Options
    from qnn_ci.spec import ExportSpec

MARKERS = {
    "qnn": "a qnn-ci stage of a model export",
    "qnn_sdk": "a qnn-ci stage that needs the QAIRT SDK (QNN_SDK_ROOT)",
    "qnn_board": "a qnn-ci stage that needs a board",
    "qnn_sim": "a qnn-ci stage that needs onnxruntime-qnn's HTP simulator",
}
_PIPELINES = pytest.StashKey[dict[Path, "Opened"]]()
_EXPORTS = pytest.StashKey[dict[str, Path]]()   # export name -> its manifest (unique)
_TOKEN = pytest.StashKey[str]()
_RELPATHS = pytest.StashKey[dict[Path, str]]()   # manifest -> its path in item locations
_NESTED = pytest.StashKey[bool]()   # configured inside another session's test
# A qnn-ci item that failed on bad input (a manifest error, a wrong SDK root): the
# session exits 2, as `qnn-ci run` does (a typo must not read as a failed check).
EXIT_BAD_INPUT = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qnn-ci", "ONNX -> QNN export checks")
    group.addoption("--qnn-workdir", help=f"work folder (default {DEFAULT_WORKDIR})")
    group.addoption("--qnn-board", help="run board stages on this board")
    group.addoption("--qnn-sdk-root", help="QAIRT SDK root (default $QNN_SDK_ROOT)")
    group.addoption("--qnn-boards-file", help="a qnn-boards.yaml declaring boards")
    group.addoption("--qnn-no-cache", action="store_true", default=None,
                    help="re-run every stage instead of reusing cached results")
    group.addoption("--qnn-export", action="append", default=None,
                    help="only this export (repeatable)")
    group.addoption("--qnn-changed-since", metavar="REF", default=None,
                    help="only the exports whose inputs changed since git REF; the others "
                         "are deselected (each with its reason in the qnn-ci summary)")
    group.addoption("--qnn-html", metavar="PATH", default=None,
                    help="write one self-contained HTML report of the qnn-ci items here "
                         "(docs/report.md)")
    group.addoption("--qnn-update-baselines", action="store_true", default=False,
                    help="after the session, write what the numeric stages measured into "
                         "each manifest's qnn-baselines.yaml (docs/baselines.md)")
    parser.addini("qnn_manifests", "manifest file names or globs to collect",
                  type="linelist", default=list(MANIFEST_NAMES))
    parser.addini("qnn_workdir", "work folder", default=DEFAULT_WORKDIR)
    parser.addini("qnn_board", "board for board stages", default="")
    parser.addini("qnn_sdk_root", "QAIRT SDK root", default="")
    parser.addini("qnn_boards_file", "a qnn-boards.yaml declaring boards", default="")
    parser.addini("qnn_no_cache", "re-run every stage", type="bool", default=False)
    parser.addini("qnn_export", "only these exports", type="linelist", default=[])
    parser.addini("qnn_changed_since", "only exports changed since this git revision",
                  default="")
    parser.addini("qnn_fast_exit", "after a session with qnn-ci items, collect garbage "
                  "once at its end, then freeze the heap: pytest's end-of-session "
                  "collections and the process's exit skip it (qnn_ci/heap.py)",
                  type="bool", default=True)


def _option(config: pytest.Config, name: str) -> Any:
    value = config.getoption(f"--qnn-{name.replace('_', '-')}")
    return value if value is not None else config.getini(f"qnn_{name}")


def pytest_configure(config: pytest.Config) -> None:
    from qnn_ci.heap import thaw_session  # gc and atexit only

    thaw_session()      # pytest.main again, in one process: what the last one froze
    # started inside another session's test (pytester's inline runs): the process is
    # not this session's, its heap is left alone at the end
    config.stash[_NESTED] = _inside_another_session()
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.stash[_PIPELINES] = {}
    config.stash[_EXPORTS] = {}
    config.pluginmanager.register(_Reporter(config), "qnn_ci_reporter")
    workerinput = getattr(config, "workerinput", None)
    config.stash[_TOKEN] = (workerinput or {}).get("qnn_run_token") or uuid.uuid4().hex
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config.stash[_TOKEN]), "qnn_ci_xdist")


def _inside_another_session() -> bool:
    """Whether another pytest session runs this one (its ``wrap_session`` is further
    up the stack: pytester's inline runs); True when that cannot be told."""
    try:
        from _pytest.main import wrap_session
        code = wrap_session.__code__
    except (ImportError, AttributeError):
        return True
    frame, sessions = sys._getframe(1), 0
    while frame is not None:
        sessions += frame.f_code is code
        frame = frame.f_back
    return sessions != 1


class _XdistHooks:
    """Hands the run token to every worker, so --qnn-no-cache still runs each
    stage once per pytest run rather than once per worker."""

    def __init__(self, token: str) -> None:
        self.token = token

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["qnn_run_token"] = self.token


def _options(config: pytest.Config) -> Options:
    from qnn_ci.session import Options

    sdk = _option(config, "sdk_root")
    workdir = Path(_option(config, "workdir") or DEFAULT_WORKDIR)
    if not workdir.is_absolute():
        workdir = Path(config.rootpath) / workdir
    boards = _option(config, "boards_file")
    return Options(workdir=workdir, sdk_root=Path(sdk) if sdk else None,
                   boards_file=Path(boards) if boards else None,
                   board=_option(config, "board") or None,
                   use_cache=not _option(config, "no_cache"),
                   run_token=config.stash[_TOKEN], exports=list(_option(config, "export") or []),
                   changed_since=_option(config, "changed_since") or None)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    patterns = parent.config.getini("qnn_manifests")
    if any(fnmatch.fnmatch(file_path.name, p) or fnmatch.fnmatch(str(file_path), p)
           for p in patterns):
        return ManifestFile.from_parent(parent, path=file_path)
    return None


class ManifestFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from qnn_ci.errors import UserError
        from qnn_ci.internal_error import write_log
        from qnn_ci.session import check_unique_exports, open_pipeline

        cache = self.config.stash[_PIPELINES]
        try:
            if self.path not in cache:
                opened = open_pipeline(_shown(self.path), _options(self.config))
                check_unique_exports(self.config.stash[_EXPORTS], opened.manifest)
                cache[self.path] = opened
        except UserError as exc:
            yield ManifestError.from_parent(self, name="manifest", error=exc)
            return
        except Exception as exc:  # a bug in qnn-ci: one failing item, the other manifests run
            yield InternalErrorItem.from_parent(self, name="internal-error", error=exc,
                                                log=write_log(exc, self._workdir()))
            return
        opened = cache[self.path]
        for name in opened.selected:
            yield ExportCollector.from_parent(self, name=name,
                                              export=opened.pipeline.exports[name],
                                              pipeline=opened.pipeline)
        # Unchanged exports (--qnn-changed-since) are collected, then deselected, so
        # pytest counts them as deselected like a -k or -m deselection.
        for name, why in opened.deselected.items():
            col = ExportCollector.from_parent(self, name=name,
                                              export=opened.pipeline.exports[name],
                                              pipeline=opened.pipeline)
            col.deselected_why = why
            yield col

    def _workdir(self) -> Path | None:
        try:
            return _options(self.config).workdir
        except Exception:
            return None


def _shown(path: Path) -> Path:
    """``path`` relative to the current folder when below it: a manifest's errors
    name it as the user would type it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


class _OneLineItem(pytest.Item):
    """A failing item whose whole report is one line, shown at a line of the manifest."""

    text: str
    at_line: int
    kind: str

    def _one_line(self, text: str, at_line: int, kind: str,
                  extra: list[tuple[str, Any]]) -> None:
        from qnn_ci.results import Status

        self.text, self.at_line, self.kind = text, at_line, kind
        self.add_marker("qnn")
        self.user_properties += [
            ("qnn.export", "(manifest)"), ("qnn.stage", kind),
            ("qnn.status", Status.ERROR.value), ("qnn.summary", text),
            ("qnn.manifest", str(self.path)), ("qnn.line", at_line), *extra]

    def runtest(self) -> None:
        raise QnnFailure(self.text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, QnnFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.at_line - 1, self.kind


class ManifestError(_OneLineItem):
    """A manifest that does not load is one failing item with the one-line reason."""

    def __init__(self, *, error: UserError, **kw: Any) -> None:
        super().__init__(**kw)
        self.error = error
        self._one_line(error.oneline(), error.line or 1, "manifest",
                       [("qnn.finding", f"[manifest] {error.oneline()}")])


class InternalErrorItem(_OneLineItem):
    """qnn-ci crashed on a manifest (a bug, not bad input): one failing item with a
    one-line pointer to the traceback's log file; the session exits 3."""

    def __init__(self, *, error: Exception, log: Path | None, **kw: Any) -> None:
        from qnn_ci.internal_error import oneline

        super().__init__(**kw)
        self.line = oneline("qnn-ci", error, log)
        self._one_line(self.line, 1, "internal-error",
                       [("qnn.internal_error", str(log or "")),
                        ("qnn.finding", f"[internal] {self.line}")])


def pytest_collection_finish(session: pytest.Session) -> None:
    """A --qnn-export name that no collected manifest defines is a usage error."""
    opened = list(session.config.stash.get(_PIPELINES, {}).values())
    for o in opened:   # what `reads` may read: the stages selected (-m, -k) per export
        o.pipeline.selected = {}
    for item in session.items:
        if isinstance(item, StageItem):
            item.pipeline.selected.setdefault(item.export.name, set()).add(item.name)  # type: ignore[union-attr]
    names = _option(session.config, "export") or []
    if opened and names:
        from qnn_ci.errors import UserError
        from qnn_ci.session import check_selection

        try:
            check_selection(opened, list(names))
        except UserError as exc:
            raise pytest.UsageError(exc.oneline()) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the items of exports --qnn-changed-since found unchanged."""
    keep, drop = [], []
    for item in items:
        parent = item.parent
        (drop if isinstance(parent, ExportCollector) and parent.deselected_why else
         keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class ExportCollector(pytest.Collector):
    def __init__(self, *, export: ExportSpec, pipeline: Pipeline, **kw: Any) -> None:
        super().__init__(**kw)
        self.export = export
        self.pipeline = pipeline
        self.deselected_why = ""

    def collect(self) -> Iterator[pytest.Item]:
        # `qnn` marks the export (its items inherit it, for -m and -k alike); the SDK,
        # board and simulator markers mark the items that need them
        self.add_marker("qnn")
        marks: dict[str, pytest.MarkDecorator] = {}   # one per marker name, not per item
        for stage in self.pipeline.plan(self.export):
            item = StageItem.from_parent(self, name=stage.name, export=self.export,
                                         pipeline=self.pipeline)
            if stage.marker:
                if stage.marker not in marks:
                    marks[stage.marker] = getattr(pytest.mark, stage.marker)
                item.add_marker(marks[stage.marker])
            yield item

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.export.line - 1, self.export.name


class QnnFailure(Exception):
    """A stage failed: the message is the whole report."""


class StageItem(pytest.Item):
    def __init__(self, *, export: ExportSpec, pipeline: Pipeline, **kw: Any) -> None:
        super().__init__(**kw)
        self.export = export
        self.pipeline = pipeline

    def setup(self) -> None:
        """A skip known without running anything (the stage is not available here, an
        upstream stage blocks it, the cache holds a skip) is reported at set-up, as
        pytest reports a skip mark: the stage never runs, so there is no call phase."""
        from qnn_ci.results import Status

        result = self.pipeline.lookup(self.export.name, self.name)
        if result is not None and result.status == Status.SKIPPED:
            self._record(result)
            raise pytest.skip.Exception(result.summary, _use_item_location=True)

    def runtest(self) -> None:
        from qnn_ci.results import Status

        result = self.pipeline.result(self.export.name, self.name)
        self._record(result)
        if result.status == Status.SKIPPED:
            # Reported at the item's location (the manifest line), not this file.
            raise pytest.skip.Exception(result.summary, _use_item_location=True)
        if result.status in (Status.FAILED, Status.ERROR):
            raise QnnFailure(result.failure_text() or result.summary)

    def known_outcome(self, result: StageResult) -> tuple[str, tuple[str, int, str] | None]:
        """The (outcome, longrepr) pytest's ``makereport`` builds for a passed result
        (from ``runtest``) or a skipped one (from ``setup``) -- without raising."""
        self._record(result)
        if result.status != "skipped":     # Status is a StrEnum
            return "passed", None
        return "skipped", (os.fspath(self.path), self.export.line,
                           _skip_message(result.summary))

    def _record(self, r: StageResult) -> None:
        self.user_properties.extend(_item_properties()(self.export, self.name, r))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, QnnFailure):
            try:
                where = self.path.relative_to(self.config.rootpath)
            except ValueError:
                where = self.path
            return (f"{where}:{self.export.line}: {self.export.name}::{self.name} failed\n"
                    f"{excinfo.value}")
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.export.line - 1, f"{self.export.name}::{self.name}"

    @functools.cached_property
    def location(self) -> tuple[str, int | None, str]:
        """pytest's own ``location``, with the manifest's relative path worked out
        once per manifest rather than once per stage item."""
        _, line, name = self.reportinfo()
        relpaths = self.config.stash.setdefault(_RELPATHS, {})
        if self.path not in relpaths:
            base = pytest.Item.location     # a cached_property (func) or a property (fget)
            compute = getattr(base, "func", None) or base.fget  # type: ignore[attr-defined]
            relpaths[self.path] = compute(self)[0]
        return relpaths[self.path], line, name


@functools.cache
def _item_properties() -> Callable[[ExportSpec, str, StageResult], list[tuple[str, Any]]]:
    """``qnn_ci.item_properties.item_properties``, imported once (not per item)."""
    from qnn_ci.item_properties import item_properties

    return item_properties


@functools.lru_cache(maxsize=8192)   # a few distinct reasons per export
def _skip_message(reason: str) -> str:
    """The line pytest reports for ``pytest.skip(reason)``: the exception's own line
    (``Skipped: <reason>``), as ``ExceptionInfo.exconly`` formats it."""
    import traceback

    exc = pytest.skip.Exception(reason)
    return "".join(traceback.format_exception_only(type(exc), exc)).rstrip()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """pytest's test loop, reporting cached stage items straight from it when only
    pytest's own plugins take part (``qnn_ci.known_result.run_loop``)."""
    if not any(isinstance(item, StageItem) for item in session.items):
        return None
    from qnn_ci.known_result import run_loop

    return run_loop(session, lambda item: isinstance(item, StageItem))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A stage whose result is known without running anything (cached) is reported
    without pytest's per-phase set-up (``qnn_ci.known_result``)."""
    if not isinstance(item, StageItem):
        return None
    from qnn_ci.known_result import report_known

    return report_known(item, nextitem)


# -- reports ---------------------------------------------------------------------

def _split_finding(text: str) -> tuple[str, str]:
    """"[check] message" -> (check, message)."""
    if text.startswith("[") and "] " in text:
        check, _, message = text[1:].partition("] ")
        return check, message
    return "stage", text


def pytest_unconfigure(config: pytest.Config) -> None:
    """After a session with qnn-ci items, collect the garbage once and freeze the rest
    (``qnn_ci.heap.freeze_after_session``): pytest's own end-of-session collections
    and the process's exit then skip the heap. Not ordered first: a conftest's
    ``pytest_unconfigure`` runs before this one, and what it drops is collected."""
    reporter = config.pluginmanager.get_plugin("qnn_ci_reporter")
    if (reporter is None or not reporter.rows or hasattr(config, "workerinput")
            or config.stash.get(_NESTED, True) or not config.getini("qnn_fast_exit")):
        return
    from qnn_ci.heap import freeze_after_session

    freeze_after_session()


class _Reporter:
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
        from qnn_ci.internal_error import INTERNAL_ERROR
        from qnn_ci.pipeline import STAGE_ORDER
        from qnn_ci.report.summary import Row
        from qnn_ci.results import Finding, StageResult, Status

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
        from qnn_ci.results import Status

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
            from qnn_ci.baselines_report import update_from_rows

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
        from qnn_ci.pipeline import STAGE_ORDER
        from qnn_ci.report.warning_lines import warnings_report

        order = {name: i for i, name in enumerate(("manifest", *STAGE_ORDER))}
        rows = sorted(self.rows, key=lambda p: (str(p["qnn.manifest"]), int(p["qnn.line"]),
                                                order.get(p["qnn.stage"], 99)))
        return warnings_report((f"{p['qnn.export']}::{p['qnn.stage']}", p["warnings"])
                               for p in rows)

    def _changed(self) -> list[Any]:
        return [o for o in self.config.stash.get(_PIPELINES, {}).values()
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

        workdir = _options(self.config).workdir
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
        from qnn_ci.report.summary import annotations, markdown_summary, terminal_table

        rows = self._rows()
        self._html(terminalreporter)
        terminalreporter.write_sep("=", "qnn-ci summary")
        terminalreporter.write_line(terminal_table(rows))
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
