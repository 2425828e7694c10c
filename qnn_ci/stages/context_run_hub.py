"""``context_run`` on an AI Hub board (``transport: ai-hub``): the compiled model
(``context_binary``'s) runs on the device twice, submitted together: an inference
job on the export's held-out samples and a profile job.

- The outputs, when AI Hub compiled qnn-ci's QDQ model (the board's ``quantize:
  qnn-ci``, the default), are judged as ``htp_vs_cpu`` judges a board's HTP: against
  the same QDQ model on onnxruntime's CPU with the export's thresholds
  (``context_vs_cpu.*``), that CPU run against fp32 onnxruntime (``cpu_vs_fp32``),
  and onnxruntime's accuracy rule. When AI Hub quantized the model itself
  (``quantize: ai-hub``) no CPU run of its graph exists: the device is held to the
  thresholds against the fp32 truth (``context_vs_fp32.*``), as on the DLC route.
- The profile gives the latency (``latency.*``: the median and p90 of AI Hub's
  inference times), the first and warm load times (``load.init_ms``,
  ``load.warm_ms``), the peak memory, and the compute unit of every layer: a layer
  on the GPU or CPU is an error naming it (the model is meant for the NPU).

Job ids and addresses are properties (``hub.inference_job``, ``hub.profile_url``, ...).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import hub_common
from qnn_ci.stages.context_run_dlc import REFERENCE  # the fp32 truth, as on the DLC route

SHOWN_LAYERS = 5          # off-NPU layers named one by one before "+N more"
CPU_REFERENCE = "qnn-ci's QDQ model on onnxruntime's CPU"


def run_on_hub(stage: str, ctx: StageContext) -> StageResult:
    from qnn_ci.boards.reference import write_reference_outputs
    from qnn_ci.hub.client import HubError
    from qnn_ci.hub.jobs import submit, wait_all
    from qnn_ci.hub.options import QNN_CI
    from qnn_ci.hub.profile import read_profile
    from qnn_ci.stages.board_common import board_samples

    opened = hub_common.open_device(stage, ctx)
    if isinstance(opened, StageResult):
        return opened
    hub, device = opened
    export, board = ctx.export, hub.board
    built, cal = ctx.upstream["context_binary"], ctx.upstream["calibration"]
    shapes = ctx.upstream["static_shapes"]
    inputs = hub_common.expected_inputs(cal)
    which, samples, findings = board_samples(cal, [i.name for i in inputs])
    properties: dict[str, Any] = {"board": board.name, "hub.device": device.name,
                                  "sample_source": which,
                                  "samples": len(samples), "built_on": "ai-hub"}
    try:
        model = _compiled_model(hub, built)
        with hub_common.slot(ctx, board):
            # retry=False: a rate limit is reported at once, not waited out for 10 minutes
            runs = submit(hub, "inference", lambda: hub.client.submit_inference_job(
                model, device.handle(), inputs=hub_common.as_arrays(samples, inputs),
                name=f"qnn-ci {export.name}", profile=False, retry=False))
            properties |= hub_common.job_properties("inference", runs)
            # a profile job is an inference job without inputs, profiling (qai-hub 0.56)
            prof = submit(hub, "profile", lambda: hub.client.submit_inference_job(
                model, device.handle(), name=f"qnn-ci {export.name} profile", profile=True,
                retry=False))
            properties |= hub_common.job_properties("profile", prof)
            wait_all(hub, [runs, prof], progress=ctx.env.progress)
        got = hub.call("downloading the outputs", runs.job.download_output_data)
        raw_profile = hub.call("downloading the profile", prof.job.download_profile)
    except HubError as exc:
        return hub_common.error_result(stage, board, exc, properties)
    data: dict[str, Any] = {"board": board.name, "device": device.name,
                            "profile": raw_profile}
    profile = read_profile(raw_profile)
    properties |= profile.properties()
    findings += _off_npu(profile, device.name)
    outputs = shapes.data.get("outputs") or []
    hub_dir = ctx.workdir / "out_hub"
    written, found = _write_outputs(got, outputs, len(samples), hub_dir)
    findings += found
    properties["output_names"] = written
    summary = first_error(findings)
    artefacts: dict[str, str] = {}
    if written != "missing":
        truth = write_reference_outputs(Path(shapes.artefacts["model"]), samples, inputs,
                                        ctx.workdir / "out_fp32")
        artefacts |= {"htp_outputs": str(hub_dir), "fp32_outputs": str(truth)}
        qdq = ctx.upstream["sim_npu"].artefacts.get("qdq_model") \
            if board.quantize == QNN_CI and "sim_npu" in ctx.upstream else None
        if qdq:
            cpu = write_reference_outputs(Path(qdq), samples, inputs, ctx.workdir / "out_cpu")
            artefacts["cpu_outputs"] = str(cpu)
            comp, rule = _judge_against_cpu(ctx, device.name, truth, cpu, hub_dir, outputs,
                                            findings, properties, data)
            reference = f"{CPU_REFERENCE} {comp.summary_line()}; accuracy rule {rule}"
        else:
            comp = _judge_against_truth(ctx, device.name, truth, hub_dir, outputs, findings,
                                        properties, data)
            reference = f"{REFERENCE} {comp.summary_line()}"
        if summary is None:
            summary = first_error(findings) or (
                f"AI Hub {device.describe()}, {len(samples)} {which} sample(s): vs {reference}"
                + (f"; {profile.describe()}" if profile.describe() else "")
                + f" (jobs {runs.job_id}, {prof.job_id})")
    report = ctx.workdir / "context_run.json"
    report.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    artefacts["report"] = str(report)
    return StageResult(stage, status_of(findings), summary or first_error(findings)
                       or "no outputs to compare", findings, properties=properties,
                       artefacts=artefacts, data=data)


def _expected(outputs: list[dict[str, Any]]) -> dict[str, tuple[str, Any]]:
    return {o["name"]: ("float32", tuple(o["shape"]) if o.get("shape") else None)
            for o in outputs}


def _labelled(found: list[Finding], label: str) -> list[Finding]:
    return [replace(f, message=f"{label}: {f.message}") for f in found]


def _judge_against_truth(ctx: StageContext, device: str, truth: Path, hub_dir: Path,
                         outputs: list[dict[str, Any]], findings: list[Finding],
                         properties: dict[str, Any], data: dict[str, Any]) -> Any:
    """AI Hub quantized the model itself: no CPU run of its graph exists, so the
    device is held to the export's thresholds against the fp32 truth."""
    from qnn_ci.compare import compare_sets, load_output_set, metric_properties

    thresholds = ctx.export.thresholds
    comp = compare_sets(load_output_set(truth), load_output_set(hub_dir), thresholds,
                        expected=_expected(outputs))
    findings += _labelled(comp.findings, f"AI Hub '{device}' vs {REFERENCE}")
    properties |= metric_properties(comp, "context_vs_fp32", thresholds=thresholds)
    properties["reference"] = REFERENCE
    data["comparison"] = comp.to_dict()
    return comp


