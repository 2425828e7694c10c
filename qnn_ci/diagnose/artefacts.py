"""The diagnosis artefacts in a work folder: ``layers.csv`` (per-tensor metrics
in topological order), ``diagnosis.json`` (``Diagnosis.to_dict()``) and
``layers.png`` (cosine and worst-channel cosine by depth, the bound as a line,
the first divergence marked; matplotlib with the Agg backend, imported only
here; without matplotlib the PNG is skipped with a note)."""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from qnn_ci.diagnose.model import Diagnosis, LayerMetrics

log = logging.getLogger(__name__)

CSV_FIELDS = ("index", "tensor", "node", "op_type", "cosine", "worst_channel_cosine",
              "worst_channel", "channel_axis", "snr_db", "max_abs", "crosses", "jump", "note")


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return value


def write_csv(layers: Sequence[LayerMetrics], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_FIELDS)
        for m in layers:
            writer.writerow([_cell(getattr(m, k)) for k in CSV_FIELDS])
    return path


def write_json(diagnosis: Diagnosis, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(diagnosis.to_dict(), indent=2), "utf-8")
    return path


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def write_png(diagnosis: Diagnosis, path: Path, bound: float | None) -> str | None:
    """Plot the layers; returns a note instead when it cannot."""
    measured = [m for m in diagnosis.layers if m.cosine is not None]
    if not measured:
        return "layers.png not drawn: no tensor was compared"
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        from matplotlib import pyplot as plt
    except ImportError:
        return "layers.png not drawn: matplotlib is not installed (pip install 'qnn-ci[sim]')"
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    try:
        xs = [m.index for m in measured]
        ax.plot(xs, [_finite(m.cosine) for m in measured], ".-", lw=1, ms=3,
                label="cosine (tensor)")
        ch = [(m.index, _finite(m.worst_channel_cosine)) for m in measured
              if m.worst_channel_cosine is not None]
        if ch:
            ax.plot([c[0] for c in ch], [c[1] for c in ch], "x", ms=6,
                    label="worst-channel cosine")
        if bound is not None:
            ax.axhline(bound, color="red", ls="--", lw=1, label=f"bound {bound:g}")
        fd = diagnosis.first_divergence
        if fd is not None:
            ax.axvline(fd.index, color="orange", lw=1)
            ax.annotate(f"first divergence: {fd.tensor}", (fd.index, 1.0),
                        textcoords="offset points", xytext=(4, -12), fontsize=8,
                        color="darkorange")
        ax.set_xlabel("tensor (topological index)")
        ax.set_ylabel("cosine vs fp32" if diagnosis.path == "qdq-cpu" else "cosine")
        ax.set_title(f"per-layer metrics ({diagnosis.path}): {diagnosis.attribution}")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower left", fontsize=8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return None


def write_artefacts(diagnosis: Diagnosis, out_dir: Path, bound: float | None) -> None:
    """Write the three files into ``out_dir``, record them in
    ``diagnosis.artefacts`` (and a note for a skipped PNG); JSON last, so it
    lists the others."""
    out_dir.mkdir(parents=True, exist_ok=True)
    diagnosis.artefacts["csv"] = str(write_csv(diagnosis.layers, out_dir / "layers.csv"))
    png = out_dir / "layers.png"
    note = write_png(diagnosis, png, bound)
    if note is None:
        diagnosis.artefacts["png"] = str(png)
    else:
        png.unlink(missing_ok=True)
        diagnosis.notes.append(note)
        log.info("%s", note)
    json_path = out_dir / "diagnosis.json"
    diagnosis.artefacts["json"] = str(json_path)
    write_json(diagnosis, json_path)
