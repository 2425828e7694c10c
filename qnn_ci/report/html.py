"""The HTML report: ONE self-contained page (inline CSS, the charts -- matplotlib PNGs --
and the diagnosis plot as data: URIs; a Content-Security-Policy that forbids every fetch),
per export: the stage table with each stage's one-line reason, the per-output
metrics against their thresholds (and the baseline, when a qnn-baselines.yaml
has one), the error histogram of the worst output, the per-layer plot of a
diagnosis, and the metric / latency trends from a history file.

Every text from a run (export, output and file names, messages) is escaped.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.report.hub_links import hub_jobs
from qnn_ci.report.plots import ChartBatch, histogram_html, num, same_shown, trend_html
from qnn_ci.report.report_data import ReportInput, StageEntry, stage_order
from qnn_ci.report.trend_data import Trends
from qnn_ci.util.listing import cut_text

log = logging.getLogger(__name__)

PNG_CAP = 16 * 1024 * 1024
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
METRICS = ("cosine", "snr", "psnr", "max_abs", "mean_abs")
HIGHER_IS_BETTER = ("cosine", "snr", "psnr")
TRENDS_SHOWN = 8           # trend charts per export (the rest named)
_RANK = {"error": 0, "failed": 1, "passed": 2, "skipped": 3}

# (export, property key such as "sim_vs_fp32.logits.cosine") -> the baseline value
Baselines = Callable[[str, str], float | None]

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;
max-width:1200px;padding:16px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px;
border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px;margin:14px 0 4px}
.meta,.where{color:#666;font-size:12px}.where{font-weight:normal;margin-left:8px}
table{border-collapse:collapse;margin:4px 0 8px}td,th{border:1px solid #ddd;
padding:3px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.st{font-weight:600;white-space:nowrap;border-radius:3px;padding:1px 6px}
.passed{background:#dff3e0;color:#1b5e20}.failed{background:#fde0dc;color:#b71c1c}
.error{background:#ffe6c7;color:#8a4b00}.skipped{background:#eee;color:#555}
.ok{color:#1b5e20}.bad{color:#b71c1c;font-weight:600}.find{color:#b71c1c;font-size:12px}
.notes{background:#fff8e1;border:1px solid #f0d58a;padding:6px 10px}
.toc a{margin-right:10px;text-decoration:none}.charts{display:flex;flex-wrap:wrap;gap:10px}
.chart{margin:0;padding:4px 6px;border:1px solid #eee;background:#fcfcfc}
.chart figcaption{font-size:11px;font-weight:600;margin-bottom:2px}
.chart img{display:block}.cl{font-size:10px;color:#666}.cv{font-size:10px;color:#222}
.cells{display:flex;font-size:10px;color:#222}.cells span{flex:1;text-align:center}
.cells.cl{color:#666}.mid{text-align:center}.tw{display:flex;align-items:center;gap:4px}
.ya{display:flex;flex-direction:column;justify-content:space-between;height:72px;
width:52px;text-align:right}.tw .cv{width:52px}.xa{display:flex;
justify-content:space-between;margin:0 56px}
img.diag{max-width:min(100%,720px);border:1px solid #eee}.diagline{font-style:italic}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@dataclass
class _Export:
    """One export as the report shows it: where it is declared and its stage entries."""

    name: str
    manifest: str = ""
    line: int = 0
    stages: list[StageEntry] = field(default_factory=list)

    @property
    def status(self) -> str:
        if not self.stages:
            return "skipped"
        return min((s.status for s in self.stages), key=lambda s: _RANK.get(s, 9))


def _float(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(v) else v


def _badge(status: str) -> str:
    s = escape(status)
    return f'<span class="st {s}">{s}</span>'


# -- per-output metrics ----------------------------------------------------------

@dataclass
class _Metric:
    """One output metric from a stage's JUnit properties: its value, and its bound if any."""

    stage: str
    comparison: str            # property prefix, e.g. sim_vs_fp32
    output: str
    metric: str
    key: str                   # the property key (without "qnn.")
    value: str
    bound: float | None = None
    side: str = ""             # "min" | "max"


