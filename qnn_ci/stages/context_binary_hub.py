"""``context_binary`` on an AI Hub board (``transport: ai-hub``): AI Hub compiles a
QNN context binary for the board's device, and the binary is downloaded and checked
like one built on a board: what it says it is (SoC, HTP arch, VTCM) against
``target.soc``.

What AI Hub compiles is the board's ``quantize`` (``qnn_ci.hub.options``): the QDQ
model qnn-ci made (``sim_npu``'s: the export's own quantization settings; the
default), or the pinned float model, which AI Hub quantizes from the export's bit
widths (``--quantize_full_type``) on the export's calibration samples.

The compile job's id and address go to the result's properties (JUnit, the report);
the compiled model's AI Hub id is what ``context_run`` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qnn_ci.engine.results import (
    Finding,
    Severity,
    StageResult,
    Status,
    first_error,
    status_of,
)
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import hub_common


def run_compile(stage: str, ctx: StageContext) -> StageResult:
    from qnn_ci.boards.netrun import select_samples
    from qnn_ci.hub.client import HubError
    from qnn_ci.hub.jobs import submit, wait_all
    from qnn_ci.hub.options import QNN_CI, compile_options, not_applied
    from qnn_ci.stages.context_common import describe_info, record_binary

    opened = hub_common.open_device(stage, ctx)
    if isinstance(opened, StageResult):
        return opened
    hub, device = opened
    export, board = ctx.export, hub.board
    shapes, cal = ctx.upstream["static_shapes"], ctx.upstream["calibration"]
    inputs = hub_common.expected_inputs(cal)
    names = [i.name for i in inputs]
    options = compile_options(export, board.options, board.quantize)
    properties: dict[str, Any] = {"board": board.name, "hub.device": device.name,
                                  "hub.options": options, "hub.quantize": board.quantize}
    findings: list[Finding] = []
    calibration: dict[str, Any] | None = None
    if board.quantize == QNN_CI:
        qdq = ctx.upstream["sim_npu"].artefacts.get("qdq_model")
        if not qdq:
            text = ("sim_npu made no QDQ model for AI Hub to compile (quantize: qnn-ci); "
                    "set the board's quantize: ai-hub to let AI Hub quantize")
            return StageResult(stage, Status.FAILED, text,
                               [Finding("hub.no_qdq_model", text, subject=board.name)],
                               properties=properties)
        model = Path(qdq)
        properties["hub.model"] = "qnn-ci's QDQ model (sim_npu)"
    else:
        model = Path(shapes.artefacts["model"])
        properties["hub.model"] = "the pinned float model (static_shapes)"
        _, samples = select_samples(Path(cal.artefacts["input_list"]), names, None)
        calibration = hub_common.as_arrays(samples, inputs)
    skipped = not_applied(export, board.quantize)
    if skipped:
        findings.append(Finding(
            "hub.settings_not_applied", f"AI Hub's compile does not take {', '.join(skipped)}: "
            "the device result is for AI Hub's own quantization of these bit widths",
            Severity.WARNING))
    specs = {i.name: (tuple(i.shape), i.dtype) for i in inputs}
    try:
        with hub_common.slot(ctx, board):
            job = submit(hub, "compile", lambda: hub.client.submit_compile_job(
                str(model), device.handle(), name=f"qnn-ci {export.name}", input_specs=specs,
                options=options, calibration_data=calibration, retry=False))
            properties |= hub_common.job_properties("compile", job)
            wait_all(hub, [job], progress=ctx.env.progress)
        target = hub.call("the compiled model", job.job.get_target_model)
        saved = hub.call("downloading the compiled model",
                         lambda: job.job.download_target_model(str(ctx.workdir / export.name)))
    except HubError as exc:
        return hub_common.error_result(stage, board, exc, properties)
    if target is not None:
        properties["hub.target_model"] = str(target.model_id)
    binary = Path(str(saved)) if saved else None
    data: dict[str, Any] = {"board": board.name, "device": device.name,
                            "device_attributes": list(device.attributes),
                            "compile_job": job.job_id, "options": options}
    artefacts: dict[str, str] = {}
    summary = None
    if binary is None or not binary.is_file():
        findings.append(Finding("hub.no_artefact", f"{hub.where()}: {job.describe()} ended "
                                "without a model to download", subject=board.name))
    else:
        info, found = _read_binary(binary, hub_common.judged_soc(export, device))
        findings += found
        record_binary(ctx.workdir, binary, info, artefacts=artefacts, properties=properties,
                      data=data)
        summary = first_error(findings) or (
            f"{binary.name} compiled by AI Hub for {device.describe()} ({job.job_id}): "
            f"{describe_info(data.get('context_info'))}")
    return StageResult(stage, status_of(findings), summary or first_error(findings)
                       or "no context binary", findings, properties=properties,
                       artefacts=artefacts, data=data)


def _read_binary(binary: Path, soc: Any) -> tuple[Any, list[Finding]]:
    from qnn_ci.errors import UserError
    from qnn_ci.sdk.context_info import check_context, read_context_info

    try:
        info = read_context_info(binary)
    except UserError as exc:
        return None, [Finding("context.unreadable", f"{exc.oneline()}: the binary's SoC, "
                              "arch and I/O are not checked", Severity.ERROR)]
    return info, check_context(info, soc=soc, expected=[], runtime_qnn_version=None,
                               subject=binary.name)
