"""When is a reference "near zero"? The rule, and the quantization steps it uses.

Cosine, SNR and PSNR are scale-free: they divide by the reference's own size.
They grade the model only while the reference stands well clear of the error
the test path makes anyway — its quantization step, or what its dtype resolves.
No fixed absolute floor can tell a small genuine signal (a 1e-7-scale output
compared with a 1e-7-scale test is a perfectly good comparison) from noise, so
the rule is relative. The reference is **near zero** when its peak
``max |ref|`` is at most the largest of:

- ``NEAR_ZERO_STEPS`` (4) x the output's **quantization step**, when the caller
  knows it (the QDQ model's output scale on the simulator, the converter's
  output encoding on a board, ``--quant-step`` on the command line). Within 4
  steps the quantized output has at most 5 levels across the reference's whole
  span and rounding alone (half a step) is >= 1/8 of the peak: cosine and SNR
  grade the rounding, not the model. (A sigmoid/softmax output of a W8A16 graph
  has the fixed step 1/65536 = 1.53e-5: the PP-OCR detector's map on random
  input, peaking at 6.8e-6, is below one step.)
- 4 x the **dtype's step at zero** of either side: 1 for integer data (native
  ``_native.raw`` outputs), the smallest subnormal for floats (so for float
  data this only catches an exactly-zero or subnormal reference).
- ``NEAR_ZERO_OF_TEST`` (0.1 %) of the **test's peak**: next to a test 1000x
  its size the reference is zero, and cosine would grade the test's own noise
  (or pass a scaled copy: cosine cannot see scale).

A near-zero reference never passes silently: its cosine/SNR/PSNR are not
computed, and the comparison is judged by absolute bounds (max_abs, mean_abs)
when given, else it is an error (see ``qnn_ci.compare.thresholds.evaluate``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from qnn_ci.compare.outputs import match_names
from qnn_ci.errors import UserError

NEAR_ZERO_STEPS = 4          # a reference peaking within this many steps of zero
NEAR_ZERO_OF_TEST = 1e-3     # ... or at most this fraction of the test's peak


def dtype_step(dtype: Any) -> float:
    """The smallest non-zero magnitude ``dtype`` holds: 1 for integers and bool,
    the smallest subnormal for floats, 0 for anything else."""
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        return 1.0
    if dt.kind == "f":
        return float(np.finfo(dt).smallest_subnormal)
    return 0.0


def near_zero_reason(ref_peak: float, test_peak: float, step: float | None,
                     dtypes: Iterable[Any]) -> str | None:
    """Why the reference is near zero (a phrase for a message), or None when it
    is not; see the module docstring for the rule."""
    if ref_peak == 0.0:
        return "zero everywhere (max |ref| 0)"
    levels: list[tuple[float, str]] = []
    if step:
        levels.append((NEAR_ZERO_STEPS * step, f"within {NEAR_ZERO_STEPS} quantization steps "
                       f"of zero (step {step:.4g})"))
    kinds = [(dtype_step(d), np.dtype(d).name) for d in dtypes]
    if kinds:
        dstep, name = max(kinds)
        levels.append((NEAR_ZERO_STEPS * dstep, f"within {NEAR_ZERO_STEPS} steps of zero of "
                       f"its dtype {name} (step {dstep:.3g})"))
    levels.append((NEAR_ZERO_OF_TEST * test_peak, f"at most {NEAR_ZERO_OF_TEST:.1%} of the "
                   f"test's peak {test_peak:.3g}"))
    level, basis = max(levels, key=lambda x: x[0])
    if ref_peak > level:
        return None
    return f"near zero everywhere (max |ref| {ref_peak:.3g} is {basis})"


def check_step(value: float, *, where: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"a quantization step must be a positive number, got {value}",
                        key=where)
    return value


def parse_step(token: str) -> tuple[str | None, float]:
    """``1.5e-5`` (every output) or ``OUTPUT:1.5e-5``; the output name is
    everything before the LAST ``:``."""
    head, colon, value_text = token.rpartition(":")
    output = head.strip() if colon else None
    if colon and not output:
        raise UserError(f"bad quantization step {token!r}: empty output name before ':'",
                        key="--quant-step")
    try:
        value = float(value_text)
    except ValueError:
        raise UserError(f"bad quantization step {token!r}: {value_text.strip()!r} is not a "
                        "number; write [OUTPUT:]STEP, e.g. 1.5e-5", key="--quant-step") from None
    return output, check_step(value, where="--quant-step")


def steps_from_tokens(tokens: Iterable[str]) -> dict[str, float]:
    """``--quant-step`` tokens as a mapping; the key ``""`` means every output."""
    out: dict[str, float] = {}
    for token in tokens:
        output, value = parse_step(token)
        out[output or ""] = value
    return out


def resolve_steps(steps: Mapping[str, float] | None,
                  outputs: Sequence[str]) -> dict[str, float]:
    """Quantization step per output key. ``steps`` keys are graph names or file
    keys (``""``: every output); a key that matches no output is a UserError."""
    if not steps:
        return {}
    default = steps.get("")
    found = {name: default for name in outputs} if default is not None else {}
    for key, value in steps.items():
        if key == "":
            continue
        check_step(value, where=f"quantization step of {key}")
        target = key if key in outputs else match_names([key], outputs).get(key)
        if target is None:
            raise UserError(f"a quantization step names output {key!r}, which is not among "
                            f"the outputs: {', '.join(outputs) or '(none)'}",
                            key="--quant-step")
        found[target] = value
    return {k: v for k, v in found.items() if v is not None}
