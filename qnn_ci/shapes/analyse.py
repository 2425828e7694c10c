"""The static-shape stage end to end: classify, pin, infer, fill, verify,
convert, write. ``analyse_and_pin`` is the one entry point the CLI and the
pipeline stage call."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.model.modelio import Scratch, load_proto, open_session, write_model
from qnn_ci.shapes import fill as fill_mod
from qnn_ci.shapes import opset as opset_mod
from qnn_ci.shapes import verify
from qnn_ci.shapes.pin import (
    TensorListing,
    dim_suggestion,
    drop_stale_shapes,
    infer,
    list_tensors,
    pin_inputs,
    real_inputs,
    validate_dims,
)
from qnn_ci.shapes.report import (
    EquivalenceCheck,
    FilledTensor,
    ShapeReport,
    TensorShapeInfo,
    dims_of,
    dtype_name,
    format_dims,
)
from qnn_ci.util.listing import cut_text

log = logging.getLogger(__name__)


def _pin_hint(vi: onnx.ValueInfoProto, key_format: str) -> str:
    key = key_format.format(name=vi.name)
    if key.startswith("--"):
        return f"{key.split()[0]} {dim_suggestion(vi)}"
    return f"set {key}"


def _fill(model: onnx.ModelProto, listing: TensorListing, feeds: dict[str, np.ndarray] | None,
          no_feeds: str | None, scratch: Scratch, report: ShapeReport
          ) -> tuple[onnx.ModelProto, list[str]]:
    """Fill what is not static from onnxruntime, then infer again."""
    candidates = listing.dynamic + listing.unshaped
    result = fill_mod.fill_from_onnxruntime(model, candidates, feeds, scratch, no_feeds)
    done = {f.name for f in report.filled_tensors}
    report.fill_skipped = [s for s in report.fill_skipped if s[0] not in result.shapes]
    report.fill_skipped += [s for s in result.skipped if s[0] not in done]
    if not result.shapes:
        return model, []
    fill_mod.apply_fill(model, result.shapes)
    was = {t.name: "dynamic" for t in listing.dynamic} | \
        {t.name: "unshaped" for t in listing.unshaped}
    for t in candidates:
        if t.name in result.shapes and t.name not in done and not t.in_subgraph:
            report.filled_tensors.append(FilledTensor(
                t.name, t.graph, t.producer, t.op_type, result.shapes[t.name][0], was[t.name]))
            done.add(t.name)
    return infer(model)


def _reference(model_path: Path, feeds: dict[str, np.ndarray]
               ) -> tuple[dict[str, np.ndarray] | None, str | None]:
    try:
        session = open_session(model_path)
        return verify.run(session, feeds), None
    except Exception as exc:  # onnxruntime's many error types
        return None, (f"the original model fails in onnxruntime on these inputs: "
                      f"{verify.ort_reason(exc)}; pass feeds with valid values")


def _opener(model: onnx.ModelProto, label: str, scratch: Scratch, saved: Path | None
            ) -> Callable[[bool], ort.InferenceSession]:
    """Opens ``model`` in onnxruntime: from ``saved`` (the written output model) when
    given, else saved once into the scratch folder and reopened from there."""
    path: list[Path] = [saved] if saved is not None else []

    def open_model(optimize: bool) -> ort.InferenceSession:
        if not path:
            path.append(scratch.save(model, label.replace(" ", "_")))
        external = None if saved is not None or not scratch.external else scratch.source.parent
        return open_session(path[0], optimize=optimize, external_dir=external)
    return open_model


def _check(model: onnx.ModelProto, label: str, scratch: Scratch,
           reference: dict[str, np.ndarray] | None, feeds: dict[str, np.ndarray] | None,
           why_not: str | None, saved: Path | None = None) -> EquivalenceCheck:
    opener = _opener(model, label, scratch, saved)
    if reference is None or feeds is None:
        # No comparison possible, but a pinned model that does not even load is a
        # failure whatever the inputs (Silero VAD's `If` is the known case).
        broken = verify.load_failure(opener, label)
        if broken is not None:
            return EquivalenceCheck(label, False, broken)
        return EquivalenceCheck(label, None, why_not)
    return verify.check(opener, reference, feeds, label)


def _write(model: onnx.ModelProto, out_path: Path | None, source: Path) -> Path | None:
    if out_path is None:
        return None
    write_model(model, Path(out_path), source=source)
    return Path(out_path)


def _group_skips(skipped: list[tuple[str, str]]) -> list[Finding]:
    by_reason: dict[str, list[str]] = defaultdict(list)
    for name, reason in skipped:
        by_reason[reason].append(name)
    out = []
    for reason, names in by_reason.items():
        shown = cut_text(names, 5, render=repr)
        out.append(Finding("shapes.fill_skipped",
                           f"{len(names)} tensor(s) not filled from onnxruntime ({shown}): "
                           f"{reason}", Severity.WARNING, names[0]))
    return out


def _findings(report: ShapeReport, listing: TensorListing, model: onnx.ModelProto,
              key_format: str, pinned_names: set[str]) -> list[Finding]:
    found: list[Finding] = []
    by_name = {vi.name: vi for vi in real_inputs(model)}
    for inp in report.inputs:
        if not inp.static:
            hint = _pin_hint(by_name[inp.name], key_format)
            what = "is still dynamic after pinning" if inp.name in pinned_names \
                else "is dynamic"
            found.append(Finding("shapes.input", f"input {inp.name!r} {what} "
                                 f"{format_dims(inp.pinned)}; pin it: {hint}",
                                 subject=inp.name))
    for out in report.outputs:
        if not out.static:
            found.append(Finding("shapes.output", f"output {out.name!r} is still "
                                 f"{'dynamic' if out.pinned is not None else 'unshaped'} "
                                 f"{format_dims(out.pinned)}", subject=out.name))
    for t in listing.dynamic:
        found.append(Finding("shapes.dynamic", f"tensor {t.name!r} in {t.graph} (from "
                             f"{t.producer}, {t.op_type}) is still dynamic "
                             f"{format_dims(t.dims)}", subject=t.name))
    for t in listing.unshaped:
        found.append(Finding("shapes.unshaped", f"tensor {t.name!r} in {t.graph} (from "
                             f"{t.producer}, {t.op_type}) has no shape", subject=t.name))
    for f in report.filled_tensors:
        if f.op_type in fill_mod.DATA_DEPENDENT_OPS:
            found.append(Finding("shapes.data_dependent",
                                 f"tensor {f.name!r} from {f.op_type} has a data-dependent "
                                 f"shape; the filled {list(f.shape)} holds for these inputs "
                                 "only", Severity.WARNING, f.name))
    found += _group_skips(report.fill_skipped)
    for w in report.inference_warnings:
        found.append(Finding("shapes.inference", f"onnx shape inference: {w}", Severity.INFO))
    for c in report.equivalence:
        if c.equivalent is False:
            found.append(Finding("shapes.equivalence", c.reason or "outputs differ",
                                 subject=c.model))
        elif c.equivalent is None:
            found.append(Finding("shapes.equivalence",
                                 f"equivalence of the {c.model} model not checked: {c.reason}",
                                 subject=c.model))
    return found


def analyse_and_pin(model_path: Path, dims: dict[str, tuple[int, ...]], *,
                    opset: int | None, out_path: Path | None,
                    feeds: dict[str, np.ndarray] | None = None, fill: bool = True,
                    file: str | Path | None = None, line: int | None = None,
                    key_format: str = "--dim {name}",
                    feed_key_format: str = "--feed {name}") -> ShapeReport:
    """Report the model's dynamic dims, pin ``dims``, infer, fill from onnxruntime,
    verify against the original, optionally convert to ``opset``, and write the
    result to ``out_path`` (whenever it could be built).

    Bad input raises ``UserError`` (key from ``key_format``; ``file``/``line`` point
    at where the dims came from, the model file by default). Everything else is in
    the returned report's findings."""
    model_path = Path(model_path)
    model = load_proto(model_path)
    where = file if file is not None else model_path
    validate_dims(model, dims, file=where, line=line, key_format=key_format)
    if opset is not None:
        opset_mod.validate_opset(opset, file=file, line=line,
                                 key="--opset" if key_format.startswith("--") else "opset")

    report = ShapeReport(model=str(model_path))
    report.inputs = [TensorShapeInfo(vi.name, dtype_name(vi.type.tensor_type.elem_type),
                                     dims_of(vi)) for vi in real_inputs(model)]
    report.outputs = [TensorShapeInfo(vi.name, dtype_name(vi.type.tensor_type.elem_type),
                                      dims_of(vi)) for vi in model.graph.output]
    pin_inputs(model, dims)
    report.dropped_value_info = drop_stale_shapes(model)
    model, warnings = infer(model)
    report.inference_warnings += warnings
    listing = list_tensors(model)
    report.inferred = listing.counts()
    log.info("after onnx inference: %s", report.inferred)

    given, why_not = verify.make_feeds(model, feeds, key_format=feed_key_format)
    run_feeds = given if why_not is None else None
    reference: dict[str, np.ndarray] | None = None
    if run_feeds is not None:
        reference, ref_reason = _reference(model_path, run_feeds)
        why_not = why_not or ref_reason

    with Scratch(model_path, model) as scratch:
        if fill and (listing.dynamic or listing.unshaped):
            model, warnings = _fill(model, listing, run_feeds, why_not, scratch, report)
            report.inference_warnings += [w for w in warnings
                                          if w not in report.inference_warnings]
        # Without an opset conversion the pinned model is the output: write it once and
        # check that very file (one save, one session).
        written = _write(model, out_path, model_path) if opset is None else None
        report.equivalence.append(_check(model, "pinned", scratch, reference, run_feeds,
                                         why_not, written))
        final_written = written is not None
        if opset is not None:
            report.opset_from = opset_mod.default_opset(model)
            report.opset_to = opset
            try:
                converted = opset_mod.convert(model, opset)
            except opset_mod.OpsetConversionError as exc:
                report.equivalence.append(EquivalenceCheck(
                    f"opset {opset}", False,
                    f"the onnx version converter failed for opset {report.opset_from} -> "
                    f"{opset}: {exc}"))
            else:
                model, warnings = infer(converted)
                del converted
                report.inference_warnings += [w for w in warnings
                                              if w not in report.inference_warnings]
                again = list_tensors(model)
                if fill and (again.dynamic or again.unshaped):
                    model, _ = _fill(model, again, run_feeds, why_not, scratch, report)
                written = _write(model, out_path, model_path)
                final_written = written is not None
                report.equivalence.append(_check(model, f"opset {opset}", scratch, reference,
                                                 run_feeds, why_not, written))

    final = list_tensors(model)
    report.counts = final.counts()
    report.dynamic_tensors = list(final.dynamic)
    report.unshaped_tensors = list(final.unshaped)
    pinned = {vi.name: dims_of(vi) for vi in (*real_inputs(model), *model.graph.output)}
    for io in (*report.inputs, *report.outputs):
        io.pinned = pinned.get(io.name)
    filled_now = {t.name for t in final.static}
    report.filled_tensors = [f for f in report.filled_tensors if f.name in filled_now]
    open_names = {t.name for t in (*final.dynamic, *final.unshaped)}
    report.fill_skipped = [s for s in report.fill_skipped if s[0] in open_names]
    if out_path is not None:
        if not final_written:
            write_model(model, Path(out_path), source=model_path)
        report.output_model = str(out_path)
    report.findings = _findings(report, final, model, key_format, set(dims))
    log.info("%s: %s", model_path.name, report.summary())
    return report

