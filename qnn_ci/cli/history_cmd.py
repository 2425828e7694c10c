"""`qnn-ci history`: keep a JSON-lines history of runs and show its trends.

    qnn-ci history add JUNIT.xml [--db history.jsonl] [--commit SHA] [--date ISO]
    qnn-ci history show [--db history.jsonl] [--export NAME]... [--last N] [--json]
                        [--manifest MANIFEST]... [--tolerance KIND=VALUE]...

``add`` records only what the run measured: a stage read from the cache
(``qnn.cached``) is left out, and a run that read every stage from the cache adds
nothing (one line). It exits 0 (also when the run had no numbers to add); ``show``
exits 1 when a drift is flagged, else 0; bad input is one line and exit 2. See
docs/history.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from qnn_ci.errors import UserError
from qnn_ci.nightly import history, regression, trends

DEFAULT_DB = Path("history.jsonl")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="append a run's numbers from a JUnit report qnn-ci wrote")
    add.add_argument("junit", type=Path, metavar="JUNIT.xml")
    add.add_argument("--db", type=Path, default=DEFAULT_DB,
                     help="the history file (JSON lines; default: history.jsonl)")
    add.add_argument("--commit", help="the commit the run tested (default: the report's "
                     "qnn.commit, else git rev-parse HEAD here, else 'unknown')")
    add.add_argument("--date", help="when the run was (ISO 8601; default: the report's "
                     "qnn.date or timestamp, else the time the report was written)")
    show = sub.add_parser("show", help="per export the last values of each metric; "
                          "drifts flagged")
    show.add_argument("--db", type=Path, default=DEFAULT_DB,
                      help="the history file (default: history.jsonl)")
    show.add_argument("--export", action="append", metavar="NAME",
                      help="only this export (repeatable)")
    show.add_argument("--last", type=int, default=trends.WINDOW, metavar="N",
                      help=f"values shown per metric (default {trends.WINDOW})")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--manifest", action="append", default=[], type=Path,
                      metavar="MANIFEST", help="take each export's regression.tolerances "
                      "from this manifest (repeatable)")
    show.add_argument("--tolerance", action="append", default=[], metavar="KIND=VALUE",
                      help="a tolerance for the drift rule, e.g. cosine=0.002 or "
                           "latency=0.05 (relative); wins over --manifest")


def run(args: argparse.Namespace) -> int:
    return _add(args) if args.action == "add" else _show(args)


def _add(args: argparse.Namespace) -> int:
    if args.date is not None:
        history.parse_date(args.date)          # a bad --date: one line before anything
    if args.commit is not None and (not args.commit.strip() or "\n" in args.commit):
        raise UserError(f"--commit {args.commit!r}: give a commit id")
    run = history.read_run(args.junit, commit=args.commit, date=args.date, where=Path.cwd())
    records = run.records
    if not records and run.cached:
        print(f"{args.junit}: every stage with numbers was read from the cache (qnn.cached): "
              f"the run measured nothing new, nothing added to {args.db} (qnn-ci run "
              "--no-cache or pytest --qnn-no-cache measures again)")
        return 0
    added = history.append(args.db, records)
    exports = len({r["export"] for r in records})
    if not records:
        print(f"{args.junit}: no stage reported numbers; nothing added to {args.db}")
    else:
        again = len(records) - added
        print(f"added {added} record(s) for {exports} export(s) to {args.db}"
              + (f" ({again} already there)" if again else "")
              + (f"; {len(run.cached)} stage(s) read from the cache left out (measured "
                 "by an earlier run)" if run.cached else ""))
    return 0


def _tolerances(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        kind, sep, text = item.partition("=")
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not sep or not kind.strip() or not math.isfinite(value) or value < 0:
            raise UserError(f"--tolerance {item!r}: give KIND=VALUE with a number >= 0, "
                            f"e.g. cosine=0.002 (kinds: {', '.join(regression.RULES)})")
        out[kind.strip()] = value
    problem = regression.check_tolerances(out)
    if problem:
        raise UserError(f"--tolerance: {problem}")
    return out


def _manifest_tolerances(paths: list[Path]) -> dict[str, dict[str, float]]:
    """export -> its ``regression.tolerances`` (the first manifest naming it wins)."""
    if not paths:
        return {}
    from qnn_ci.manifest.loader import load_manifest

    out: dict[str, dict[str, float]] = {}
    for path in paths:
        for export in load_manifest(path).exports:
            out.setdefault(export.name, dict(export.regression.tolerances))
    return out


def _show(args: argparse.Namespace) -> int:
    if args.last < 1:
        raise UserError(f"--last {args.last}: give a number of values >= 1")
    overrides = _tolerances(args.tolerance)
    records = history.read_history(args.db)
    found = trends.trends(records, last=args.last, exports=args.export, overrides=overrides,
                          per_export=_manifest_tolerances(args.manifest))
    if args.export:
        known = {r["export"] for r in records}
        missing = [e for e in args.export if e not in known]
        if missing:
            raise UserError(f"--export {missing[0]}: not in the history (exports there: "
                            f"{', '.join(sorted(known)[:20]) or 'none'})", file=args.db)
    drifts = [t for t in found if t.drift]
    if args.json:
        print(json.dumps({"trends": [t.to_dict() for t in found],
                          "drifts": len(drifts)}, indent=1, ensure_ascii=False))
    else:
        print(render(found) if found else f"{args.db}: no records")
    return 1 if drifts else 0


def render(found: list[trends.Trend]) -> str:
    """The text of ``show``: a block per export x SoC x board, a line per metric."""
    lines: list[str] = []
    group: tuple[str, str | None, str | None] | None = None
    width = max((len(t.stage) + 2 + len(t.metric) for t in found), default=0)
    for t in found:
        if (t.export, t.soc, t.board) != group:
            group = (t.export, t.soc, t.board)
            where = ", ".join(p for p in (t.soc, f"board {t.board}" if t.board else None) if p)
            lines.append(f"{t.export}" + (f"  ({where})" if where else ""))
        label = f"{t.stage}  {t.metric}"
        values = " ".join(f"{v:>10.6g}" for _, _, v in t.points)
        span = f"   {t.points[0][0][:10]} → {t.points[-1][0][:10]}" if t.points else ""
        lines.append(f"  {label:<{width}}  {values}{span}")
        if t.drift:
            lines.append(f"    DRIFT: {t.drift}")
    drifts = sum(1 for t in found if t.drift)
    lines.append(f"{drifts} drift(s) flagged" if drifts else "no drift flagged")
    return "\n".join(lines)
