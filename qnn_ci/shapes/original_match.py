"""Does the adapted model (after graph surgery, pinned) still compute what the
framework export before surgery (``original:``) computes? Both run in onnxruntime
CPU on the same samples, before anything is quantized.

Matching: inputs and outputs by name when both models use the same names, else by
position when the counts agree (said in a note); different counts are a failure
naming both lists. An input whose dtype differs (a surgery that made int64 ids
int32) is cast for the original when every value survives the cast (a note says
so), else it is a failure. An output of a different shape but the same size is
compared flat (a note); a different size is a failure.

Per output and sample: cosine (float64; two all-zero tensors count as 1.0, one
all-zero tensor as 0.0) and max_abs over the positions finite in both. A float
output passes when its cosine is at least the bound on every sample and NaN/Inf
sit in the same places; an integer or boolean output must be equal. The verdict
names the FIRST output (the adapted model's graph output order) that fails, its
worst sample, cosine and max_abs, and the nodes producing it in both models.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.errors import UserError

if TYPE_CHECKING:
    import numpy as np
    import onnx

log = logging.getLogger(__name__)

Feeds = dict[str, "np.ndarray"]


@dataclass
class OutputMatch:
    """One output of the adapted model against the original's: worst cosine and max_abs."""

    output: str                     # the adapted model's output name
    original: str                   # the original's (the same unless matched by position)
    cosine: float = 1.0             # worst over the samples
    max_abs: float = 0.0            # worst over the samples
    worst_sample: str = ""
    failing_samples: int = 0
    exact: bool = False             # integer/bool output: must be equal
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.failing_samples == 0

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "original": self.original,
                "cosine": _num(self.cosine), "max_abs": _num(self.max_abs),
                "worst_sample": self.worst_sample, "failing_samples": self.failing_samples,
                "passed": self.passed, "exact": self.exact, "note": self.note}


def _num(value: float) -> float | str:
    return float(f"{value:.9g}") if math.isfinite(value) else str(value)