def _judge_against_cpu(ctx: StageContext, device: str, truth: Path, cpu: Path, hub_dir: Path,
                       outputs: list[dict[str, Any]], findings: list[Finding],
                       properties: dict[str, Any], data: dict[str, Any]) -> tuple[Any, str]:
    """AI Hub compiled qnn-ci's QDQ model: judged as ``htp_vs_cpu`` judges a board's HTP
    (``qnn_ci.compare.judgement``), the QDQ model on onnxruntime's CPU as the CPU run."""
    from qnn_ci.compare import load_output_set
    from qnn_ci.compare.judgement import judge_quantized

    judged = judge_quantized(load_output_set(truth), load_output_set(cpu),
                             load_output_set(hub_dir), ctx.export.thresholds,
                             expected=_expected(outputs))
    findings += _labelled(judged.vs_cpu.findings, f"AI Hub '{device}' vs {CPU_REFERENCE}")
    findings += _labelled(judged.cpu_vs_truth.findings, f"{CPU_REFERENCE} vs fp32 onnxruntime")
    findings += _labelled(judged.rule_findings(), "accuracy rule vs fp32")
    properties |= judged.properties("context", ctx.export.thresholds)
    properties["accuracy_rule"] = judged.rule_text()
    properties["reference"] = CPU_REFERENCE
    data |= judged.data("context")
    return judged.vs_cpu, properties["accuracy_rule"]


