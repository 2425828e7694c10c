"""Recurrent state inputs: inputs fed from a previous inference's output (an LSTM's
``h``/``c``, a streaming model's ``in_cache0``, a decoder's ``past_key_values.*``).
Their first value is legitimately all zeros and may repeat between samples, so the
calibration checks for synthetic data leave them out.

An input is state when the manifest says so (``inputs.<name>.state: true``) or when
the graph has an output it pairs with: same dtype, same shape (when the output's
shape is known), and a name that pairs by a common convention, compared without
regard to case:

- ``in_X`` / ``out_X`` and ``input_X`` / ``output_X`` (``in_cache0`` / ``out_cache0``)
- ``X_in`` / ``X_out`` and ``X_input`` / ``X_output``
- ``X`` / ``XN``, ``Xn``, ``X_n`` (``state`` / ``stateN``, ``h`` / ``hn``, ``c`` / ``cn``)
- ``X0`` / ``Xn``, ``XN`` (``h0`` / ``hn``)
- ``past_key_values.X`` / ``present.X`` (also ``past.X``, and with ``_`` for ``.``)

Detected pairs are said in an INFO finding, never silently."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from qnn_ci.engine.results import Finding, Severity

_PREFIXES = (("in_", "out_"), ("input_", "output_"), ("past_key_values.", "present."),
             ("past_key_values_", "present_"), ("past.", "present."), ("past_", "present_"))
_SUFFIXES = (("_in", "_out"), ("_input", "_output"))


@dataclass(frozen=True)
class Tensor:
    """A graph input or output as the state-input pairing sees it."""

    name: str
    dtype: str
    shape: tuple[int, ...] | None      # None: not known


def candidates(name: str) -> list[str]:
    """Output names (lower case) that ``name`` pairs with, in rule order."""
    low = name.lower()
    out = [b + low[len(a):] for a, b in _PREFIXES if low.startswith(a) and len(low) > len(a)]
    out += [low[:-len(a)] + b for a, b in _SUFFIXES if low.endswith(a) and len(low) > len(a)]
    out += [low + "n", low + "_n"]
    if low.endswith("0") and len(low) > 1:
        out.append(low[:-1] + "n")
    return list(dict.fromkeys(out))


def _tensor(d: Mapping[str, Any]) -> Tensor:
    shape = d.get("shape")
    known = isinstance(shape, list | tuple) and all(
        isinstance(s, int) and not isinstance(s, bool) for s in shape)
    return Tensor(str(d["name"]), str(d.get("dtype")), tuple(shape) if known else None)


def paired_outputs(inputs: Iterable[Tensor], outputs: Iterable[Tensor]) -> dict[str, str]:
    """{input: output} for every input an output pairs with by the rules above."""
    by_low: dict[str, Tensor] = {}
    for o in outputs:
        by_low.setdefault(o.name.lower(), o)
    pairs: dict[str, str] = {}
    for i in inputs:
        for cand in candidates(i.name):
            o = by_low.get(cand)
            if o is None or o.name == i.name or o.dtype != i.dtype:
                continue
            if o.shape is not None and i.shape is not None and o.shape != i.shape:
                continue
            pairs[i.name] = o.name
            break
    return pairs


def state_inputs(inputs: Iterable[Mapping[str, Any]], outputs: Iterable[Mapping[str, Any]],
                 declared: Iterable[str]) -> tuple[set[str], list[Finding]]:
    """The state inputs among ``inputs`` (``{"name", "dtype", "shape"}`` dicts, as the
    static_shapes stage records them) and an INFO finding naming them and why."""
    ins = [_tensor(d) for d in inputs]
    names = {i.name for i in ins}
    declared = [n for n in declared if n in names]
    pairs = paired_outputs([i for i in ins if i.name not in declared],
                           [_tensor(d) for d in outputs])
    if not declared and not pairs:
        return set(), []
    said = [f"{n} (inputs.{n}.state)" for n in declared]
    said += [f"{n} (paired with output {o})" for n, o in pairs.items()]
    msg = (f"treated as state: {', '.join(said)}; zeros and repeats are expected there "
           "and not flagged")
    return set(declared) | set(pairs), [Finding("inputs.state", msg, Severity.INFO)]
