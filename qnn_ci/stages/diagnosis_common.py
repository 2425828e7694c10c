"""What the numeric stages (sim_numerics, htp_vs_cpu) share to diagnose a failure:
run the diagnosis guarded (a diagnosis that fails never turns the numeric FAIL into
an internal error: it becomes a warning finding), and fold a ``Diagnosis`` into the
stage's result — JUnit properties ``qnn.diagnosis.*``, ``data["diagnosis"]``, the
artefacts, and the text the failure shows (headline, the best recipe's YAML)."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING

from qnn_ci.engine.results import Finding, Severity, StageResult

if TYPE_CHECKING:
    from qnn_ci.diagnose.model import Diagnosis

log = logging.getLogger(__name__)

TEXT_KEY = "diagnosis_text"        # StageResult.data key read by failure_text()
JUMPS_SHOWN = 3


def progress_logger(export: str, stage: str,
                    sink: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """The progress callback: one INFO line per phase / recipe, and the same line to
    the shell's progress ``sink`` (``Environment.progress``: `qnn-ci run` prints it on
    stderr by default; pytest shows the log with ``--log-cli-level=INFO``)."""
    def progress(line: str) -> None:
        log.info("%s::%s: diagnosis: %s", export, stage, line)
        if sink is not None:
            sink(f"{export}::{stage}: diagnosis: {line}")
    return progress


def best_recipe_text(d: Diagnosis) -> str:
    """The best passing recipe as manifest YAML to paste and its converter flags."""
    best = next((r for r in d.recipes if r.passes), None)
    if best is None:
        return ""
    lines = []
    if best.yaml:
        lines += ["paste into the export in qnn-ci.yaml:",
                  textwrap.indent(best.yaml.rstrip("\n"), "    ")]
    if best.flags:
        lines.append("converter flags: " + " ".join(best.flags))
    return "\n".join(lines)


def jumps_line(d: Diagnosis, shown: int = JUMPS_SHOWN) -> str:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"
    items = [f"{m.tensor!r} ({m.op_type}) -{fmt(m.jump)}" for m in d.worst_jumps[:shown]]
    more = len(d.worst_jumps) - shown
    return ", ".join(items) + (f" (+{more} more)" if more > 0 else "")


def diagnosis_text(d: Diagnosis) -> str:
    lines = [d.headline()]
    if d.worst_jumps:
        lines.append("worst jumps (cosine drop at the node): " + jumps_line(d))
    recipe = best_recipe_text(d)
    if recipe:
        lines.append(recipe)
    elif d.advice:
        lines += d.advice[1:]                      # the first is in the headline
    if d.artefacts:
        lines.append("per-layer report: " + ", ".join(
            f"{k} {v}" for k, v in sorted(d.artefacts.items())))
    return "\n".join(lines)


def attach(result: StageResult, d: Diagnosis) -> StageResult:
    """``result`` with the diagnosis folded in (status untouched)."""
    result.properties |= d.properties()
    result.properties["diagnosis.headline"] = d.headline()
    if d.detail:
        result.properties["diagnosis.detail"] = d.detail
    if d.worst_jumps:
        result.properties["diagnosis.worst_jumps"] = jumps_line(d)
    recipe = best_recipe_text(d)
    if recipe:
        result.properties["diagnosis.fix"] = recipe
    result.data["diagnosis"] = d.to_dict()
    result.data[TEXT_KEY] = diagnosis_text(d)
    for name, path in d.artefacts.items():
        result.artefacts[f"diagnosis_{name}"] = path
    return result


def guarded(result: StageResult, run: Callable[[], Diagnosis | None]) -> StageResult:
    """Run the diagnosis and attach it; an exception becomes the warning finding
    ``diagnosis.failed`` (traceback at DEBUG), the stage's result stands."""
    try:
        d = run()
    except Exception as exc:     # never turn a numeric FAIL into a crash
        text = " ".join(str(exc).split()) or type(exc).__name__
        log.debug("diagnosis of %s failed", result.stage, exc_info=True)
        result.findings.append(Finding("diagnosis.failed", f"diagnosis failed: {text}",
                                       Severity.WARNING))
        result.properties["diagnosis.error"] = text
        return result
    return attach(result, d) if d is not None else result
