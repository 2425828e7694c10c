"""What `qnn-ci init` reads from the model: a size for every input dim the model
leaves free, checked as the `static_shapes` stage will check it, and what kind of
values each output holds (for its thresholds).

Sizes: a batch-like dim (a dim_param naming a batch, or dim 0 of an input of rank 2
or more unless its name says sequence/time) gets 1; a free height or width of an
image-like input (rank 4, float, 1/3/4 channels first or last) first 224; any other
free dim first 32. A dim_param is one size wherever it appears. The sizes are then
pinned, inferred, filled and run in onnxruntime (`qnn_ci.shapes.analyse_and_pin`, as
the stage does); when that does not pass, the dims that are not batch-like are tried
at 32, 64, 128, 256, 16 and 8 (six tries in all), and the first that passes is kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnn_ci.cli.init_files import FreeDim, InputPlan, OutputPlan
from qnn_ci.model.tensors import Dim, TensorIO
from qnn_ci.tables import is_integer_input_dtype

if TYPE_CHECKING:
    import onnx

BATCH_NAME = re.compile(r"(?i)(batch|\A(n|b|bs)\Z)")
SEQUENCE_NAME = re.compile(r"(?i)(seq|len|time|frame|token|step|sample)")
IMAGE_SIZE = 224        # first guess for an image's free height / width
OTHER_SIZE = 32         # first guess for any other free dim that is not batch-like
FALLBACK_SIZES = (32, 64, 128, 256, 16, 8)
MAX_TRIES = 6
PASS_THROUGH = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                          "Transpose", "Cast"})
PROBABILITY_OPS = frozenset({"Softmax", "Sigmoid", "HardSigmoid"})


@dataclass(frozen=True)
class _Slot:
    """A free dim: its key (a dim_param is one size wherever it appears) and kind."""

    key: tuple[str, ...]
    input: str
    index: int
    label: str
    kind: str           # "batch", "image", "other"


def _label(d: Dim) -> str:
    if isinstance(d, str):
        return f"dim_param {d!r}"
    return "unnamed" if d is None else f"{d} in the model"


def _image_like(io: TensorIO) -> bool:
    dims = io.dims or ()
    return len(dims) == 4 and io.dtype.startswith("float") and (
        dims[1] in (1, 3, 4) or dims[3] in (1, 3, 4))


def _given_params(inputs: list[TensorIO], given: dict[str, tuple[int, ...]]
                  ) -> dict[tuple[str, ...], int]:
    """The size --dim gave each dim_param: it is that size in every other input too."""
    fixed: dict[tuple[str, ...], int] = {}
    for io in inputs:
        for i, d in enumerate(io.dims or ()):
            if io.name in given and isinstance(d, str) and d:
                fixed.setdefault(("param", d), given[io.name][i])
    return fixed


def _slots(inputs: list[TensorIO], given: dict[str, tuple[int, ...]]) -> list[_Slot]:
    slots: list[_Slot] = []
    for io in inputs:
        if io.name in given or io.dims is None:
            continue
        for i, d in enumerate(io.dims):
            if isinstance(d, int) and d > 0:
                continue
            named = d if isinstance(d, str) else ""
            if (named and BATCH_NAME.search(named)) or (
                    i == 0 and len(io.dims) >= 2 and not SEQUENCE_NAME.search(named)):
                kind = "batch"
            elif _image_like(io) and i in ((2, 3) if io.dims[1] in (1, 3, 4) else (1, 2)):
                kind = "image"
            else:
                kind = "other"
            key = ("param", named) if named else ("dim", io.name, str(i))
            slots.append(_Slot(key, io.name, i, _label(d), kind))
    return slots


def _tries(slots: list[_Slot], fixed: dict[tuple[str, ...], int]
           ) -> Iterator[tuple[dict[tuple[str, ...], int], str]]:
    """Sizes per slot key, and what they were for a message: the first guess, then one
    size for every dim that is not batch-like. Batch-like dims stay 1; a dim_param gets
    one size everywhere, the one --dim gave it if it did."""
    kinds: dict[tuple[str, ...], str] = {}
    for s in slots:
        old = kinds.get(s.key)
        kinds[s.key] = "given" if s.key in fixed else "batch" if "batch" in (old, s.kind) \
            else (old or s.kind)

    def label(sizes: dict[tuple[str, ...], int]) -> str:
        free = sorted({v for k, v in sizes.items() if kinds[k] not in ("batch", "given")},
                      reverse=True)
        return "/".join(map(str, free)) or "1 (batch)"

    def pick(kind: str, key: tuple[str, ...], other: int) -> int:
        return fixed[key] if kind == "given" else 1 if kind == "batch" else other

    first = {k: pick(kind, k, IMAGE_SIZE if kind == "image" else OTHER_SIZE)
             for k, kind in kinds.items()}
    seen = [first]
    yield first, label(first)
    for size in FALLBACK_SIZES:
        sizes = {k: pick(kind, k, size) for k, kind in kinds.items()}
        if sizes not in seen:
            seen.append(sizes)
            yield sizes, label(sizes)


def _plans(inputs: list[TensorIO], given: dict[str, tuple[int, ...]], slots: list[_Slot],
           sizes: dict[tuple[str, ...], int], fixed: dict[tuple[str, ...], int]
           ) -> list[InputPlan]:
    by_input: dict[str, list[_Slot]] = {}
    for s in slots:
        by_input.setdefault(s.input, []).append(s)
    plans = []
    for io in inputs:
        integer = is_integer_input_dtype(io.dtype)
        if io.name in given:
            free = [FreeDim(i, _label(d), given[io.name][i], True)
                    for i, d in enumerate(io.dims or ()) if not (isinstance(d, int) and d > 0)]
            plans.append(InputPlan(io.name, io.dtype, io.dims, given[io.name], free, integer))
            continue
        if io.dims is None:
            plans.append(InputPlan(io.name, io.dtype, None, None, [], integer))
            continue
        chosen = {s.index: s for s in by_input.get(io.name, [])}
        shape = tuple(sizes[chosen[i].key] if i in chosen else int(d)  # type: ignore[arg-type]
                      for i, d in enumerate(io.dims))
        free = [FreeDim(i, s.label, sizes[s.key], s.key in fixed)
                for i, s in sorted(chosen.items())]
        plans.append(InputPlan(io.name, io.dtype, io.dims, shape, free, integer))
    return plans


@contextmanager
def _quiet() -> Iterator[None]:
    """A size that does not work is expected while trying: its warnings are not news."""
    logger = logging.getLogger("qnn_ci")
    old = logger.level
    if logger.getEffectiveLevel() >= logging.WARNING:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


@dataclass
class Check:
    """Whether the sizes chosen pass the static_shapes check, and what was tried."""

    passed: bool
    tried: list[str]        # the sizes tried, as text
    summary: str            # static_shapes' summary for the sizes written


def _check(model: Path, plans: list[InputPlan]) -> tuple[bool, str]:
    from qnn_ci.shapes import analyse_and_pin

    dims = {p.name: p.shape for p in plans if p.shape is not None}
    with _quiet():
        report = analyse_and_pin(model, dims, opset=None, out_path=None)
    return report.ok, report.summary()


def choose_shapes(model: Path, inputs: list[TensorIO], given: dict[str, tuple[int, ...]]
                  ) -> tuple[list[InputPlan], Check | None]:
    """Each input's plan and, when anything was open in the model, how the sizes
    written fare in `static_shapes` (None: every input is static in the model)."""
    slots = _slots(inputs, given)
    fixed = _given_params(inputs, given)
    open_given = any(io.name in given and io.dims is not None and
                     not all(isinstance(d, int) and d > 0 for d in io.dims) for io in inputs)
    if not slots:
        plans = _plans(inputs, given, slots, {}, fixed)
        if not open_given:
            return plans, None
        ok, summary = _check(model, plans)
        return plans, Check(ok, [], summary)
    first: tuple[list[InputPlan], str] | None = None
    tried: list[str] = []
    for sizes, label in list(_tries(slots, fixed))[:MAX_TRIES]:
        plans = _plans(inputs, given, slots, sizes, fixed)
        tried.append(label)
        ok, summary = _check(model, plans)
        if ok:
            return plans, Check(True, tried, summary)
        first = first or (plans, summary)
    assert first is not None
    return first[0], Check(False, tried, first[1])


def output_plans(outputs: list[TensorIO], graph: onnx.GraphProto) -> list[OutputPlan]:
    """Each output's kind: integer (by dtype), probabilities (made by a Softmax or
    Sigmoid, through ops that only move or cast values), else float."""
    made = {o: n for n in graph.node for o in n.output}
    plans = []
    for io in outputs:
        node = made.get(io.name)
        for _ in range(32):
            if node is None or node.op_type not in PASS_THROUGH or node.domain not in ("",
                                                                                     "ai.onnx"):
                break
            node = made.get(node.input[0]) if node.input else None
        producer = node.op_type if node is not None else ""
        if is_integer_input_dtype(io.dtype):
            kind = "integer"
        elif producer in PROBABILITY_OPS and io.dtype.startswith("float"):
            kind = "probabilities"
        else:
            kind = "float"
        plans.append(OutputPlan(io.name, io.dtype, kind, producer))
    return plans
