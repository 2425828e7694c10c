"""Stage `static_shapes`: pin the export's input shapes, make every interior
tensor static (onnx inference, then an onnxruntime fill), check the pinned model
computes what the original does, and write `<model stem>.static.onnx` for the
stages downstream."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.cache import file_digest
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.model.signature import signature
from qnn_ci.util.memo import MEMO_DIR

if TYPE_CHECKING:   # onnxruntime (via qnn_ci.shapes) only when the stage really runs
    import numpy as np

    from qnn_ci.shapes import ShapeReport

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


def fixed_feeds(export: ExportSpec) -> dict[str, np.ndarray] | None:
    """The manifest's fixed input values (``inputs.<name>.value``), broadcast to each
    input's pinned shape; other inputs get random data in the shape checks."""
    import numpy as np

    declared = signature(export.model).inputs
    feeds = {}
    for name, spec in export.inputs.items():
        if spec.value is None:
            continue
        dims = spec.shape if spec.shape is not None else declared.get(name, (None, ""))[0]
        arr = np.asarray(spec.value, dtype=spec.dtype or "float32")
        if dims is not None and None not in dims:
            arr = np.broadcast_to(arr, tuple(int(d) for d in dims)).copy()  # type: ignore[arg-type]
        feeds[name] = arr
    return feeds or None


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
        fp: dict[str, Any] = {"model_sha256": file_digest(model)}
        # Weights in external data files are part of the model too.
        fp["external_data"] = {name: file_digest(model.parent / name) if (
            model.parent / name).is_file() else "missing"
            for name in signature(model, ctx.env.workdir / MEMO_DIR).external_data}
        return fp

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.shapes import analyse_and_pin

        export = ctx.export
        stem = export.model.stem
        out_model = ctx.workdir / f"{stem}.static.onnx"
        report_path = ctx.workdir / f"{stem}.shapes.json"
        report = analyse_and_pin(export.model, export.pinned_dims(), opset=export.opset,
                                 out_path=out_model, file=export.manifest, line=export.line,
                                 key_format="inputs.{name}.shape", feeds=fixed_feeds(export),
                                 feed_key_format="inputs.{name}.value")
        report_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n", "utf-8")
        artefacts = {"report": str(report_path)}
        if report.output_model:
            artefacts["model"] = report.output_model
        log.info("%s: %s", export.name, report.summary())
        return stage_result(report, artefacts)