def _metrics(entry: StageEntry) -> list[_Metric]:
    """``<comparison>.<output>.<metric>`` properties with their ``.min`` / ``.max``
    bounds (an output name may hold dots: the comparison is the first part, the
    metric the last)."""
    props = entry.properties
    out: list[_Metric] = []
    for key, value in props.items():
        head, dot, metric = key.rpartition(".")
        if not dot or metric not in METRICS:
            continue
        comparison, dot, output = head.partition(".")
        if not dot or "_vs_" not in comparison or not output:
            continue
        m = _Metric(entry.stage, comparison, output, metric, key, value)
        for side in ("min", "max"):
            bound = _float(props.get(f"{key}.{side}"))
            if bound is not None:
                m.bound, m.side = bound, side
        out.append(m)
    return out


def _verdict(m: _Metric) -> str:
    v = _float(m.value)
    if m.bound is None:
        return ""
    if v is None:
        return '<span class="bad">not a number</span>'
    ok = v >= m.bound if m.side == "min" else v <= m.bound
    sign = "≥" if m.side == "min" else "≤"
    return (f'<span class="ok">{sign} {escape(num(m.bound))} ✓</span>' if ok
            else f'<span class="bad">{sign} {escape(num(m.bound))} ✗</span>')


def _baseline_cell(m: _Metric, export: str, baselines: Baselines | None) -> str:
    base = baselines(export, m.key) if baselines else None
    v = _float(m.value)
    if base is None:
        return "<td>–</td>"
    delta = ""
    if v is not None:
        if same_shown(v, base):       # equal at the digits shown: unchanged, no arrow
            delta = ' <span class="ok">=</span>'
        else:
            worse = v < base if m.metric in HIGHER_IS_BETTER else v > base
            delta = f' <span class="{"bad" if worse else "ok"}">{"▼" if worse else "▲"}</span>'
    return f'<td class="n">{escape(num(base))}{delta}</td>'


def _metrics_table(export: str, entries: list[StageEntry], baselines: Baselines | None) -> str:
    rows = [m for e in entries for m in _metrics(e)]
    if not rows:
        return ""
    has_base = baselines is not None
    head = ("<tr><th>stage</th><th>comparison</th><th>output</th><th>metric</th>"
            "<th>value</th><th>threshold</th>" + ("<th>baseline</th>" if has_base else "")
            + "</tr>")
    body = []
    for m in rows:
        v = _float(m.value)
        body.append(
            f"<tr><td>{escape(m.stage)}</td><td>{escape(m.comparison)}</td>"
            f"<td>{escape(m.output)}</td><td>{escape(m.metric)}</td>"
            f'<td class="n">{escape(num(v) if v is not None else m.value)}</td>'
            f"<td>{_verdict(m)}</td>"
            + (_baseline_cell(m, export, baselines) if has_base else "") + "</tr>")
    return "<h3>Metrics per output</h3><table>" + head + "".join(body) + "</table>"


def _latency_table(entries: list[StageEntry]) -> str:
    rows = [(e.stage, k, v) for e in entries for k, v in e.properties.items()
            if k.startswith(("latency.", "load."))]   # context_run's load time too
    if not rows:
        return ""
    return ("<h3>Latency</h3><table><tr><th>stage</th><th>property</th><th>value</th></tr>"
            + "".join(f"<tr><td>{escape(s)}</td><td>{escape(k)}</td>"
                      f'<td class="n">{escape(v)}</td></tr>' for s, k, v in rows)
            + "</table>")


# -- the worst output's error histogram --------------------------------------------

