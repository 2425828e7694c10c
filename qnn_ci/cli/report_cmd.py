"""`qnn-ci report`: one self-contained HTML page from a run's JUnit report(s), its
work folder (the error histograms), a history file (the trends) and the baselines
(docs/report.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from qnn_ci.errors import UserError
from qnn_ci.manifest.defaults import DEFAULT_WORKDIR


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--junit", type=Path, nargs="+", default=[], metavar="FILE",
                   help="JUnit report(s) of the run (qnn-ci run --junit, pytest --junitxml)")
    p.add_argument("--workdir", type=Path, default=None,
                   help="the run's work folder: stage results and error histograms "
                        f"(default {DEFAULT_WORKDIR} when it exists)")
    p.add_argument("--history", type=Path, default=None, metavar="FILE",
                   help="history file (qnn-ci history add) for the trends")
    p.add_argument("--baselines", type=Path, default=None, metavar="FILE",
                   help="baselines file (default: the one each manifest names with "
                        "baselines:, else qnn-baselines.yaml beside it)")
    p.add_argument("--manifest", type=Path, nargs="+", default=[], metavar="PATH",
                   help="manifest(s) or folders whose baselines to show, besides those "
                        "the results name")
    p.add_argument("--title", default="qnn-ci report", help="the page's title")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                   help="where to write the page (report.html)")


def run(args: argparse.Namespace) -> int:
    from qnn_ci.report.html_report import make_report
    from qnn_ci.report.report_data import ReportInput, read_junit

    workdir = args.workdir
    if workdir is None and Path(DEFAULT_WORKDIR).is_dir():
        workdir = Path(DEFAULT_WORKDIR)
    if not args.junit and workdir is None and args.history is None:
        raise UserError("nothing to report: give --junit FILE (qnn-ci run --junit), "
                        "--workdir DIR or --history FILE", key="qnn-ci report")
    primary = ReportInput()
    for path in args.junit:
        one = read_junit(path)
        primary.entries += one.entries
        primary.notes += one.notes
    from qnn_ci.manifest.loader import find_manifests

    manifests = find_manifests(args.manifest)
    for path in manifests:
        if not path.is_file():
            raise UserError("manifest not found (give a qnn-ci.yaml or a folder holding one)",
                            file=path, key="--manifest")
    shown = make_report(primary, args.output, workdir=workdir, history=args.history,
                        baselines=args.baselines, manifests=manifests, title=args.title)
    exports = len({e.export for e in shown.entries})
    print(f"{args.output}: {exports} export(s), {len(shown.entries)} stage result(s)"
          + (f", {len(shown.notes)} note(s)" if shown.notes else ""))
    return 0
