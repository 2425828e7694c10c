"""Fill the shapes onnx inference could not work out from an onnxruntime run
that exposes those interior tensors as extra graph outputs.

Only main-graph tensors can be exposed (onnxruntime has no way to output a
tensor from inside an ``If``/``Loop`` body). When the session will not build with
every extra output, the set is bisected to find the ones that cannot be exposed;
those are skipped and said so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from qnn_ci.model.modelio import Scratch
from qnn_ci.shapes.report import InteriorTensor
from qnn_ci.shapes.verify import ort_reason

log = logging.getLogger(__name__)

MAX_SESSIONS = 24           # bisection budget (each probe builds a session)

# Ops whose output shape can depend on input *values* (or on which branch ran): a
# filled shape holds for the feeds used, not in general.
DATA_DEPENDENT_OPS = frozenset({"NonZero", "NonMaxSuppression", "Unique", "Compress",
                                "StringSplit", "If", "Loop"})


@dataclass
class FillResult:
    """Shapes filled from onnxruntime (tensor -> dims, element type) and tensors skipped."""

    shapes: dict[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (tensor, reason)


@contextmanager
def _exposed(model: onnx.ModelProto, names: list[str]) -> Iterator[None]:
    """Temporarily add ``names`` as (untyped) graph outputs."""
    before = len(model.graph.output)
    for name in names:
        model.graph.output.append(onnx.ValueInfoProto(name=name))
    try:
        yield
    finally:
        del model.graph.output[before:]


class _Prober:
    def __init__(self, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                 scratch: Scratch) -> None:
        self.model, self.feeds, self.scratch = model, feeds, scratch
        self.sessions = 0

    def probe(self, names: list[str]) -> dict[str, object]:
        """Run with ``names`` exposed; the value of every graph output, by name."""
        self.sessions += 1
        with _exposed(self.model, names):
            session = self.scratch.session(self.model, "fill", optimize=False)
        out_names = [o.name for o in session.get_outputs()]
        values = session.run(out_names, self.feeds)
        del session
        return dict(zip(out_names, values, strict=True))

    def search(self, names: list[str], failed: str | None = None
               ) -> tuple[dict[str, object], list[tuple[str, str]]]:
        """Bisect ``names`` down to the ones that cannot be exposed. ``failed`` is the
        reason when the whole set is already known to fail."""
        reason = failed
        if reason is None:
            try:
                return self.probe(names), []
            except Exception as exc:  # onnxruntime's many error types
                reason = ort_reason(exc)
        if len(names) == 1 or self.sessions >= MAX_SESSIONS:
            why = (f"cannot be exposed as an output: {reason}" if len(names) == 1 else
                   f"not exposed (gave up bisecting after {self.sessions} sessions): {reason}")
            return {}, [(n, why) for n in names]
        mid = len(names) // 2
        got_a, skip_a = self.search(names[:mid])
        got_b, skip_b = self.search(names[mid:])
        return {**got_a, **got_b}, skip_a + skip_b


def fill_from_onnxruntime(model: onnx.ModelProto, candidates: list[InteriorTensor],
                          feeds: dict[str, np.ndarray] | None, scratch: Scratch,
                          no_feeds_reason: str | None = None) -> FillResult:
    """Shapes (and element types) of ``candidates`` from one onnxruntime run of
    ``model`` on ``feeds``; what could not be measured is in ``skipped``."""
    result = FillResult()
    kinds = {vi.name: vi.type.WhichOneof("value")
             for vi in (*model.graph.value_info, *model.graph.output)}
    main: list[str] = []
    for t in candidates:
        kind = kinds.get(t.name)
        if t.in_subgraph:
            result.skipped.append((t.name, f"inside subgraph {t.graph}: onnxruntime cannot "
                                           "expose it"))
        elif kind not in (None, "tensor_type"):
            result.skipped.append((t.name, f"not a tensor ({kind.removesuffix('_type')})"))
        elif t.name not in main:
            main.append(t.name)
    if not main:
        return result
    if feeds is None:
        why = no_feeds_reason or "no inputs to run the model with"
        result.skipped += [(n, f"no onnxruntime run: {why}") for n in main]
        return result
    prober = _Prober(model, feeds, scratch)
    outputs = {o.name for o in model.graph.output}
    extra = [n for n in main if n not in outputs]
    try:
        values, skipped = prober.probe(extra), []
    except Exception as first:  # onnxruntime's many error types
        # Does the model run at all? If not, nothing can be filled.
        try:
            base = prober.probe([])
        except Exception as exc:
            result.skipped += [(n, f"no onnxruntime run: {ort_reason(exc)}") for n in main]
            return result
        values, skipped = prober.search(extra, failed=ort_reason(first))
        values = {**base, **values}
    result.skipped += skipped
    for name in main:
        if name not in values:
            continue
        value = values[name]
        if not isinstance(value, np.ndarray):
            result.skipped.append((name, f"not a tensor ({type(value).__name__})"))
            continue
        elem = helper.np_dtype_to_tensor_dtype(value.dtype) if value.dtype != object \
            else onnx.TensorProto.STRING
        result.shapes[name] = (tuple(int(d) for d in value.shape), int(elem))
    log.info("filled %d shapes from onnxruntime (%d sessions), skipped %d",
             len(result.shapes), prober.sessions, len(result.skipped))
    return result


def apply_fill(model: onnx.ModelProto, shapes: dict[str, tuple[tuple[int, ...], int]]) -> None:
    """Write measured shapes into the main graph's ``value_info`` (or the graph
    output's type), in place."""
    entries = {vi.name: vi for vi in (*model.graph.value_info, *model.graph.output)}
    for name, (shape, elem) in shapes.items():
        vi = entries.get(name)
        if vi is None:
            vi = model.graph.value_info.add()
            vi.name = name
        tt = vi.type.tensor_type
        if not tt.elem_type:
            tt.elem_type = elem
        del tt.shape.dim[:]
        tt.shape.SetInParent()
        for d in shape:
            tt.shape.dim.add().dim_value = d
