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
from qnn_ci.results import Status
from qnn_ci.session import DEFAULT_WORKDIR, Options, open_pipeline

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


def run(args: argparse.Namespace) -> int:
    paths = find_manifests(args.manifests)
    for p in paths:
        if not p.is_file():
            raise UserError("manifest not found (give a qnn-ci.yaml or a folder holding one)",
                            file=p)
    opts = Options(workdir=args.workdir, sdk_root=args.sdk_root, board=args.board,
                   boards_file=args.boards_file, use_cache=not args.no_cache,
                   exports=args.export)
    # Load every manifest first: bad input is reported before anything runs.
    opened = [open_pipeline(p, opts) for p in paths]
    for manifest, _ in opened:
        unknown = [n for n in args.export if n not in manifest.by_name]
        if unknown and len(opened) == 1:
            raise UserError(f"no export named {unknown[0]!r}; exports: "
                            f"{', '.join(manifest.by_name)}", file=manifest.path)
    writer = JUnitWriter(args.junit) if args.junit else None
    rows: list[Row] = []
    only = set(args.stage) or None
    # Progress on stderr for people watching (a stage can take minutes); CI logs get
    # the same with -v through logging.
    progress = sys.stderr.isatty() and not log.isEnabledFor(logging.INFO)
    try:
        for manifest, pipeline in opened:
            def record(ev: Event, manifest=manifest, pipeline=pipeline) -> None:
                export = pipeline.exports[ev.export]
                rows.append(Row(manifest.path, ev.export, export.line, ev.result))
                if writer:
                    writer.add(testcase(manifest.path, ev.export, export.line, ev.result))
                if progress:
                    took = "cached" if ev.result.cached else f"{ev.result.duration_s:.1f} s"
                    print(f"  {ev.export}::{ev.stage}: {ev.result.status.value} ({took})",
                          file=sys.stderr, flush=True)

            def started(export: str, stage: str) -> None:
                if progress:
                    print(f"  {export}::{stage}: running ...", file=sys.stderr, flush=True)
            pipeline.on_result = record
            pipeline.on_start = started
            for name in pipeline.exports:
                pipeline.run_export(name, only)
    except KeyboardInterrupt:
        if writer:
            writer.write(interrupted="interrupted by the user")
        raise
    if args.json:
        print(json.dumps([{"manifest": str(r.manifest), "export": r.export,
                           **r.result.to_dict()} for r in rows], indent=1, default=str))
    else:
        print(terminal_table(rows))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in annotations(rows, root=Path.cwd()):
            print(line)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(markdown_summary(rows))
    statuses = {r.result.status for r in rows}
    if Status.ERROR in statuses:
        return 2
    return 1 if Status.FAILED in statuses else 0