def _compiled_model(hub: Any, built: StageResult) -> Any:
    """The compiled model on AI Hub by its id; uploaded again from the downloaded
    binary when AI Hub no longer has it (or the id was not recorded)."""
    from qnn_ci.hub.client import HubError

    model_id = built.properties.get("hub.target_model")
    if model_id:
        try:
            return hub.call("the compiled model", lambda: hub.client.get_model(str(model_id)))
        except HubError as exc:
            if exc.check != "hub.error":
                raise
    binary = built.artefacts["binary"]
    return hub.call("uploading the compiled model", lambda: hub.client.upload_model(binary))


def _off_npu(profile: Any, device: str) -> list[Finding]:
    if not profile.off_npu:
        return []
    where: dict[str, list[str]] = {}
    for layer in profile.off_npu:
        where.setdefault(layer.unit, []).append(f"{layer.name} ({layer.type})")
    found = []
    for unit, layers in sorted(where.items()):
        shown = ", ".join(layers[:SHOWN_LAYERS])
        more = f" (+{len(layers) - SHOWN_LAYERS} more)" if len(layers) > SHOWN_LAYERS else ""
        found.append(Finding(
            "hub.off_npu", f"{len(layers)} of {profile.layers} layers run on the {unit} of "
            f"'{device}', not the NPU: {shown}{more}; each is a round trip off the HTP "
            "(replace or remove those ops, or pin their shapes)", Severity.ERROR,
            subject=unit))
    return found


def _write_outputs(got: Any, outputs: list[dict[str, Any]], samples: int, folder: Path
                   ) -> tuple[str, list[Finding]]:
    """AI Hub's outputs ({name: [array per sample]}) as ``Result_N/<name>.raw`` float32,
    in the ONNX model's output names. Matched by name (or its sanitized form), else by
    position when AI Hub renamed them all. Returns how they were matched."""
    import numpy as np

    from qnn_ci.compare.outputs import sanitize

    if not isinstance(got, dict) or not got:
        return "missing", [Finding("hub.no_outputs", "the inference job returned no outputs")]
    names = [str(o["name"]) for o in outputs]
    given = {str(k): v for k, v in got.items()}
    by_clean = {sanitize(k): k for k in given}
    pick: dict[str, str] = {}
    for n in names:
        k = n if n in given else by_clean.get(sanitize(n))
        if k is not None:
            pick[n] = k
    how = "by name"
    if len(pick) < len(names) and len(given) == len(names):
        pick, how = dict(zip(names, given, strict=True)), "by position (AI Hub renamed them)"
    findings = [Finding("hub.output_missing", f"output {n}: not among AI Hub's outputs "
                        f"({', '.join(given)})", subject=n) for n in names if n not in pick]
    for n, k in pick.items():
        arrays = list(given[k]) if isinstance(given[k], list | tuple) else [given[k]]
        if len(arrays) != samples:
            findings.append(Finding("hub.output_count", f"output {n}: {len(arrays)} result(s) "
                                    f"for {samples} sample(s)", subject=n))
        for i, value in enumerate(arrays[:samples]):
            rdir = folder / f"Result_{i}"
            rdir.mkdir(parents=True, exist_ok=True)
            np.ascontiguousarray(value, dtype="<f4").tofile(rdir / f"{sanitize(n)}.raw")
    return how, findings
