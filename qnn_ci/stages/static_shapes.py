"""Stage `static_shapes`: pin the export's input shapes, make every interior
tensor static (onnx inference, then an onnxruntime fill), check the pinned model
computes what the original does, and write `<model stem>.static.onnx` for the
stages downstream."""

from __future__ import annotations

import json
import logging
from typing import Any

from qnn_ci.cache import file_digest
from qnn_ci.errors import UserError
from qnn_ci.results import StageResult, Status
from qnn_ci.shapes import ShapeReport, analyse_and_pin
from qnn_ci.stage import Stage, StageContext

log = logging.getLogger(__name__)


def _io(report_ios: list[Any]) -> list[dict[str, Any]]:
    return [{"name": io.name, "dtype": io.dtype,
             "shape": None if io.shape is None else list(io.shape)} for io in report_ios]


def stage_result(report: ShapeReport, artefacts: dict[str, str]) -> StageResult:
    return StageResult(
        stage=StaticShapesStage.name,
        status=Status.PASSED if report.ok else Status.FAILED,
        summary=report.summary(),
        findings=list(report.findings),
        properties={"dynamic_count": len(report.dynamic_tensors),
                    "unshaped_count": len(report.unshaped_tensors),
                    "filled_count": len(report.filled_tensors),
                    "equivalent": report.equivalent},
        artefacts=artefacts,
        data={"inputs": _io(report.inputs), "outputs": _io(report.outputs)},
    )


class StaticShapesStage(Stage):
    name = "static_shapes"
    needs = ()
    marker = None
    settings = ("model", "inputs", "opset")

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        model = ctx.export.model
        if not model.is_file():
            raise UserError(f"model not found: {model}", file=ctx.export.manifest,
                            line=ctx.export.line, key="model")
        return {"model_sha256": file_digest(model)}

    def run(self, ctx: StageContext) -> StageResult:
        export = ctx.export
        stem = export.model.stem
        out_model = ctx.workdir / f"{stem}.static.onnx"
        report_path = ctx.workdir / f"{stem}.shapes.json"
        report = analyse_and_pin(export.model, export.pinned_dims(), opset=export.opset,
                                 out_path=out_model, file=export.manifest, line=export.line,
                                 key_format="inputs.{name}.shape")
        report_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", "utf-8")
        artefacts = {"report": str(report_path)}
        if report.output_model:
            artefacts["model"] = report.output_model
        log.info("%s: %s", export.name, report.summary())
        return stage_result(report, artefacts)
