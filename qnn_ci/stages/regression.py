"""Stage `regression`: compare what this run measured (sim_npu's nodes on the HTP,
sim_numerics' metrics, model_lib's library size, htp_vs_cpu's metrics and latency)
with the export's entries in the baselines file (``qnn_ci.nightly.baselines``), with the
tolerances of ``qnn_ci.nightly.regression``.

It reads those stages whatever their status (``reads``: a failed numeric stage
still measured something) and is never blocked by them. Nothing measured (the
stages skipped or not planned) is a skip with the reason; a missing baseline is a
skip with the command that creates it, never a pass.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from qnn_ci.engine.cache import digest
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.nightly import baselines as bl
from qnn_ci.util.listing import cut_text

log = logging.getLogger(__name__)

SHOWN = 3        # lines in the summary before "(+N more)"


def update_command(export: ExportSpec) -> str:
    try:
        manifest = os.path.relpath(export.manifest)
    except ValueError:
        manifest = str(export.manifest)
    return f"qnn-ci baseline update {manifest} --export {export.name}"


def baselines_path(export: ExportSpec) -> Path:
    from qnn_ci.manifest.loader import BASELINES_FILE

    return export.regression.baselines or export.manifest.parent / BASELINES_FILE


class RegressionStage(Stage):
    name = "regression"
    reads = bl.STAGES
    settings = ("regression",)      # the SoC and board: in the entries it compares
    version = 1
    cache_skips = True   # every skip follows from the fingerprint (measured, entries)

    def applies(self, export: ExportSpec) -> bool:
        return export.regression.enabled

    def settled(self, ctx: StageContext) -> StageResult | None:
        """Nothing measured (every stage it reads skipped, errored or not planned): a
        skip that needs no baselines file, fingerprint or cache -- unless the
        tolerances are wrong, which run() reports."""
        from qnn_ci.nightly.regression import check_tolerances

        if bl.measured(ctx.upstream, ctx.export.board) or \
                check_tolerances(ctx.export.regression.tolerances):
            return None
        return self._skip(_nothing_measured(ctx))

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        """What is compared: the numbers measured and the baseline entries for them."""
        export = ctx.export
        scopes = bl.measured(ctx.upstream, export.board)
        path = baselines_path(export)
        try:
            found = bl.load(path)
        except UserError:
            found = None          # run() says what is wrong with it
            entries: Any = "unreadable"
        else:
            soc = bl.soc_key(export.target.soc)
            entries = {s: found.get(export.name, soc, s).to_yaml()  # type: ignore[union-attr]
                       for s in scopes if found is not None and found.get(export.name, soc, s)}
        return {"measured": digest(scopes), "baselines": digest(entries),
                "file": found is not None,
                # a skip is cached too (cache_skips): the reasons it would repeat
                "not_ok": {n: f"{r.status.value}: {r.summary}"
                           for n, r in sorted(ctx.upstream.items()) if not r.ok}}

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.nightly.regression import check_tolerances, compare

        export = ctx.export
        problem = check_tolerances(export.regression.tolerances)
        if problem:
            raise UserError(problem, file=export.manifest, line=export.line,
                            key=f"exports.{export.name}.regression.tolerances")
        scopes = bl.measured(ctx.upstream, export.board)
        if not scopes:
            return self._skip(_nothing_measured(ctx))
        path = baselines_path(export)
        found = bl.load(path)
        if found is None:
            return self._skip(f"no baselines file {path}: create it with "
                              f"`{update_command(export)}` (after a run)")
        soc = bl.soc_key(export.target.soc)
        findings: list[Finding] = []
        worse: list[str] = []
        missing: list[str] = []
        compared = 0
        props: dict[str, Any] = {"baselines": str(path)}
        for scope, now in sorted(scopes.items()):
            entry = found.get(export.name, soc, scope)
            if entry is None:
                missing.append(scope)
                continue
            now, note = _same_latency_method(ctx, scope, now, entry)
            if note:
                findings.append(Finding("regression.latency_method", note, Severity.WARNING,
                                        scope))
            out = compare(now, entry, export.regression.tolerances)
            compared += out.compared
            props[f"{scope}.compared"] = out.compared
            props[f"{scope}.baseline_commit"] = entry.commit
            for line in out.worse:
                findings.append(Finding("regression.worse", line, Severity.ERROR, scope))
            for line in out.improved:
                findings.append(Finding(
                    "regression.improved", f"improved: {line} (update the baseline: "
                    f"{update_command(export)})", Severity.INFO, scope))
            if out.not_measured:
                findings.append(Finding(
                    "regression.not_measured", "in the baseline, not measured in this run: "
                    + cut_text(out.not_measured, SHOWN), Severity.WARNING, scope))
            if out.new:
                findings.append(Finding(
                    "regression.new", "measured, not in the baseline: "
                    + cut_text(out.new, SHOWN), Severity.INFO, scope))
            worse += out.worse
        props["worse"] = len(worse)
        props["improved"] = sum(f.check == "regression.improved" for f in findings)
        if worse:
            summary = (f"{len(worse)} metric(s) worse than the baseline: "
                       + cut_text(worse, SHOWN, sep="; "))
            return StageResult(self.name, Status.FAILED, summary, findings, properties=props)
        if missing:
            where = ", ".join(missing)
            reason = (f"no baseline for {export.name} on {soc} ({where}) in {path}: create "
                      f"it with `{update_command(export)}`")
            if compared:
                reason += f" ({compared} other metric(s) within tolerance)"
            return StageResult(self.name, Status.SKIPPED, reason, findings, properties=props,
                               data={"reason": reason})
        summary = f"{compared} metric(s) within tolerance of the baseline"
        if props["improved"]:
            summary += f"; {props['improved']} improved (update the baseline)"
        return StageResult(self.name, Status.PASSED, summary, findings, properties=props)

    def _skip(self, reason: str) -> StageResult:
        return StageResult(self.name, Status.SKIPPED, reason, data={"reason": reason})


def _same_latency_method(ctx: StageContext, scope: str, now: dict[str, float],
                         entry: bl.Entry) -> tuple[dict[str, float], str | None]:
    """Latency from a profile and from timed runs are not compared with each other."""
    then = entry.versions.get(bl.LATENCY_METHOD)
    here = bl.versions_of(ctx.upstream, scope).get(bl.LATENCY_METHOD) \
        if scope.startswith(bl.BOARD) else None
    if not then or not here or then == here:
        return now, None
    return ({k: v for k, v in now.items() if not k.startswith("latency.")},
            f"latency not compared: measured by {here} here, by {then} in the baseline "
            f"(update the baseline: {update_command(ctx.export)})")


def _nothing_measured(ctx: StageContext) -> str:
    said = [f"{name} {r.status.value}: {r.data.get('reason') or r.summary}"
            for name, r in ctx.upstream.items()]
    if not said:
        return ("nothing to compare: no numeric stage runs for this export here "
                "(sim_numerics needs target.soc and onnxruntime-qnn, htp_vs_cpu a board; "
                "stages not selected are not run for it)")
    return "nothing to compare: " + "; ".join(said)
