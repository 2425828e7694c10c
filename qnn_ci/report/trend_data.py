"""The trends the HTML report draws, from a history file (JSON lines, one record per
run x export x stage: ``{"date", "commit", "export", "stage", "soc", "board",
"metrics": {name: value}}``, what ``qnn-ci history add`` appends; read by
``qnn_ci.nightly.history.read_history``: any bytes give records or one ``UserError`` line).
The drift of each series is ``qnn_ci.nightly.trends``' rule (docs/history.md); only
measurements are series (``qnn_ci.nightly.history.is_metric``: no counter such as the
regression check's worse / improved, even in a history an older qnn-ci wrote).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

LAST = 30                            # points per series drawn


@dataclass(frozen=True)
class Point:
    """One point of a trend series: the run's date and commit, and the metric's value."""

    date: str
    commit: str
    value: float


@dataclass
class Trends:
    """The trend series of each export, the drifts flagged in them, and notes for the page."""

    # export -> series label -> points, oldest first
    series: dict[str, dict[str, list[Point]]] = field(default_factory=dict)
    drifts: dict[tuple[str, str], str] = field(default_factory=dict)   # (export, label)
    notes: list[str] = field(default_factory=list)


def label(metric: str, stage: str, soc: str | None, board: str | None) -> str:
    where = [w for w in (stage, soc, board) if w]
    return f"{metric} ({', '.join(where)})"


def read_trends(path: Path, *, last: int = LAST) -> Trends:
    """Per export and metric (labelled with its stage, SoC and board), the last
    ``last`` values by date, and the drifts flagged."""
    from qnn_ci.nightly.history import read_history
    from qnn_ci.nightly.trends import trends

    out = Trends()
    for t in trends(read_history(path), last=last):
        name = label(t.metric, t.stage, t.soc, t.board)
        out.series.setdefault(t.export, {})[name] = [Point(d, c, float(v))
                                                     for d, c, v in t.points]
        if t.drift:
            out.drifts[(t.export, name)] = t.drift
    return out
