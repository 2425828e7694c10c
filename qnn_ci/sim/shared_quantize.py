"""The QDQ model of ``sim_npu``, made once per content across exports.

Two exports that differ only in ``target.soc`` quantize the same float model with
the same calibration data and settings: the quantization (tens of seconds on a
detector) is SoC-independent, so the second export links the first one's QDQ
model (``qnn_ci.engine.shared_results``). The key holds the float model's bytes, the
calibration samples' bytes in order, every quantization setting (an AIMET
overrides file by content), the onnxruntime and onnxruntime-qnn versions and
qnn-ci's version; never the export's name or SoC.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qnn_ci.engine.cache import digest, file_digest
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.engine.shared_results import Claim, claim
from qnn_ci.engine.stage import Environment
from qnn_ci.sim.check import Quantizer
from qnn_ci.sim.overrides import OverrideSet
from qnn_ci.sim.quantize import QuantizeResult, QuantSettings, quantize_for_htp
from qnn_ci.sim.samples import Feeds, samples_digest

log = logging.getLogger(__name__)

STAGE = "sim_quantize"
VERSION = 3          # bump when quantize_for_htp's output changes for the same inputs
QDQ, FLOAT, LOG = "model.qdq.onnx", "model.float.onnx", "quantize.log"


def quantize_key(model: Path, samples: Sequence[Feeds], settings: QuantSettings) -> str:
    from qnn_ci import __version__
    from qnn_ci.sim.availability import versions

    return digest({"qnn_ci": __version__, "what": STAGE, "version": VERSION,
                   "versions": versions(), "model": file_digest(model),
                   "samples": samples_digest(samples), "settings": settings,
                   "fold": True, "fuse": True})


def _float_path(dst: Path) -> Path:
    stem = dst.name.removesuffix(".onnx").removesuffix(".qdq")
    return dst.with_name(f"{stem}.float.onnx")


def _meta(res: QuantizeResult) -> dict[str, Any]:
    o = res.overrides
    return {"constants_folded": res.constants_folded, "samples": res.samples,
            "opset": res.opset, "findings": [f.to_dict() for f in res.findings],
            "overrides": None if o is None else {"applied": o.applied, "unknown": o.unknown,
                                                 "skipped": o.skipped}}


def _result(meta: dict[str, Any], dst: Path, made_by: str, start: float) -> QuantizeResult:
    o = meta.get("overrides")
    return QuantizeResult(
        dst, int(meta["constants_folded"]), int(meta["samples"]),
        [Finding(f["check"], f["message"], Severity(f["severity"]), f.get("subject"))
         for f in meta["findings"]],
        None if o is None else OverrideSet(applied=list(o["applied"]),
                                           unknown=list(o["unknown"]),
                                           skipped=dict(o["skipped"])),
        meta.get("opset"), time.monotonic() - start, shared_from=made_by)


def _reuse(entry: Claim, dst: Path, log_path: Path, start: float) -> QuantizeResult | None:
    """The stored QDQ model linked to ``dst``, or None when the entry does not hold up."""
    if not {QDQ, FLOAT, LOG} <= set(entry.files):
        return None
    try:
        result = _result(entry.stored, dst, entry.made_by, start)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    entry.link_into({QDQ: dst, FLOAT: _float_path(dst), LOG: log_path})
    return result


def shared_quantizer(env: Environment, export: str) -> Quantizer:
    """A ``check_htp`` quantizer that reuses the work folder's QDQ model for the same
    content, or makes it and stores it for the next export."""

    def quantize(src: Path, dst: Path, samples: Sequence[Feeds], settings: QuantSettings,
                 log_path: Path) -> QuantizeResult:
        start = time.monotonic()
        key = quantize_key(src, samples, settings)
        with claim(env, STAGE, key, export) as entry:
            reused = _reuse(entry, dst, log_path, start) if entry.hit else None
            if reused is not None:
                log.info("%s: QDQ model reused from export %s (content key %s)", export,
                         entry.made_by, key[:12])
                return reused
            res = quantize_for_htp(src, dst, samples, settings, log_path=log_path)
            entry.publish({QDQ: dst, FLOAT: _float_path(dst), LOG: log_path}, _meta(res))
            return res

    return quantize
