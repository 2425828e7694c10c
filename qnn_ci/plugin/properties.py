"""A stage item's pytest ``user_properties``: what its JUnit testcase and the plugin's
summary read (export, stage, status, summary, manifest and line, the result's numbers
and artefacts, its first warnings grouped, findings). Imported once a session has
qnn-ci items; a run of 1,200 items calls it 1,200 times."""

from __future__ import annotations

from typing import Any

from qnn_ci.engine.internal_error import crash_log
from qnn_ci.engine.results import Severity, StageResult
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.warning_lines import warning_properties, warning_texts
from qnn_ci.report.property_text import property_value


def item_properties(export: ExportSpec, stage: str, r: StageResult) -> list[tuple[str, Any]]:
    props: list[tuple[str, Any]] = [
        ("qnn.export", export.name), ("qnn.stage", stage),
        ("qnn.status", r.status.value), ("qnn.summary", r.summary),
        ("qnn.manifest", str(export.manifest)), ("qnn.line", export.line),
        ("qnn.cached", r.cached),
    ]
    # the first warnings grouped, with their count (the calibration stage sets them)
    extra = {k: v for k, v in warning_properties(warning_texts(r.findings)).items()
             if k not in r.properties}
    props += [(f"qnn.{k}", property_value(v)) for k, v in (r.properties | extra).items()]
    props += [(f"qnn.artefact.{k}", v) for k, v in r.artefacts.items()]
    crashed = crash_log(r)
    if crashed:   # the stage crashed: a bug in qnn-ci (the session exits 3)
        props.append(("qnn.internal_error", crashed))
    props += [("qnn.finding" if f.severity == Severity.ERROR else "qnn.warning",
               f"[{f.check}] {f.message}") for f in r.findings
              if f.severity != Severity.INFO]
    return props