def _worst_histogram(entries: list[StageEntry], batch: ChartBatch) -> str:
    """The histogram of the sample with the lowest cosine (else the largest max_abs)
    over the stages' comparison data."""
    best: tuple[tuple[float, float], str, str, Any, list[Any]] | None = None
    for e in entries:
        comp = e.data.get("comparison")
        outputs = comp.get("outputs") if isinstance(comp, dict) else None
        for out in outputs if isinstance(outputs, list) else []:
            if not isinstance(out, dict) or not isinstance(out.get("samples"), list):
                continue
            for s in out["samples"]:
                metrics = s.get("metrics") if isinstance(s, dict) else None
                hist = metrics.get("histogram") if isinstance(metrics, dict) else None
                if not isinstance(hist, list) or not hist:
                    continue
                cos = _float(metrics.get("cosine"))
                mx = _float(metrics.get("max_abs"))
                rank = (cos if cos is not None else 2.0, -(mx or 0.0))
                if best is None or rank < best[0]:
                    best = (rank, e.stage, str(out.get("name", "?")), s.get("sample"), hist)
    if best is None:
        return ""
    buckets = []
    for b in best[4]:
        if isinstance(b, list) and len(b) == 3:
            low, high, count = _float(b[0]), _float(b[1]), _float(b[2])
            if low is not None and high is not None and count is not None \
                    and 0 <= count < 1e18:
                buckets.append((low, high, int(count)))
    if not buckets:
        return ""
    title = f"{best[2]} (sample {best[3]}, {best[1]}): error distribution"
    return ("<h3>Error distribution of the worst output</h3>"
            f'<div class="charts">{histogram_html(buckets, title=title, batch=batch)}</div>')


# -- the diagnosis plot -------------------------------------------------------------

def _png_uri(path: str) -> tuple[str | None, str]:
    from qnn_ci.util.safe_read import read_bytes

    try:
        raw = read_bytes(path, cap=PNG_CAP, what="diagnosis plot")
    except UserError as exc:
        return None, exc.oneline()
    except (OSError, ValueError) as exc:
        return None, f"{path}: {exc}"
    if not raw.startswith(PNG_MAGIC):
        return None, f"{path}: not a PNG file"
    return "data:image/png;base64," + base64.b64encode(raw).decode("ascii"), ""


def _diagnosis(entries: list[StageEntry], notes: list[str]) -> str:
    parts = []
    for e in entries:
        headline = e.properties.get("diagnosis.headline")
        png = e.properties.get("diagnosis.artefact.png")
        if not headline and not png:
            continue
        parts.append(f"<h3>Diagnosis of {escape(e.stage)}</h3>")
        if headline:
            parts.append(f'<p class="diagline">{escape(headline)}</p>')
        if png:
            uri, why = _png_uri(png)
            if uri:
                parts.append(f'<img class="diag" alt="per-layer metrics of '
                             f'{escape(e.export)}::{escape(e.stage)}" src="{uri}">')
            else:
                notes.append(f"{e.export}::{e.stage}: per-layer plot not embedded: {why}")
    return "".join(parts)


# -- trends --------------------------------------------------------------------------

def _trend_rank(label: str) -> tuple[int, str]:
    for i, word in enumerate(("latency", "cosine", "snr", "max_abs")):
        if word in label:
            return i, label
    return 9, label


def _trends(export: str, trends: Trends | None, batch: ChartBatch) -> str:
    series = trends.series.get(export, {}) if trends else {}
    if not trends or not series:
        return ""
    labels = sorted(series, key=lambda lab: ((export, lab) not in trends.drifts,
                                             *_trend_rank(lab)))
    shown, rest = labels[:TRENDS_SHOWN], labels[TRENDS_SHOWN:]
    drifts = "".join(f'<div class="bad">drift: {escape(lab)}: '
                     f"{escape(trends.drifts[(export, lab)])}</div>"
                     for lab in labels if (export, lab) in trends.drifts)
    charts = "".join(trend_html(series[lab], title=lab, batch=batch) for lab in shown)
    more = (f'<p class="meta">+{len(rest)} more series: '
            f"{escape(cut_text(rest, 20))}</p>"
            if rest else "")
    return f'<h3>Trends</h3>{drifts}<div class="charts">{charts}</div>{more}'


# -- the page --------------------------------------------------------------------------

