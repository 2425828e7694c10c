"""Writing the HTML report from what a run left (``qnn-ci report`` and
``pytest --qnn-html``): the stage results (JUnit files, the plugin's rows, a work
folder's cached results), a history file's trends and the baselines.

The baselines are read from ``--baselines`` or, when not given, from the file each
manifest names (``--manifest`` and the manifests the results name): its
``baselines:`` key, else the ``qnn-baselines.yaml`` beside it (when there is one);
a manifest or baselines file that cannot be read is a note on the page, not a
failure.
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


def _manifest_baselines(manifest: Path, notes: list[str], memo_dir: Path | None) -> Path:
    """The baselines file a manifest names (its ``baselines:`` key, else
    ``qnn-baselines.yaml`` beside it); a manifest that cannot be read is a note and
    the file beside it is used."""
    from qnn_ci.manifest.loader import BASELINES_FILE, load_manifest

    try:
        loaded = load_manifest(manifest, memo_dir=memo_dir)
    except UserError as exc:
        notes.append(f"manifest not read for its baselines: key (looking beside it): "
                     f"{exc.oneline()}")
        return manifest.parent / BASELINES_FILE
    return loaded.baselines or manifest.parent / BASELINES_FILE


def baseline_lookup(inp: ReportInput, explicit: Path | None, *,
                    manifests: list[Path] | None = None,
                    memo_dir: Path | None = None) -> Baselines | None:
    """(export, property key) -> the baseline value, from the baselines file(s); None
    when there is none. Without ``explicit``: the file each manifest names
    (``manifests`` and those the results name, when they exist; the manifest's
    ``baselines:`` key, else ``qnn-baselines.yaml`` beside it)."""
    from qnn_ci.nightly import baselines as bl

    if explicit is not None:
        if not explicit.exists():
            raise UserError("no baselines file here (write one with qnn-ci baseline update)",
                            file=explicit, key="--baselines")
        paths = [explicit]
    else:
        named = {Path(e.manifest) for e in inp.entries if e.manifest} | set(manifests or ())
        found: list[Path] = []
        for manifest in sorted(named):
            try:
                if not manifest.is_file():
                    continue
            except (OSError, ValueError):
                continue
            path = _manifest_baselines(manifest, inp.notes, memo_dir)
            if path not in found and path.is_file():
                found.append(path)
        paths = found
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
                manifests: list[Path] | None = None,
                title: str = "qnn-ci report") -> ReportInput:
    """Write the page to ``out``; returns what it showed."""
    from qnn_ci.util.memo import MEMO_DIR

    inp = merge(primary, read_workdir(workdir)) if workdir is not None else primary
    trends: Trends | None = read_trends(history) if history is not None else None
    memo = workdir / MEMO_DIR if workdir is not None else None   # the run's, when there
    lookup = baseline_lookup(inp, baselines, manifests=manifests,
                             memo_dir=memo if memo is not None and memo.is_dir() else None)
    page = render(inp, trends=trends, baselines=lookup, title=title)
    write(out, page)
    log.info("HTML report written: %s", out)
    return inp
