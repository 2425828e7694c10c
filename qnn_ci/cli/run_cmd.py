"""`qnn-ci run`: the whole pipeline without pytest."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from qnn_ci.errors import UserError
from qnn_ci.manifest import find_manifests
from qnn_ci.pipeline import STAGE_ORDER, Event
from qnn_ci.report.junit import JUnitWriter, testcase
from qnn_ci.report.summary import Row, annotations, markdown_summary, terminal_table
from qnn_ci.results import Finding, StageResult, Status
from qnn_ci.session import (
    DEFAULT_WORKDIR,
    Opened,
    Options,
    check_selection,
    check_unique_exports,
    open_pipeline,
)

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifests", nargs="*", default=["qnn-ci.yaml"],
                   help="manifest files or folders holding qnn-ci.yaml (default: ./qnn-ci.yaml)")
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
    p.add_argument("--json", action="store_true", help="print results as JSON")


def _manifest_error_row(path: Path, exc: UserError) -> Row:
    result = StageResult("manifest", Status.ERROR, exc.oneline(),
                         findings=[Finding("manifest", exc.oneline())])
    return Row(path, "(manifest)", exc.line or 1, result)


def run(args: argparse.Namespace) -> int:
    paths = find_manifests(args.manifests)
    opts = Options(workdir=args.workdir, sdk_root=args.sdk_root, board=args.board,
                   boards_file=args.boards_file, use_cache=not args.no_cache,
                   exports=args.export)
    # The report exists from the start: whatever happens next, it says what ran.
    writer = JUnitWriter(args.junit) if args.junit else None
    rows: list[Row] = []
    try:
        # Load every manifest first: bad input is reported before anything runs.
        opened: list[Opened] = []
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
                    writer.add(testcase(p, row.export, row.line, row.result))
                _github([row])
                raise
            opened.append(o)
        check_selection(opened, args.export)
        _run_all(opened, args, rows, writer)
    except KeyboardInterrupt:
        if writer:
            writer.write(interrupted="interrupted by the user")
        raise
    except UserError:
        raise
    except Exception as exc:
        if writer:
            writer.write(interrupted=f"qnn-ci crashed: {type(exc).__name__}: {exc}")
        raise
    _report(rows, as_json=args.json)
    statuses = {r.result.status for r in rows}
    if Status.ERROR in statuses:
        return 2
    return 1 if Status.FAILED in statuses else 0


def _run_all(opened: list[Opened], args: argparse.Namespace, rows: list[Row],
             writer: JUnitWriter | None) -> None:
    only = set(args.stage) or None
    # Progress on stderr (a stage can take minutes): each stage as it ends, and on a
    # terminal also as it starts. With -v, logging says the same.
    quiet = log.isEnabledFor(logging.INFO)
    progress = not quiet
    starts = sys.stderr.isatty() and not quiet
    for o in opened:
        selected = set(o.selected)

        def record(ev: Event, o: Opened = o, selected: set[str] = selected) -> None:
            if progress:
                took = "cached" if ev.result.cached else f"{ev.result.duration_s:.1f} s"
                print(f"  {ev.export}::{ev.stage}: {ev.result.status.value} ({took})",
                      file=sys.stderr, flush=True)
            if ev.export not in selected:
                return  # an upstream of a selected export's `from:` chain
            export = o.pipeline.exports[ev.export]
            rows.append(Row(o.manifest.path, ev.export, export.line, ev.result))
            if writer:
                writer.add(testcase(o.manifest.path, ev.export, export.line, ev.result))

        def started(export: str, stage: str) -> None:
            if starts:
                print(f"  {export}::{stage}: running ...", file=sys.stderr, flush=True)

        o.pipeline.on_result = record
        o.pipeline.on_start = started
        for name in o.selected:
            o.pipeline.run_export(name, only)


def _report(rows: list[Row], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([{"manifest": str(r.manifest), "export": r.export,
                           **r.result.to_dict()} for r in rows], indent=1, default=str))
    else:
        print(terminal_table(rows))
    _github(rows)


def _github(rows: list[Row]) -> None:
    """Annotations and the job summary, when running in GitHub Actions."""
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in annotations(rows, root=Path.cwd()):
            print(line)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(markdown_summary(rows))