@dataclass
class OriginalMatch:
    """The adapted model against the original before surgery: per-output matches, notes."""

    bound: float
    samples: int = 0
    outputs: list[OutputMatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: str | None = None      # the models cannot be compared (no numbers)
    where: str = ""                 # where to look for the first failing output

    @property
    def passed(self) -> bool:
        return self.problem is None and all(o.passed for o in self.outputs)

    @property
    def first_failure(self) -> OutputMatch | None:
        return next((o for o in self.outputs if not o.passed), None)

    def worst(self) -> OutputMatch | None:
        return min(self.outputs, key=lambda o: o.cosine, default=None)

    def summary(self) -> str:
        if self.problem:
            return f"cannot compare with the original: {self.problem}"
        first = self.first_failure
        if first is not None:
            what = ("differs from the original" if first.exact else
                    f"cosine {first.cosine:.6f} < {self.bound:g}")
            more = sum(not o.passed for o in self.outputs) - 1
            return (f"output {first.output!r} {what} on {first.worst_sample} "
                    f"(max_abs {first.max_abs:.3g}; {first.failing_samples} of "
                    f"{self.samples} sample(s) fail"
                    + (f"; +{more} more failing output(s)" if more else "") + ")"
                    + (f"; {self.where}" if self.where else ""))
        worst = self.worst()
        shown = f": worst cosine {worst.cosine:.6f} (output {worst.output!r})" if worst else ""
        return f"matches the original on {self.samples} sample(s){shown}"

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {"original.samples": self.samples,
                                 "original.cosine_bound": self.bound}
        for o in self.outputs:
            props[f"original.{o.output}.cosine"] = _num(o.cosine)
            props[f"original.{o.output}.max_abs"] = _num(o.max_abs)
            props[f"original.{o.output}.passed"] = o.passed
        return props

    def to_dict(self) -> dict[str, Any]:
        return {"bound": self.bound, "samples": self.samples, "passed": self.passed,
                "problem": self.problem, "where": self.where, "notes": list(self.notes),
                "outputs": [o.to_dict() for o in self.outputs]}


def compare_arrays(reference: Any, test: Any) -> tuple[float, float, int]:
    """(cosine, max_abs, positions NaN/Inf in only one or differently) of two
    equally sized arrays, in float64 over the positions finite in both."""
    import numpy as np

    a = np.asarray(reference).astype(np.float64, copy=False).ravel()
    b = np.asarray(test).astype(np.float64, copy=False).ravel()
    fa, fb = np.isfinite(a), np.isfinite(b)
    both = fa & fb
    odd = ~fa | ~fb
    mismatch = int(np.count_nonzero(odd & ~((np.isnan(a) & np.isnan(b)) | (a == b))))
    a, b = a[both], b[both]
    max_abs = float(np.max(np.abs(a - b), initial=0.0))
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if np.array_equal(a, b):
        cosine = 1.0
    elif na == 0.0 or nb == 0.0 or not (math.isfinite(na) and math.isfinite(nb)):
        cosine = 1.0 if np.array_equal(a, b) else 0.0
    else:
        cosine = max(-1.0, min(1.0, float(np.dot(a / na, b / nb))))
    return cosine, max_abs, mismatch


def _pair(kind: str, ours: list[str], theirs: list[str], notes: list[str]) -> \
        list[tuple[str, str]] | str:
    """(adapted name, original name) pairs, or the reason they cannot be paired."""
    if sorted(ours) == sorted(theirs):
        return [(n, n) for n in ours]
    if len(ours) != len(theirs):
        return (f"the adapted model has {len(ours)} {kind}(s) ({', '.join(ours)}), the "
                f"original {len(theirs)} ({', '.join(theirs)}): give the original export "
                f"of this model (original:)")
    pairs = list(zip(ours, theirs, strict=True))
    renamed = [f"{a} <- {b}" if kind == "output" else f"{a} -> {b}"
               for a, b in pairs if a != b]
    notes.append(f"{kind}s matched by position (names differ): {', '.join(renamed)}")
    return pairs


def _producer(model: onnx.ModelProto, tensor: str) -> str:
    for i, node in enumerate(model.graph.node):
        if tensor in node.output:
            return f"node {node.name or f'#{i}'!r} ({node.op_type})"
    return "a graph input or initializer"


def _cast_plan(ours: dict[str, str], theirs: dict[str, str],
               pairs: list[tuple[str, str]], notes: list[str]) -> dict[str, str]:
    """Adapted input -> the original's dtype, where they differ."""
    casts = {a: theirs[b] for a, b in pairs if ours.get(a) and theirs.get(b)
             and ours[a] != theirs[b]}
    if casts:
        notes.append("input(s) cast for the original: " + ", ".join(
            f"{a} {ours[a]} -> {t}" for a, t in casts.items()))
    return casts


def _cast(name: str, arr: np.ndarray, dtype: str, label: str) -> np.ndarray | str:
    import numpy as np

    try:
        with np.errstate(invalid="ignore", over="ignore"):
            out = arr.astype(dtype)
            back = out.astype(arr.dtype)
    except (TypeError, ValueError) as exc:
        return f"input {name!r} of {label} cannot be cast to {dtype}: {exc}"
    if not np.array_equal(back, arr, equal_nan=arr.dtype.kind in "fc"):
        return (f"input {name!r} of {label} does not survive the cast {arr.dtype} -> {dtype} "
                "the original takes: the surgery changed what the input can hold")
    return out


def match_original(adapted: Path, original: Path, samples: Iterable[tuple[str, Feeds]], *,
                   bound: float) -> OriginalMatch:
    """Compare ``adapted`` with ``original`` on ``samples`` ((label, feeds named
    for the adapted model's inputs)). An original onnxruntime cannot read is a
    UserError naming it; everything else ends in the result."""
    from qnn_ci.model.modelio import open_session
    from qnn_ci.model.onnx_io import graph_inputs, graph_outputs, load_model
    from qnn_ci.shapes.verify import ort_reason

    result = OriginalMatch(bound)
    models = {"adapted": (adapted, load_model(adapted)),
              "original": (original, load_model(original))}
    sessions = {}
    for label, (path, _model) in models.items():
        try:
            sessions[label] = open_session(path)
        except Exception as exc:         # onnxruntime's Fail / InvalidGraph / ...
            raise UserError(f"onnxruntime cannot load the {label} model: {ort_reason(exc)}",
                            file=path) from None
    a_model, o_model = models["adapted"][1], models["original"][1]
    a_in = {io.name: io.dtype for io in graph_inputs(a_model)}
    o_in = {io.name: io.dtype for io in graph_inputs(o_model)}
    a_out = [io.name for io in graph_outputs(a_model)]
    o_out = [io.name for io in graph_outputs(o_model)]
    in_pairs = _pair("input", list(a_in), list(o_in), result.notes)
    out_pairs = _pair("output", a_out, o_out, result.notes)
    for pairs in (in_pairs, out_pairs):
        if isinstance(pairs, str):
            result.problem = pairs
            return result
    assert not isinstance(in_pairs, str) and not isinstance(out_pairs, str)
    casts = _cast_plan(a_in, o_in, in_pairs, result.notes)
    matches = {a: OutputMatch(a, o) for a, o in out_pairs}
    failing: tuple[str, Feeds, Feeds] | None = None     # the first failing sample
    for label, feeds in samples:
        o_feeds: Feeds = {}
        for a, o in in_pairs:
            arr = feeds[a]
            if a in casts:
                cast = _cast(a, arr, casts[a], label)
                if isinstance(cast, str):
                    result.problem = cast
                    return result
                arr = cast
            o_feeds[o] = arr
        got = {}
        for kind, session, feed, names in (("adapted", sessions["adapted"], feeds, a_out),
                                           ("original", sessions["original"], o_feeds, o_out)):
            try:
                got[kind] = dict(zip(names, session.run(names, feed), strict=True))
            except Exception as exc:
                result.problem = f"the {kind} model fails on {label}: {ort_reason(exc)}"
                return result
        result.samples += 1
        problem = _score(matches, got["adapted"], got["original"], label, bound)
        if problem:
            result.problem = problem
            return result
        if failing is None and not all(m.passed for m in matches.values()):
            failing = (label, feeds, o_feeds)
    result.outputs = [matches[a] for a in a_out]
    first = result.first_failure
    if first is not None and failing is not None:
        result.where = _where(models, failing, first, bound)
    log.info("original match: %s", result.summary())
    return result


def _where(models: dict[str, tuple[Path, onnx.ModelProto]],
           failing: tuple[str, Feeds, Feeds], first: OutputMatch, bound: float) -> str:
    """Where to look: the first tensor (the adapted model's node order) that both
    models compute under the same name and that differs on the failing sample,
    else the nodes producing the failing output."""
    (a_path, a_model), (o_path, o_model) = models["adapted"], models["original"]
    try:
        tensor = first_differing_tensor(a_path, a_model, o_path, o_model, failing, bound)
    except Exception as exc:           # the localisation is a help, never the verdict
        log.info("could not localise the difference: %s", exc)
        tensor = None
    if tensor is not None:
        name, cosine, compared = tensor
        return (f"tensor {compared} of those both models compute, {name!r}, is the first "
                f"that differs (cosine {cosine:.6f} on {failing[0]}): made by "
                f"{_producer(a_model, name)} in the adapted model and "
                f"{_producer(o_model, name)} in the original")
    return (f"look at what the surgery changed between the inputs and "
            f"{_producer(a_model, first.output)} in the adapted model / "
            f"{_producer(o_model, first.original)} in the original")


CHUNK = 64          # intermediate tensors exposed per run (bounded memory)
REL_TOL = 1e-3      # an intermediate differs when max_abs exceeds this share of its peak
#                     (cosine alone misses a scaled tensor; float rounding stays far below)


def _float_tensors(model: onnx.ModelProto) -> dict[str, int]:
    """Main-graph node outputs with a float element type (inferred where the
    model does not say), in node order."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:                  # inference is best effort here
        inferred = model
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in (*inferred.graph.value_info, *inferred.graph.output)
             if vi.type.HasField("tensor_type")}
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
              onnx.TensorProto.BFLOAT16}
    return {out: types[out] for node in model.graph.node for out in node.output
            if out and types.get(out) in floats}


def first_differing_tensor(a_path: Path, a_model: onnx.ModelProto, o_path: Path,
                           o_model: onnx.ModelProto, failing: tuple[str, Feeds, Feeds],
                           bound: float) -> tuple[str, float, int] | None:
    """(tensor, cosine, tensors compared) for the first shared float tensor whose
    cosine is below ``bound``, or whose max_abs exceeds ``REL_TOL`` of its peak, on
    the failing sample; None when none differs or the
    models share no tensor names. Runs both models with ``CHUNK`` tensors exposed
    at a time, in the adapted model's node order, and stops at the first chunk
    that holds a difference."""
    import numpy as np

    from qnn_ci.model.modelio import Scratch

    a_types, o_types = _float_tensors(a_model), _float_tensors(o_model)
    outputs = {o.name for o in (*a_model.graph.output, *o_model.graph.output)}
    shared = [t for t in a_types if t in o_types and t not in outputs]
    compared = 0
    with Scratch(a_path, a_model) as a_scratch, Scratch(o_path, o_model) as o_scratch:
        for start in range(0, len(shared), CHUNK):
            names = shared[start:start + CHUNK]
            got = []
            for scratch, model, types, feeds in ((a_scratch, a_model, a_types, failing[1]),
                                                 (o_scratch, o_model, o_types, failing[2])):
                session = scratch.session(_exposed(model, names, types), "exposed")
                got.append(dict(zip(names, session.run(names, feeds), strict=True)))
                del session
            for name in names:
                a, b = got[0][name], got[1][name]
                if a.size != b.size:
                    continue
                compared += 1
                cosine, max_abs, odd = compare_arrays(b, a)
                finite = np.abs(b[np.isfinite(b)])
                peak = float(finite.max()) if finite.size else 0.0
                if cosine < bound or odd or max_abs > REL_TOL * peak:
                    return name, cosine, compared
    return None


def _exposed(model: onnx.ModelProto, names: list[str], types: dict[str, int]
             ) -> onnx.ModelProto:
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.output[:]
    copy.graph.output.extend(onnx.helper.make_tensor_value_info(n, types[n], None)
                             for n in names)
    return copy


def _score(matches: dict[str, OutputMatch], ours: dict[str, Any], theirs: dict[str, Any],
           label: str, bound: float) -> str | None:
    import numpy as np

    for name, m in matches.items():
        a, b = np.asarray(ours[name]), np.asarray(theirs[m.original])
        if a.size != b.size:
            return (f"output {name!r} has {a.size} values ({list(a.shape)}), the original's "
                    f"{m.original!r} {b.size} ({list(b.shape)}) on {label}")
        if a.shape != b.shape and not m.note:
            m.note = f"shape {list(a.shape)} vs the original's {list(b.shape)}: compared flat"
        m.exact = m.exact or a.dtype.kind not in "fc" or b.dtype.kind not in "fc"
        cosine, max_abs, odd = compare_arrays(b, a)
        if m.exact:
            ok = bool(np.array_equal(a.ravel(), b.ravel()))
        else:
            ok = cosine >= bound and odd == 0
        if not m.worst_sample or cosine < m.cosine or (not ok and m.passed):
            m.cosine, m.worst_sample = cosine, label
        m.max_abs = max(m.max_abs, max_abs)
        if not ok:
            m.failing_samples += 1
            if odd and "NaN" not in m.note:
                m.note = (m.note + "; " if m.note else "") + \
                    f"NaN/Inf differ at {odd} position(s)"
    return None
