"""Equivalence: the pinned model must load in onnxruntime and compute what the
original computes on the same inputs.

Random data is fine for this (it compares two graphs on the same data), except
that integer inputs get small non-negative values; inputs that need a specific
value (a sample rate, a token id range) are passed by the caller.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort

from qnn_ci.errors import UserError
from qnn_ci.shapes.pin import real_inputs
from qnn_ci.shapes.report import EquivalenceCheck, dims_of, dtype_name, format_dims, is_static
from qnn_ci.util.safe_read import size_text

log = logging.getLogger(__name__)

RTOL = 1e-4
ATOL = 1e-5
INT_HIGH = 4          # random integer inputs are drawn from [0, INT_HIGH)
MAX_FEED_BYTES = 1 << 30   # a random input larger than this is not made (1 GiB)

_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")


def ort_reason(exc: BaseException) -> str:
    """onnxruntime's message on one line, without its status prefix."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return _ORT_PREFIX.sub("", text)


def make_feeds(model: onnx.ModelProto, given: dict[str, np.ndarray] | None = None, *,
               seed: int = 0, key_format: str = "--feed {name}"
               ) -> tuple[dict[str, np.ndarray], str | None]:
    """Inputs for every graph input of the pinned ``model``: the caller's arrays
    where given (cast to the input's dtype), random ones elsewhere. Returns the
    feeds and, when some input cannot be made (not static, no numeric dtype), the
    reason instead. A given array that names no input or whose shape disagrees with
    the pinned input is a ``UserError``."""
    given = dict(given or {})
    inputs = real_inputs(model)
    names = {vi.name for vi in inputs}
    for name in given:
        if name not in names:
            raise UserError(f"the model has no input {name!r}; its inputs: "
                            f"{', '.join(sorted(names))}", key=key_format.format(name=name))
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in inputs:
        dims = dims_of(vi)
        dtype_s = dtype_name(vi.type.tensor_type.elem_type)
        try:
            dtype = np.dtype(dtype_s)
        except TypeError:
            return {}, f"input {vi.name!r} has dtype {dtype_s} that cannot be fed from numpy"
        if vi.name in given:
            arr = np.asarray(given[vi.name])
            if dims is not None and is_static(dims):
                want = tuple(int(d.value or 0) for d in dims)
                if tuple(arr.shape) != want:
                    raise UserError(f"feed has shape {list(arr.shape)} but the pinned input "
                                    f"{vi.name!r} is {list(want)}",
                                    key=key_format.format(name=vi.name))
            try:
                feeds[vi.name] = arr.astype(dtype, copy=False)
            except (ValueError, TypeError, OverflowError) as exc:
                raise UserError(f"feed of dtype {arr.dtype} cannot be cast to input "
                                f"{vi.name!r}'s {dtype_s}: {exc}",
                                key=key_format.format(name=vi.name)) from None
            continue
        if not is_static(dims):
            return {}, (f"input {vi.name!r} is not static {format_dims(dims)}: pin it or "
                        "pass a feed")
        shape = tuple(int(d.value or 0) for d in dims or [])
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > MAX_FEED_BYTES:
            return {}, (f"input {vi.name!r} {format_dims(dims)} {dtype_s} would need "
                        f"{size_text(nbytes)}, more than the {size_text(MAX_FEED_BYTES)} "
                        "qnn-ci allocates for a random test input: too large to test; pin "
                        "smaller dims or pass a feed")
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[vi.name] = rng.integers(0, INT_HIGH, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            return {}, f"input {vi.name!r} has dtype {dtype_s}: pass a feed for it"
    return feeds, None


def run(session: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def compare(reference: dict[str, np.ndarray], got: dict[str, np.ndarray], label: str, *,
            rtol: float = RTOL, atol: float = ATOL) -> EquivalenceCheck:
    """allclose per output (NaN equal to NaN), with each output's largest difference."""
    if set(reference) != set(got):
        return EquivalenceCheck(label, False, f"outputs differ: {sorted(reference)} vs "
                                              f"{sorted(got)}")
    diffs: dict[str, float] = {}
    problems: list[str] = []
    for name, ref in reference.items():
        a, b = np.asarray(ref), np.asarray(got[name])
        if a.shape != b.shape:
            problems.append(f"{name}: shape {list(b.shape)} != {list(a.shape)}")
            continue
        if a.dtype != b.dtype:
            problems.append(f"{name}: dtype {b.dtype} != {a.dtype}")
            continue
        if a.dtype.kind in "fc":
            diffs[name] = float(np.nanmax(np.abs(a - b), initial=0.0)) if a.size else 0.0
            if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                problems.append(f"{name}: max |diff| {diffs[name]:.3g} exceeds "
                                f"rtol={rtol} atol={atol}")
        elif a.dtype.kind in "iub":
            diffs[name] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)),
                                       initial=0.0))
            if not np.array_equal(a, b):
                problems.append(f"{name}: values differ")
        elif not np.array_equal(a, b):
            problems.append(f"{name}: values differ")
    if problems:
        return EquivalenceCheck(label, False, "; ".join(problems), diffs)
    return EquivalenceCheck(label, True, None, diffs)


def _loads_unoptimized(open_pinned: Callable[[bool], ort.InferenceSession]) -> bool:
    try:
        open_pinned(False)
    except Exception:
        return False
    return True


def _open_failure(open_pinned: Callable[[bool], ort.InferenceSession], label: str,
                  exc: BaseException) -> str:
    reason = f"the {label} model does not load in onnxruntime: {ort_reason(exc)}"
    if _loads_unoptimized(open_pinned):
        reason += " (it loads only with graph optimizations disabled)"
    log.warning("%s", reason)
    return reason


def load_failure(open_pinned: Callable[[bool], ort.InferenceSession], label: str) -> str | None:
    """Why the pinned model does not load in onnxruntime, or None when it loads."""
    try:
        session = open_pinned(True)
    except Exception as exc:  # onnxruntime raises Fail/InvalidGraph/...
        return _open_failure(open_pinned, label, exc)
    del session
    return None


def check(open_pinned: Callable[[bool], ort.InferenceSession], reference: dict[str, np.ndarray],
          feeds: dict[str, np.ndarray], label: str) -> EquivalenceCheck:
    """Load the pinned model (``open_pinned(optimize)``) with onnxruntime's default
    graph optimizations, run it on ``feeds`` and compare with ``reference``. The
    model is opened once (a second, unoptimized open only to explain a failure)."""
    try:
        session = open_pinned(True)
    except Exception as exc:  # onnxruntime raises Fail/InvalidGraph/...
        return EquivalenceCheck(label, False, _open_failure(open_pinned, label, exc))
    try:
        got = run(session, feeds)
    except Exception as exc:
        reason = f"the {label} model fails in onnxruntime: {ort_reason(exc)}"
        log.warning("%s", reason)
        return EquivalenceCheck(label, False, reason)
    finally:
        del session
    result = compare(reference, got, label)
    log.info("%s: equivalent=%s %s", label, result.equivalent, result.reason or "")
    return result
