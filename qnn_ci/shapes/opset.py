"""Convert the default-domain opset with the onnx version converter."""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
from onnx import defs, helper, version_converter

from qnn_ci.errors import UserError

log = logging.getLogger(__name__)

MIN_OPSET = 7   # the version converter's adapters start around here


def default_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return None


def validate_opset(opset: int, *, file: str | Path | None = None, line: int | None = None,
                   key: str | None = "--opset") -> None:
    newest = defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not \
            MIN_OPSET <= opset <= newest:
        raise UserError(f"opset {opset!r} is not supported; give an integer from {MIN_OPSET} "
                        f"to {newest}", file=file, line=line, key=key)


class OpsetConversionError(Exception):
    """The version converter refused or crashed; the message is one line."""


def convert(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` at default-domain ``opset``; metadata, producer and other domains'
    imports carried over (the converter keeps most; this makes sure)."""
    try:
        out = version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter raises RuntimeError/ValueError/...
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise OpsetConversionError(text) from None
    if not out.metadata_props and model.metadata_props:
        out.metadata_props.extend(model.metadata_props)
    for attr in ("producer_name", "producer_version", "domain", "doc_string"):
        if not getattr(out, attr) and getattr(model, attr):
            setattr(out, attr, getattr(model, attr))
    if not out.model_version and model.model_version:
        out.model_version = model.model_version
    # e.g. opset 17 needs IR 8: a converted IR-7 model would fail onnx.checker
    needed = helper.find_min_ir_version_for(list(out.opset_import), ignore_unknown=True)
    out.ir_version = max(out.ir_version, needed)
    log.info("converted opset %s -> %d", default_opset(model), opset)
    return out
