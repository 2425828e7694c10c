"""`qnn-ci run`: the whole pipeline without pytest."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.cli import interrupts
from qnn_ci.engine.internal_error import EXIT_INTERNAL, InternalError, crash_log, oneline, write_log
from qnn_ci.engine.pipeline import Event
from qnn_ci.engine.results import Finding, StageResult, Status
from qnn_ci.engine.stage import STAGE_ORDER
from qnn_ci.engine.warning_lines import warning_properties, warning_texts, warnings_report
from qnn_ci.errors import UserError
from qnn_ci.manifest.defaults import MANIFEST_NAMES
from qnn_ci.manifest.loader import find_manifests
from qnn_ci.report.changed_summary import changed_heading
from qnn_ci.report.summary import (
    Row,
    annotations,
    markdown_summary,
    run_annotation,
    terminal_table,
    terminal_width,
)
from qnn_ci.runner.session import (
    DEFAULT_WORKDIR,
    Opened,
    Options,
    check_selection,
    check_unique_exports,
    open_pipeline,
)

if TYPE_CHECKING:   # the JUnit writer is imported only with --junit
    from qnn_ci.report.junit import JUnitWriter

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifests", nargs="*", default=[],
                   help="manifest files or folders holding qnn-ci.yaml (default: "
                        "./qnn-ci.yaml; with --changed-since, every qnn-ci.yaml / "
                        "qnn-ci.yml of the git work tree)")
    p.add_argument("--junit", type=Path, help="write a JUnit XML report here")
    p.add_argument("--stage", action="append", choices=STAGE_ORDER, default=[],
                   help="run only these stages (and what they need); repeatable")
    p.add_argument("--export", action="append", default=[], help="only this export; repeatable")
    p.add_argument("--workdir", type=Path, default=Path(DEFAULT_WORKDIR),
                   help=f"work folder for artefacts and cache (default {DEFAULT_WORKDIR})")
    p.add_argument("--sdk-root", type=Path, help="QAIRT SDK root (default $QNN_SDK_ROOT)")
    p.add_argument("--board", help="run board stages on this board")
    p.add_argument("--boards-file", type=Path, help="extra qnn-boards.yaml")
    p.add_argument("--no-cache", action="store_true", help="re-run every stage")
    p.add_argument("--changed-since", metavar="REF",
                   help="run only the exports whose inputs changed since git REF (model, "
                        "manifest entry and defaults, calibration sources, encodings, board, "
                        "qnn-ci's version; from: chains follow); each is printed with why")
    p.add_argument("--json", action="store_true", help="print results as JSON")


def _progress_sink() -> Callable[[str], None] | None:
    """Long stages' progress (the diagnosis advisor) on stderr, unless logging at INFO
    (-v) already says it."""
    if log.isEnabledFor(logging.INFO):
        return None

    def sink(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)
    return sink


def _manifest_error_row(path: Path, exc: UserError) -> Row:
    result = StageResult("manifest", Status.ERROR, exc.oneline(),
                         findings=[Finding("manifest", exc.oneline())])
    return Row(path, "(manifest)", exc.line or 1, result)


@dataclass
class Progress:
    """What ran so far: the rows to report, the (manifest, export, stage) keys done
    and the stage running now (for the not-run list of an interrupted run)."""

    rows: list[Row] = field(default_factory=list)
    done: set[tuple[Path, str, str]] = field(default_factory=set)
    running: tuple[Path, str, str] | None = None
    opened: list[Opened] = field(default_factory=list)


def _manifest_paths(args: argparse.Namespace) -> list[Path]:
    """The manifests given; none given: ``./qnn-ci.yaml``, or with --changed-since
    every manifest of the git work tree (``work_tree_manifests``), listed on stderr
    once the REF is known to exist."""
    if args.manifests:
        return find_manifests(args.manifests)
    if not args.changed_since:
        return [Path(MANIFEST_NAMES[0])]
    from qnn_ci.runner.changed import repository_of, resolve_ref, work_tree_manifests

    found = work_tree_manifests(Path.cwd())
    resolve_ref(repository_of(found[0].parent), args.changed_since)   # a bad REF: one line
    shown = ", ".join(os.path.relpath(p) for p in found)
    print(f"qnn-ci: manifests of the git work tree: {shown}", file=sys.stderr, flush=True)
    return found


def run(args: argparse.Namespace) -> int:
    paths = _manifest_paths(args)
    opts = Options(workdir=args.workdir, sdk_root=args.sdk_root, board=args.board,
                   boards_file=args.boards_file, use_cache=not args.no_cache,
                   exports=args.export, stages=args.stage, changed_since=args.changed_since,
                   progress=_progress_sink())
    # The report exists from the start: whatever happens next, it says what ran.
    writer = _junit_writer(args.junit) if args.junit else None
    progress = Progress()
    try:
        # Load every manifest first: bad input is reported before anything runs.
        seen: dict[str, Path] = {}
        for p in paths:
            if not p.is_file():
                raise UserError("manifest not found (give a qnn-ci.yaml or a folder holding "
                                "one)", file=p)
            try:
                o = open_pipeline(p, opts)
                check_unique_exports(seen, o.manifest)
            except UserError as exc:
                row = _manifest_error_row(p, exc)
                if writer:
                    writer.add_result(p, row.export, row.line, row.result)
                _github([row])
                raise
            progress.opened.append(o)
            for line in o.notes + (o.selection.lines() if o.selection else []):
                print(f"qnn-ci: {line}", file=sys.stderr, flush=True)
        check_selection(progress.opened, args.export)
        _run_all(progress, args, writer)
    except KeyboardInterrupt as exc:   # SIGINT, or SIGTERM as interrupts.Terminated
        _stopped(progress, args, writer, interrupts.reason(exc))
        raise
    except UserError:
        if writer:
            writer.flush()
        raise
    except Exception as exc:   # a bug in qnn-ci: say so in the report, then exit 3
        log_path = write_log(exc, args.workdir)
        _stopped(progress, args, writer, "qnn-ci internal error", crash=(exc, log_path))
        raise InternalError(exc, log_path) from exc
    with interrupts.deferred():   # a signal now waits until the report is whole
        _report(progress.rows, as_json=args.json, heading=changed_heading(progress.opened))
    crashed = [r for r in progress.rows if crash_log(r.result)]
    for r in crashed:
        print(f"qnn-ci run: {r.export}::{r.result.stage}: {r.result.summary}", file=sys.stderr)
    if crashed:
        return EXIT_INTERNAL
    statuses = {r.result.status for r in progress.rows}
    if Status.ERROR in statuses:
        return 2
    return 1 if Status.FAILED in statuses else 0


def _expected(o: Opened, export: str, only: set[str] | None) -> list[str]:
    """The stages of ``export`` a run with ``--stage only`` reports: the selected
    ones and what they need, in pipeline order."""
    spec = o.pipeline.exports[export]
    names = o.pipeline.stage_names(spec)
    if only is None:
        return names
    want = set(only) & set(names)
    todo = list(want)
    while todo:
        stage = o.pipeline.stages.get(todo.pop())
        for need in stage.needs_for(spec, o.pipeline.env) if stage else ():
            if need in names and need not in want:
                want.add(need)
                todo.append(need)
    return [n for n in names if n in want]


def not_run(progress: Progress, only: set[str] | None, why: str) -> list[Row]:
    """Rows for every stage of a selected export that did not finish: the one
    running when the run stopped is an error, the rest are skipped "not run"."""
    rows: list[Row] = []
    for o in progress.opened:
        for name in o.selected:
            export = o.pipeline.exports[name]
            for stage in _expected(o, name, only):
                key = (o.manifest.path, name, stage)
                if key in progress.done:
                    continue
                if key == progress.running:
                    result = StageResult(stage, Status.ERROR, f"stopped while running: {why}",
                                         data={"not_run": why})
                else:
                    result = StageResult(stage, Status.SKIPPED, f"not run: {why}",
                                         data={"not_run": why})
                rows.append(Row(o.manifest.path, name, export.line, result))
    return rows


def _junit_writer(path: str) -> JUnitWriter:
    from qnn_ci.report.junit import JUnitWriter

    return JUnitWriter(path)


def _testcase(manifest: Path, export: str, line: int, result: StageResult) -> Any:
    from qnn_ci.report.junit import testcase

    return testcase(manifest, export, line, result)


def _stopped(progress: Progress, args: argparse.Namespace, writer: JUnitWriter | None,
             why: str, *, crash: tuple[Exception, Path | None] | None = None) -> None:
    """The run stopped early (a signal, or ``crash``: a bug and its log file): the
    report lists what ran, then every stage that did not, and says why. Nothing goes
    to stdout (with --json there is no JSON rather than a partial one)."""
    rows = progress.rows + not_run(progress, set(args.stage) or None, why)
    line = oneline("qnn-ci run", crash[0], crash[1]) if crash else None
    if writer:
        cases = [_testcase(r.manifest, r.export, r.line, r.result) for r in rows]
        if crash:
            from qnn_ci.report.junit import internal_error_case

            writer.replace([*cases, internal_error_case(*crash)])
            writer.write(internal_error=str(crash[1] or line))
        else:
            writer.replace(cases)
            writer.write(interrupted=why)
    _github(rows, interrupted=None if crash else why, internal_error=line, to_stderr=True)


def _run_all(progress: Progress, args: argparse.Namespace, writer: JUnitWriter | None) -> None:
    only = set(args.stage) or None
    # Progress on stderr (a stage can take minutes): each stage as it ends, and on a
    # terminal also as it starts. With -v, logging says the same.
    quiet = log.isEnabledFor(logging.INFO)
    show = not quiet
    starts = sys.stderr.isatty() and not quiet
    for o in progress.opened:
        selected = set(o.selected)

        def record(ev: Event, o: Opened = o, selected: set[str] = selected) -> None:
            key = (o.manifest.path, ev.export, ev.stage)
            if progress.running == key:
                progress.running = None
            if show:
                took = "cached" if ev.result.cached else f"{ev.result.duration_s:.1f} s"
                print(f"  {ev.export}::{ev.stage}: {ev.result.status.value} ({took})",
                      file=sys.stderr, flush=True)
            if ev.export not in selected:
                return  # an upstream of a selected export's `from:` chain
            export = o.pipeline.exports[ev.export]
            # the first warnings grouped, with their count: JUnit properties, --json
            for k, v in warning_properties(warning_texts(ev.result.findings)).items():
                ev.result.properties.setdefault(k, v)
            progress.rows.append(Row(o.manifest.path, ev.export, export.line, ev.result))
            progress.done.add(key)
            if writer:
                writer.add_result(o.manifest.path, ev.export, export.line, ev.result)

        def started(export: str, stage: str, o: Opened = o) -> None:
            progress.running = (o.manifest.path, export, stage)
            if writer:   # the report on disk is whole and current while a stage runs
                writer.flush()
            if starts:
                print(f"  {export}::{stage}: running ...", file=sys.stderr, flush=True)

        o.pipeline.on_result = record
        o.pipeline.on_start = started
        for name in o.selected:
            o.pipeline.run_export(name, only)
    if writer:
        writer.flush()


def _report(rows: list[Row], *, as_json: bool, heading: str = "") -> None:
    if as_json:
        print(json.dumps([{"manifest": str(r.manifest), "export": r.export,
                           **r.result.to_dict()} for r in rows], indent=1, default=str))
    else:
        # cut to a terminal's width only; a CI log (a pipe, a file) keeps every line
        print(terminal_table(rows, width=terminal_width(sys.stdout.isatty())))
        warned = warnings_report((f"{r.export}::{r.result.stage}",
                                  warning_texts(r.result.findings)) for r in rows)
        if warned:
            print("\nwarnings:\n" + "\n".join(f"  {line}" for line in warned))
    _github(rows, to_stderr=as_json, heading=heading)


def _github(rows: list[Row], *, interrupted: str | None = None,
            internal_error: str | None = None, to_stderr: bool = False,
            heading: str = "") -> None:
    """Annotations and the job summary, when running in GitHub Actions. The runner
    reads workflow commands on stderr too: they go there when stdout is JSON."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    out = sys.stderr if to_stderr else sys.stdout
    lines = annotations([r for r in rows if "not_run" not in r.result.data], root=Path.cwd())
    if interrupted:
        lines.append(run_annotation(f"run {interrupted}; the stages not run are listed in "
                                    "the report"))
    if internal_error:
        lines.append(run_annotation(internal_error, title="qnn-ci internal error"))
    for line in lines:
        print(line, file=out, flush=True)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8", errors="replace") as fh:
            fh.write(heading)
            fh.write(markdown_summary(rows, interrupted=interrupted,
                                      internal_error=internal_error))
