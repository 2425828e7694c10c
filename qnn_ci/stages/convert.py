"""Stage `convert`: ``qnn-onnx-converter`` on the pinned model with the
calibration list and the manifest's quantization (W8A16, 32-bit bias by
default), every flag spelled the way this SDK lists it.

Artefacts: ``cpp``, ``bin`` (absent when the graph has no static tensors),
``net_json``, ``log``. Data: ``sdk_version``, ``argv``.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.stage import StageContext
from qnn_ci.errors import UserError
from qnn_ci.sdk.locate import CONVERTER
from qnn_ci.stages.dry_run import prequantized_check
from qnn_ci.stages.sdk_common import (
    ConverterStage,
    mark_transient,
)

log = logging.getLogger(__name__)


class ConvertStage(ConverterStage):
    name = "convert"
    settings = ("inputs", "quantization", "target", "sdk")
    # encodings applies only with quantization.overrides (the engine ignores a need
    # that is not planned): an encodings file for another model blocks the conversion.
    needs = ("static_shapes", "calibration", "encodings", "dry_run")
    gates = ("matches_original",)     # nothing is quantized before the surgery is checked
    version = 2                       # 2: an already-quantized model is refused

    def run(self, ctx: StageContext) -> StageResult:
        # the converter's modules: only when a stage runs (a cached run needs none)
        from qnn_ci.sdk.convert import convert
        from qnn_ci.sdk.converter_cmd import build_convert_argv
        from qnn_ci.sdk.model_lib import library_name
        from qnn_ci.sdk.record import read_record

        export = ctx.export
        refused, _ = prequantized_check(self.name, ctx,
                                        calibration="calibration" in ctx.upstream)
        if refused is not None:
            return refused
        ready = self.prepare(ctx)
        if isinstance(ready, StageResult):
            return ready
        sdk, help_, model = ready
        shapes = ctx.upstream["static_shapes"]
        calibration = ctx.upstream.get("calibration")
        input_list = Path(calibration.artefacts["input_list"]) \
            if calibration is not None and "input_list" in calibration.artefacts else None
        out_cpp = ctx.workdir / f"{library_name(export.name)}.cpp"
        argv = build_convert_argv(export, model, input_list, out_cpp, help_.flags,
                                  graph_inputs=shapes.data.get("inputs"),
                                  tool=sdk.tool(CONVERTER))
        outcome = convert(argv, sdk=sdk, workdir=ctx.workdir, output_path=out_cpp, model=model,
                          timeout=export.sdk.timeout_s)
        findings = [Finding("convert.note", note, Severity.INFO) for note in outcome.notes]
        sdk_version = sdk.version
        version_source = "SDK folder" if sdk.version else ""
        if outcome.cpp is not None:
            try:
                record = read_record(outcome.cpp)
                if record.sdk_version:      # the stamp, or the tool path (up to 2.22)
                    sdk_version = record.sdk_version
                    version_source = record.sdk_version_source or ""
            except UserError as exc:
                findings.append(Finding("convert.record", f"could not read the converter's "
                                        f"recorded arguments: {exc.oneline()}", Severity.WARNING))
        if sdk_version and sdk.version is None:
            sdk.version = sdk_version
        joined = shlex.join(argv)
        artefacts = {"log": str(outcome.run.log_path)}
        for key, path in (("cpp", outcome.cpp), ("bin", outcome.bin),
                          ("net_json", outcome.net_json)):
            if path is not None:
                artefacts[key] = str(path)
        if outcome.ok:
            status = Status.PASSED
            summary = (f"converted with {sdk.describe()} in {outcome.run.duration_s:.1f} s"
                       + ("" if outcome.bin else " (no static tensors: no .bin)"))
        else:
            status = Status.FAILED
            check = "convert.unsupported_op" if outcome.failed_op else "convert.failed"
            findings += [Finding(check, msg, Severity.ERROR, outcome.failed_node)
                         for msg in outcome.failures]
            summary = outcome.failures[0].splitlines()[0]
        return mark_transient(StageResult(
            self.name, status, summary, findings,
            properties={"sdk_version": sdk_version or "",
                        "sdk_version_source": version_source, "converter_argv": joined,
                        "duration_s": round(outcome.run.duration_s, 3)},
            artefacts=artefacts,
            data={"sdk_version": sdk_version, "argv": argv},
        ), outcome.run)