def _exports(inp: ReportInput, trends: Trends | None) -> list[_Export]:
    order = stage_order()
    by_name: dict[str, _Export] = {}
    for e in inp.entries:
        ex = by_name.setdefault(e.export, _Export(e.export, e.manifest, e.line))
        ex.stages.append(e)
    for name in (trends.series if trends else {}):
        by_name.setdefault(name, _Export(name))
    for ex in by_name.values():
        ex.stages.sort(key=lambda s: (order.get(s.stage, 99), s.stage))
    return sorted(by_name.values(), key=lambda x: (_RANK.get(x.status, 9)
                                                   if x.stages else 4, x.name))


def _stage_table(ex: _Export) -> str:
    if not ex.stages:
        return '<p class="meta">no stage results for this export in this report</p>'
    rows = []
    for s in ex.stages:
        finds = "".join(f'<div class="find">↳ {escape(f)}</div>' for f in s.findings[:8]
                        if f not in s.summary)
        if len(s.findings) > 8:
            finds += f'<div class="find">(+{len(s.findings) - 8} more)</div>'
        jobs = hub_jobs(s.properties)
        if jobs:
            finds += '<div class="find">AI Hub: ' + ", ".join(
                f'<a href="{escape(url)}">{escape(kind)} job {escape(job)}</a>'
                for kind, job, url in jobs) + "</div>"
        cached = ' <span class="meta">(cached)</span>' \
            if s.properties.get("cached", "").lower() == "true" else ""
        rows.append(f"<tr><td>{escape(s.stage)}</td><td>{_badge(s.status)}</td>"
                    f"<td>{escape(s.summary)}{cached}{finds}</td></tr>")
    return ("<table><tr><th>stage</th><th>result</th><th>details</th></tr>"
            + "".join(rows) + "</table>")


def render(inp: ReportInput, *, trends: Trends | None = None,
           baselines: Baselines | None = None, title: str = "qnn-ci report",
           generated: str | None = None) -> str:
    """The whole page as text."""
    notes = list(inp.notes) + (list(trends.notes) if trends else [])
    exports = _exports(inp, trends)
    generated = generated or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    counts: dict[str, int] = {}
    for e in inp.entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    count_text = " · ".join(f"{_badge(s)} {counts[s]}" for s in
                            ("failed", "error", "passed", "skipped") if counts.get(s))
    sections = []
    batch = ChartBatch()
    for i, ex in enumerate(exports):
        where = (f'<span class="where">{escape(os.path.basename(ex.manifest))}'
                 f"{':' + str(ex.line) if ex.line else ''}</span>" if ex.manifest else "")
        parts = [f'<section id="e{i}"><h2>{escape(ex.name)} {_badge(ex.status)}{where}</h2>',
                 _stage_table(ex), _metrics_table(ex.name, ex.stages, baselines),
                 _latency_table(ex.stages), _worst_histogram(ex.stages, batch),
                 _trends(ex.name, trends, batch), _diagnosis(ex.stages, notes), "</section>"]
        sections.append("".join(parts))
    body = batch.fill("".join(sections), notes)
    toc = " ".join(f'<a href="#e{i}">{escape(ex.name)}</a>{_badge(ex.status)}'
                   for i, ex in enumerate(exports))
    note_html = ('<div class="notes"><b>Not everything could be read:</b><ul>'
                 + "".join(f"<li>{escape(n)}</li>" for n in notes[:50])
                 + (f"<li>+{len(notes) - 50} more</li>" if len(notes) > 50 else "")
                 + "</ul></div>") if notes else ""
    body = body or '<p>No qnn-ci results were found in the given inputs.</p>'
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1><p class=\"meta\">{escape(generated)} · "
            f"{len(exports)} export(s) {count_text}</p>{note_html}"
            f'<p class="toc">{toc}</p>{body}</body></html>\n')


def write(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``; a failure is one ``UserError`` line."""
    if not path.name or path.name in (".", ".."):
        raise UserError("give a file name for the HTML report", file=path, key="-o")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8", errors="replace")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write the HTML report: {exc.strerror or exc}",
                        file=path) from None
