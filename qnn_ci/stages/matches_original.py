"""Stage `matches_original`: the adapted model (the export's model, pinned by
static_shapes) must compute what the framework export before graph surgery
(manifest ``original:``) computes, on every calibration and held-out sample,
before anything is quantized (``qnn_ci.shapes.original_match``).

Only for exports with ``original:``. The quantizing stages (sim_npu, dry_run,
convert) name it in ``gates``: when it fails they are blocked, and exports without
``original:`` keep their cache keys.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from qnn_ci.engine.cache import file_digest
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Stage, StageContext
from qnn_ci.errors import UserError

log = logging.getLogger(__name__)

LISTS = (("input_list", "calibration sample"), ("held_out_list", "held-out sample"))


def _digest(path: Path, key: str, ctx: StageContext) -> str:
    try:
        return file_digest(path)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}", file=ctx.export.manifest,
                        line=ctx.export.line, key=key) from None


class MatchesOriginalStage(Stage):
    name = "matches_original"
    needs = ("static_shapes", "calibration")
    marker = None
    settings = ("original", "inputs")

    def applies(self, export: ExportSpec) -> bool:
        return export.original is not None

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        assert ctx.export.original is not None
        from qnn_ci.model.signature import signature
        from qnn_ci.util.memo import MEMO_DIR

        original = ctx.export.original.model
        fp: dict[str, Any] = {"model": _digest(ctx.export.model, "model", ctx),
                              "original": _digest(original, "original", ctx)}
        fp["original_external_data"] = {
            name: file_digest(original.parent / name) if (original.parent / name).is_file()
            else "missing"
            for name in signature(original, ctx.env.workdir / MEMO_DIR).external_data}
        return fp

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.shapes.original_match import match_original
        from qnn_ci.sim.samples import inputs_from_data, load_samples

        spec = ctx.export.original
        assert spec is not None
        adapted = Path(ctx.upstream["static_shapes"].artefacts["model"])
        cal = ctx.upstream["calibration"]
        metas = inputs_from_data(cal.data["inputs"])
        lists = [(load_samples(Path(cal.artefacts[k]), metas), what)
                 for k, what in LISTS if k in cal.artefacts]
        samples = ((f"{what} {i}", sample) for listed, what in lists
                   for i, sample in enumerate(listed, start=1))
        match = match_original(adapted, spec.model, samples, bound=spec.cosine)
        report = ctx.workdir / "matches_original.json"
        report.write_text(json.dumps(match.to_dict(), indent=2) + "\n", "utf-8")
        findings = [Finding("original.note", note, Severity.INFO) for note in match.notes]
        if match.problem:
            findings.append(Finding("original.mismatch", match.problem, Severity.ERROR))
        for o in match.outputs:
            if o.note:
                findings.append(Finding("original.output", f"{o.output}: {o.note}",
                                        Severity.WARNING if o.passed else Severity.ERROR,
                                        subject=o.output))
            if not o.passed:
                findings.append(Finding(
                    "original.differs", f"output {o.output!r}: worst cosine {o.cosine:.6f} "
                    f"(bound {spec.cosine:g}), max_abs {o.max_abs:.3g} on {o.worst_sample}; "
                    f"fails on {o.failing_samples} of {match.samples} sample(s)",
                    Severity.ERROR, subject=o.output))
        status = Status.PASSED if match.passed else Status.FAILED
        return StageResult(self.name, status, match.summary(), findings,
                           properties=match.properties(), artefacts={"report": str(report)},
                           data={"original": str(spec.model), **match.to_dict()})
