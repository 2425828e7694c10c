"""`qnn-ci baseline update [MANIFEST…] [--export …] [--workdir …]`: write what the
exports measure into the manifest's baselines file (docs/baselines.md).

It runs the pipeline itself (all stages but `regression`), so results cached in the
work folder by `qnn-ci run` (same settings, same work folder) are reused and only
what is missing or out of date runs. Entries whose numbers did not change are left
as they are.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import find_manifests
from qnn_ci.runner.session import (
    DEFAULT_WORKDIR,
    Opened,
    Options,
    check_selection,
    check_unique_exports,
    open_pipeline,
)

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = sub.add_parser("update", help="write what the exports measure into the baselines "
                                       "file beside each manifest (only what changed)")
    up.add_argument("manifests", nargs="*", default=["qnn-ci.yaml"],
                    help="manifest files or folders holding qnn-ci.yaml "
                         "(default: ./qnn-ci.yaml)")
    up.add_argument("--export", action="append", default=[],
                    help="only this export; repeatable")
    up.add_argument("--workdir", type=Path, default=Path(DEFAULT_WORKDIR),
                    help=f"work folder holding the cached results (default {DEFAULT_WORKDIR})")
    up.add_argument("--sdk-root", type=Path, help="QAIRT SDK root (default $QNN_SDK_ROOT)")
    up.add_argument("--board", help="run board stages on this board")
    up.add_argument("--boards-file", type=Path, help="extra qnn-boards.yaml")


def run(args: argparse.Namespace) -> int:
    from qnn_ci.engine.stage import STAGE_ORDER
    from qnn_ci.nightly.baselines import write_for_manifest

    paths = find_manifests(args.manifests)
    stages = [s for s in STAGE_ORDER if s != "regression"]
    opts = Options(workdir=args.workdir, sdk_root=args.sdk_root, board=args.board,
                   boards_file=args.boards_file, exports=args.export, stages=stages)
    opened: list[Opened] = []
    names: dict[str, Path] = {}
    for p in paths:
        if not p.is_file():
            raise UserError("manifest not found (give a qnn-ci.yaml or a folder holding one)",
                            file=p)
        o = open_pipeline(p, opts)
        check_unique_exports(names, o.manifest)
        opened.append(o)
    check_selection(opened, args.export)
    status = 0
    for o in opened:
        if not o.selected:
            continue
        results = {name: {r.stage: r for r in o.pipeline.run_export(name)}
                   for name in o.selected}
        changed, empty = write_for_manifest(o.manifest, results)
        for export in empty:
            status = 1
            print(f"qnn-ci baseline update: {export}: nothing measured (no numeric stage "
                  "ran to a verdict: see `qnn-ci run`); no baseline written", file=sys.stderr)
        for export, soc, scope in changed:
            print(f"{o.manifest.baselines}: {export} {soc} {scope}: updated")
        if not changed and len(empty) < len(o.selected):
            print(f"{o.manifest.baselines}: unchanged")
    return status
