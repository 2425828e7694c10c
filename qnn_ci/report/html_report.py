"""Writing the HTML report from what a run left (``qnn-ci report`` and
``pytest --qnn-html``): the stage results (JUnit files, the plugin's rows, a work
folder's cached results), a history file's trends and the baselines.

The baselines are read from ``--baselines`` or, when not given, from the
``qnn-baselines.yaml`` beside each manifest the results name (when there is one);
a baselines file that cannot be read is a note on the page, not a failure.
"""

from __future__ import annotations

import logging
from pathlib import Path

from qnn_ci.errors import UserError
from qnn_ci.report.html import Baselines, render, write
from qnn_ci.report.report_data import ReportInput, merge, read_workdir
from qnn_ci.report.trend_data import Trends, read_trends

log = logging.getLogger(__name__)


def _scope_matches(comparison: str, scope: str) -> bool:
    if comparison == "sim_vs_fp32":
        return scope == "simulator"
    if comparison.startswith("latency"):
        return scope.startswith("board:")
    return scope.startswith("board:")


def baseline_lookup(inp: ReportInput, explicit: Path | None) -> Baselines | None:
    """(export, property key) -> the baseline value, from the baselines file(s); None
    when there is none."""
    from qnn_ci import baselines as bl
    from qnn_ci.manifest import BASELINES_FILE

    if explicit is not None:
        if not explicit.exists():
            raise UserError("no baselines file here (write one with qnn-ci baseline update)",
                            file=explicit, key="--baselines")
        paths = [explicit]
    else:
        folders = {Path(e.manifest).parent for e in inp.entries if e.manifest}
        paths = [f / BASELINES_FILE for f in sorted(folders) if (f / BASELINES_FILE).is_file()]
    index: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for path in paths:
        try:
            loaded = bl.load(path)
        except UserError as exc:
            inp.notes.append(f"baselines not shown: {exc.oneline()}")
            continue
        for (export, _soc, scope), entry in (loaded.entries.items() if loaded else ()):
            for key, value in entry.metrics.items():
                index.setdefault((export, key), []).append((scope, float(value)))
    if not index:
        return None

    def lookup(export: str, key: str) -> float | None:
        comparison = key.split(".", 1)[0]
        for scope, value in index.get((export, key), []):
            if _scope_matches(comparison, scope):
                return value
        return None
    return lookup


def make_report(primary: ReportInput, out: Path, *, workdir: Path | None = None,
                history: Path | None = None, baselines: Path | None = None,
                title: str = "qnn-ci report") -> ReportInput:
    """Write the page to ``out``; returns what it showed."""
    inp = merge(primary, read_workdir(workdir)) if workdir is not None else primary
    trends: Trends | None = read_trends(history) if history is not None else None
    page = render(inp, trends=trends, baselines=baseline_lookup(inp, baselines), title=title)
    write(out, page)
    log.info("HTML report written: %s", out)
    return inp
