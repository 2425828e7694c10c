"""Stage `encodings`: check the AIMET ``.encodings`` file given as
``quantization.overrides`` against the pinned model, before any conversion.

Fails when the file names tensors the model does not have (the converter
ignores them silently: usually a file for a different model) and when its
bitwidths disagree with the export's act/weights/bias bitwidths; warns about
quantizable tensors the file leaves to ``--input_list`` calibration. Tensors a
real AIMET export leaves out because the converter derives them (data-movement
outputs, fused outputs, biases, BatchNorm parameters: ``qnn_ci.sdk.encoding_roles``)
are counted in one INFO finding, not warned about.
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
from qnn_ci.tables import find_soc

log = logging.getLogger(__name__)

SHOW = 10          # names listed in one finding
MAX_FINDINGS = 20  # per-tensor findings before the rest are summarised


def _names(names: list[str]) -> str:
    more = f" ... and {len(names) - SHOW} more" if len(names) > SHOW else ""
    return ", ".join(names[:SHOW]) + more


class EncodingsStage(Stage):
    name = "encodings"
    settings = ("model", "quantization", "target")
    needs = ("static_shapes",)
    marker = None

    def applies(self, export: ExportSpec) -> bool:
        return export.quantization.overrides is not None

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        path = ctx.export.quantization.overrides
        try:
            digest = file_digest(Path(path)) if path else None   # streamed, not read whole
        except OSError:
            digest = "unreadable"
        return {"overrides_sha256": digest}

    def run(self, ctx: StageContext) -> StageResult:
        # onnx (via these) only when the stage runs: a cached re-run needs none of it
        from qnn_ci.sdk.encoding_roles import derived_text
        from qnn_ci.sdk.encodings import read_encodings
        from qnn_ci.sdk.encodings_coverage import (
            bitwidth_mismatches,
            coverage,
            float_entries,
            load_model,
        )

        export = ctx.export
        q = export.quantization
        assert q.overrides is not None
        enc = read_encodings(q.overrides)            # UserError -> the engine reports it
        model_path = Path(ctx.upstream["static_shapes"].artefacts["model"])
        cov = coverage(enc, load_model(model_path))
        c = cov.counts
        fname = Path(q.overrides).name
        findings: list[Finding] = []

        if cov.none_match:
            findings.append(Finding(
                "encodings.model_mismatch",
                f"none of the {c['file_entries']} tensor names in {fname} exist in "
                f"{export.model.name}: the encodings file is for a different model "
                f"(e.g. {_names(cov.unknown[:3])})", Severity.ERROR))
        elif cov.unknown:
            findings.append(Finding(
                "encodings.unknown",
                f"{len(cov.unknown)} of {c['file_entries']} names in {fname} are not in the "
                f"model (the converter ignores them silently): {_names(cov.unknown)}",
                Severity.ERROR))
        for unknown, real in list(cov.sanitised.items())[:SHOW]:
            findings.append(Finding(
                "encodings.sanitised_name",
                f"{unknown!r} is the converter-sanitised form of {real!r}; AIMET encodings "
                f"must name ONNX tensors", Severity.INFO, unknown))

        mism = bitwidth_mismatches(enc, cov, act_bitwidth=q.act_bitwidth,
                                   weights_bitwidth=q.weights_bitwidth,
                                   bias_bitwidth=q.bias_bitwidth)
        for tensor, text in mism[:MAX_FINDINGS]:
            findings.append(Finding("encodings.bitwidth", text, Severity.ERROR, tensor))
        if len(mism) > MAX_FINDINGS:
            findings.append(Finding("encodings.bitwidth",
                                    f"... and {len(mism) - MAX_FINDINGS} more bitwidth "
                                    f"mismatches", Severity.ERROR))

        soc = find_soc(export.target.soc) if export.target.soc else None
        fp16 = [n for n, bw in float_entries(enc) if bw == 16]
        if fp16:
            risk = (f"; {soc.name} (HTP {soc.arch_name}) has no FP16, so a float tensor makes "
                    f"the context binary build abort" if soc and not soc.fp16 else "")
            findings.append(Finding(
                "encodings.float", f"{len(fp16)} float16 encoding(s) ask for FP16 tensors "
                f"({_names(fp16)}){risk}", Severity.WARNING))

        if cov.derived:
            findings.append(Finding(
                "encodings.derived", f"{len(cov.derived)} tensor(s) without encodings in "
                f"{fname} need none: {derived_text(cov.derived_counts())}", Severity.INFO))
        if cov.uncovered_activations:
            findings.append(Finding(
                "encodings.uncovered",
                f"{len(cov.uncovered_activations)} of {c['model_activations']} float "
                f"activations are not in {fname}; their ranges come from --input_list "
                f"calibration: {_names(cov.uncovered_activations)}", Severity.WARNING))
        if cov.uncovered_params:
            findings.append(Finding(
                "encodings.uncovered",
                f"{len(cov.uncovered_params)} of {c['model_params']} float weights are not "
                f"in {fname}; the converter computes their ranges from the values: "
                f"{_names(cov.uncovered_params)}", Severity.WARNING))
        for note in enc.notes:
            findings.append(Finding("encodings.note", note, Severity.INFO))

        failed = any(f.severity == Severity.ERROR for f in findings)
        if failed:
            summary = next(f.message for f in findings if f.severity == Severity.ERROR)
        else:
            summary = (f"{c['known']} encodings match the model (v{enc.version}); "
                       f"{c['covered_activations']}/{c['model_activations']} activations, "
                       f"{c['covered_params']}/{c['model_params']} weights covered, "
                       f"{len(cov.derived)} derived by the converter, "
                       f"{len(cov.uncovered)} left to --input_list")
        report = ctx.workdir / "encodings.json"
        report.write_text(json.dumps({"encodings": enc.to_dict(), "model": str(model_path),
                                      "coverage": cov.to_dict(),
                                      "findings": [f.to_dict() for f in findings]},
                                     indent=2), "utf-8")
        bitwidths = sorted(enc.bitwidths)
        return StageResult(
            self.name, Status.FAILED if failed else Status.PASSED, summary, findings,
            properties={"encodings_version": enc.version,
                        "encodings_bitwidths": ",".join(str(b) for b in bitwidths),
                        "encodings_known": c["known"], "encodings_unknown": c["unknown"],
                        "activations_covered": c["covered_activations"],
                        "activations_uncovered": c["uncovered_activations"],
                        "params_covered": c["covered_params"],
                        "params_uncovered": c["uncovered_params"],
                        "derived_by_converter": len(cov.derived)},
            artefacts={"report": str(report)},
            data={"version": enc.version, "bitwidths": bitwidths, "counts": dict(c)},
        )
