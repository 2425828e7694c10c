"""AIMET ``.encodings`` -> onnxruntime tensor quantization overrides.

AIMET and QNN write ``real = scale * (q + offset)`` with ``q`` unsigned and
``offset <= 0``; ONNX QDQ writes ``real = scale * (q - zero_point)``. So
``zero_point = -offset`` and the tensor is quantized to the unsigned type of the
encoding's bitwidth (a zero point outside the unsigned range selects the signed
type instead). Per-channel parameter encodings become per-channel overrides.
32-bit encodings (biases) are left to the quantizer, which derives bias scales
from the input and weight scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx


@dataclass
class OverrideSet:
    """AIMET encodings as onnxruntime tensor overrides, and which were applied or skipped."""

    overrides: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)     # names the model does not have
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why
    float_tensors: list[str] = field(default_factory=list)  # float encodings: kept float


def _quant_type(bitwidth: int, zero_point: int) -> Any:
    from onnxruntime.quantization import QuantType

    unsigned = {4: QuantType.QUInt4, 8: QuantType.QUInt8, 16: QuantType.QUInt16}
    signed = {4: QuantType.QInt4, 8: QuantType.QInt8, 16: QuantType.QInt16}
    if bitwidth not in unsigned:
        return None
    if 0 <= zero_point < (1 << bitwidth):
        return unsigned[bitwidth]
    if -(1 << (bitwidth - 1)) <= zero_point < (1 << (bitwidth - 1)):
        return signed[bitwidth]
    return None


def _is_float(enc: Any) -> bool:
    return str(getattr(enc, "dtype", "int")).lower() == "float"


def _one(enc: Any, is_param: bool = False) -> tuple[dict[str, Any] | None, str]:
    """One AIMET encoding -> one override dict, or None and the reason."""
    if _is_float(enc):
        return None, "a float encoding mixed with integer ones"
    enc_type = str(getattr(enc, "enc_type", "PER_TENSOR") or "PER_TENSOR").upper()
    if enc_type not in ("PER_TENSOR", "PER_CHANNEL"):
        return None, f"{enc_type} encodings are not supported on the simulator path"
    bitwidth = int(getattr(enc, "bitwidth", 0) or 0)
    scale = getattr(enc, "scale", None)
    offset = getattr(enc, "offset", None)
    if scale is None or offset is None:
        lo, hi = getattr(enc, "min", None), getattr(enc, "max", None)
        if lo is None or hi is None:
            return None, "no scale/offset and no min/max"
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            return None, f"min {lo} / max {hi} is no range"
        qt = _quant_type(bitwidth, 0)
        if qt is None:
            return None, f"{bitwidth}-bit encodings are not supported here"
        return {"quant_type": qt, "rmin": float(lo), "rmax": float(hi)}, ""
    if not (math.isfinite(scale) and scale > 0 and math.isfinite(offset)):
        return None, f"scale {scale} / offset {offset}: not a positive scale and finite offset"
    zero_point = -round(float(offset))
    if is_param and bitwidth == 16 and zero_point == 1 << 15 and getattr(enc, "symmetric", None):
        zero_point = 0                      # symmetric: the signed grid, zero point 0
        from onnxruntime.quantization import QuantType

        qt = QuantType.QInt16
    else:
        qt = _quant_type(bitwidth, zero_point)
    if qt is None:
        return None, f"{bitwidth}-bit encoding with offset {offset} has no QDQ type"
    from onnxruntime.quantization.quant_utils import ONNX_TYPE_TO_NP_TYPE

    return {"quant_type": qt, "scale": np.array(scale, dtype=np.float32),
            "zero_point": np.array(zero_point, dtype=ONNX_TYPE_TO_NP_TYPE[qt.tensor_type])}, ""


def _tensor_names(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    inits = {i.name for i in model.graph.initializer}
    acts = {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
    return acts - inits, inits


def overrides_from_encodings(encodings: Any, model: onnx.ModelProto) -> OverrideSet:
    """``encodings`` is a ``qnn_ci.sdk.encodings.Encodings`` (activations and params:
    name -> list of encodings, one per channel for per-channel parameters)."""
    activations, initializers = _tensor_names(model)
    out = OverrideSet()
    groups = [(n, e, False) for n, e in encodings.activations.items()] + \
             [(n, e, True) for n, e in encodings.params.items()] + \
             [(n, e, n in initializers)
              for n, e in getattr(encodings, "unclassified", {}).items()]
    for name, encs, is_param in groups:
        if name not in activations and name not in initializers:
            out.unknown.append(name)
            continue
        if not encs:
            out.skipped[name] = "empty encoding list"
            continue
        if all(_is_float(e) for e in encs):
            out.float_tensors.append(name)
            continue
        if is_param and int(getattr(encs[0], "bitwidth", 0) or 0) >= 32:
            out.skipped[name] = "32-bit (bias): derived by the quantizer"
            continue
        dicts: list[dict[str, Any]] = []
        reason = ""
        for enc in encs:
            d, reason = _one(enc, is_param)
            if d is None:
                break
            dicts.append(d)
        if len(dicts) != len(encs):
            out.skipped[name] = reason
            continue
        if len(dicts) > 1:
            axis = getattr(encs[0], "axis", None)
            dicts[0]["axis"] = int(axis) if axis is not None else 0
        out.overrides[name] = dicts
        out.applied.append(name)
    return out
