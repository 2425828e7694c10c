"""Quantize a float model the way the HTP wants: QDQ through onnxruntime's QNN
quantization config, W8A16 by default, the manifest's bitwidths and
per-channel choice, AIMET encodings applied as tensor overrides.

Two rewrites come first, each reported with its count: ``Constant``-node
weights become initializers (the quantizer leaves them float otherwise), and
BatchNormalization is folded into the convolution before it (see ``fusion``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.model.prequantized import refuse_quantized
from qnn_ci.sim.constants import fold_constants
from qnn_ci.sim.fusion import fuse_batchnorm
from qnn_ci.sim.overrides import OverrideSet, overrides_from_encodings
from qnn_ci.sim.samples import Feeds
from qnn_ci.util.listing import cut_text

log = logging.getLogger(__name__)

# onnxruntime (1.20+) quantizes, when a session is made, the float weights of a
# Conv/Gemm whose input is dequantized (8-bit, per tensor): a node the encodings keep
# float would be measured 8-bit. Every session that runs a QDQ model made here
# (onnxruntime CPU, the HTP simulator) sets this.
QDQ_SESSION_CONFIG = {"optimization.disable_specified_optimizers": "WeightBiasQuantization"}

_CALIBRATION = {"min-max": "MinMax", "minmax": "MinMax", "entropy": "Entropy",
                "percentile": "Percentile"}


@dataclass(frozen=True)
class QuantSettings:
    """How to quantize for the HTP: bitwidths, per-channel, calibration, AIMET overrides."""

    act_bitwidth: int = 16
    weights_bitwidth: int = 8
    bias_bitwidth: int = 32
    per_channel: bool = False
    act_calibration: str | None = None
    percentile: float | None = None
    overrides: Path | None = None          # AIMET .encodings
    float_fallback: bool = False
    param_calibration: str | None = None

    @classmethod
    def from_spec(cls, q: Any) -> QuantSettings:
        """From a ``qnn_ci.engine.spec.QuantizationSpec``."""
        return cls(q.act_bitwidth, q.weights_bitwidth, q.bias_bitwidth, q.per_channel,
                   q.act_calibration, q.percentile, q.overrides, q.float_fallback,
                   q.param_calibration)


@dataclass
class QuantizeResult:
    """The QDQ model quantized for the HTP: its path, rewrites, samples and findings."""

    model: Path
    constants_folded: int
    samples: int
    findings: list[Finding] = field(default_factory=list)
    overrides: OverrideSet | None = None
    opset: int | None = None
    duration_s: float = 0.0
    shared_from: str | None = None        # the export it was made for, when reused


class _Reader:
    """A CalibrationDataReader over in-memory feeds (duck-typed: get_next), with the
    ``__len__`` and ``set_range`` onnxruntime's strided calibration
    (``CalibStridedMinMax``) takes: it then collects ``[start, end)`` per call, and
    a histogram calibrator keeps only those samples' intermediate tensors."""

    def __init__(self, samples: Sequence[Feeds]) -> None:
        self._samples = samples              # may read from disk on access: iterate lazily
        self._range = range(len(samples))
        self._it = iter(self._range)

    def __len__(self) -> int:
        return len(self._samples)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._range = range(max(0, start_index), min(end_index, len(self._samples)))
        self._it = iter(self._range)

    def get_next(self) -> Feeds | None:
        i = next(self._it, None)
        return None if i is None else self._samples[i]

    def rewind(self) -> None:
        self._it = iter(self._range)


# Percentile's histograms merge between strided calls: one sample's intermediate
# tensors at a time instead of every sample's (its ranges move by a bin or so).
STRIDED = ("Percentile",)
ENTROPY_FRACTION = 4     # entropy's tensors of every sample: at most 1/4 of what is free


def intermediate_bytes(model: onnx.ModelProto) -> int:
    """One sample's float intermediate tensors, in bytes (static shapes)."""
    from qnn_ci.model.sizes import FLOAT_TYPES, tensor_bytes, tensor_specs

    outs = {o for n in model.graph.node for o in n.output if o}
    return sum(tensor_bytes(spec) or 0 for name, spec in tensor_specs(model).items()
               if name in outs and spec[0] in FLOAT_TYPES)


def _entropy_method(model: onnx.ModelProto, samples: int) -> tuple[str, Finding | None]:
    """onnxruntime's entropy calibrator keeps every calibration sample's intermediate
    tensors (its histograms may not be merged between strided calls: merged ones
    grow past 128 bins and the KL search then clips, differently for every sample
    order). Its ranges are min-max's (``_notes``), so when those tensors would not
    fit, min-max calibrates: the same ranges."""
    from qnn_ci.util.memory import available_bytes, human

    avail = available_bytes()
    need = intermediate_bytes(model) * samples
    if avail is None or need <= avail // ENTROPY_FRACTION:
        return "Entropy", None
    msg = (f"entropy calibration would hold {human(need)} ({samples} sample(s) of every "
           f"intermediate tensor), {human(avail)} available: calibrated by min-max, whose "
           "ranges onnxruntime's entropy calibrator gives here anyway")
    log.info("%s", msg)
    return "MinMax", Finding("sim.quantize.entropy_memory", msg, Severity.INFO)


def _quant_types(s: QuantSettings) -> tuple[Any, Any]:
    from onnxruntime.quantization import QuantType

    # What the HTP EP takes (seen on the simulator): 4-bit weights only signed and
    # per-channel, 16-bit weights signed (symmetric); 8-bit unsigned.
    acts = {8: QuantType.QUInt8, 16: QuantType.QUInt16}
    weights = {4: QuantType.QInt4, 8: QuantType.QUInt8, 16: QuantType.QInt16}
    if s.act_bitwidth not in acts:
        raise UserError(f"activation bitwidth {s.act_bitwidth} is not supported by the "
                        "simulator path; use 8 or 16", key="quantization.act_bitwidth")
    if s.weights_bitwidth not in weights:
        raise UserError(f"weights bitwidth {s.weights_bitwidth} is not supported by the "
                        "simulator path; use 4, 8 or 16", key="quantization.weights_bitwidth")
    return acts[s.act_bitwidth], weights[s.weights_bitwidth]


@contextmanager
def _quantizer_log(path: Path) -> Iterator[None]:
    """onnxruntime.quantization logs through the root logger (and would set up a
    stderr handler of its own), and its entropy / percentile calibrators print to
    stdout: send both to ``path`` while quantizing."""
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    try:
        with open(path, "a", encoding="utf-8") as out, redirect_stdout(out):
            yield
    finally:
        root.removeHandler(handler)
        handler.close()


def _notes(s: QuantSettings) -> list[Finding]:
    notes: list[Finding] = []
    if s.bias_bitwidth != 32:
        notes.append(Finding("sim.quantize.bias", f"bias bitwidth {s.bias_bitwidth} asked; "
                             "onnxruntime's QDQ quantizer always writes 32-bit biases",
                             Severity.WARNING))
    if s.float_fallback:
        notes.append(Finding("sim.quantize.float_fallback", "float_fallback asked: the "
                             "simulator path quantizes every op (it cannot know which the "
                             "converter would leave float)", Severity.INFO))
    if s.param_calibration and s.param_calibration.lower() not in ("min-max", "minmax"):
        notes.append(Finding("sim.quantize.param_calibration", f"param_calibration "
                             f"{s.param_calibration!r}: onnxruntime quantizes weights by "
                             "min-max on this path", Severity.WARNING))
    if s.weights_bitwidth == 4 and not s.per_channel:
        notes.append(Finding("sim.quantize.per_channel", "4-bit weights: quantized per-channel "
                             "(signed, symmetric), the only 4-bit form the HTP EP accepts",
                             Severity.WARNING))
    if s.act_calibration and s.act_calibration.lower() == "entropy":
        notes.append(Finding(
            "sim.quantize.entropy", "act_calibration entropy: onnxruntime's entropy "
            "calibrator, as its quantize API builds it, has 128 histogram bins for 128 "
            "quantized bins (not settable through quantize_static), so its KL search can "
            "only choose the full range: the simulator path gets the ranges of min-max; "
            "the converter's entropy calibration may differ", Severity.WARNING))
    if s.act_calibration and s.act_calibration.lower() not in _CALIBRATION:
        notes.append(Finding("sim.quantize.calibration",
                             f"act_calibration {s.act_calibration!r} has no onnxruntime "
                             "equivalent; min-max used on the simulator path",
                             Severity.WARNING))
    return notes


def quantize_for_htp(src: Path, dst: Path, samples: Sequence[Feeds], settings: QuantSettings,
                     *, log_path: Path | None = None, fold: bool = True,
                     fuse: bool = True) -> QuantizeResult:
    """Fold Constant weights into initializers, fold BatchNormalization into the
    convolution before it, then write the QDQ model ``dst`` (and the float model
    it came from, ``<stem>.float.onnx``). ``fold``/``fuse`` False skip those
    steps (to show what they prevent). Raises UserError for settings the path
    cannot honour; quantizer failures propagate."""
    from onnxruntime.quantization import CalibrationMethod, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    if not samples:
        raise UserError("no calibration samples to quantize with")
    start = time.monotonic()
    act_type, weight_type = _quant_types(settings)
    model = onnx.load(str(src))
    # An already-quantized model (QDQ, QOperator, dynamic): one line saying so, not
    # a second quantization into a broken model (qnn_ci.model.prequantized).
    refuse_quantized(model, file=src)
    folded = fold_constants(model) if fold else 0
    fused = fuse_batchnorm(model) if fuse else 0
    findings = _notes(settings)
    if folded:
        findings.append(Finding("sim.constants_folded",
                                f"{folded} Constant node(s) folded into initializers before "
                                "quantizing (weights held in Constant nodes stay float in the "
                                "QDQ quantizer and the HTP then rejects them)", Severity.INFO))
    if fused:
        findings.append(Finding("sim.batchnorm_fused", f"{fused} BatchNormalization node(s) "
                                "folded into the convolution before them (as the QNN converter "
                                "does)", Severity.INFO))
    findings += _unfused_batchnorm(model)
    overrides: OverrideSet | None = None
    if settings.overrides is not None:
        from qnn_ci.sdk.encodings import read_encodings

        overrides = overrides_from_encodings(read_encodings(settings.overrides), model)
        findings += _override_findings(overrides, settings.overrides)
    keep_float = float_nodes(model, overrides.float_tensors) if overrides else []
    if keep_float:
        findings.append(_float_finding(keep_float, settings.overrides))
    method_name = _CALIBRATION.get((settings.act_calibration or "min-max").lower(), "MinMax")
    if method_name == "Entropy":
        method_name, memory_note = _entropy_method(model, len(samples))
        findings += [memory_note] if memory_note is not None else []
    dst.parent.mkdir(parents=True, exist_ok=True)
    stem = dst.name.removesuffix(".onnx").removesuffix(".qdq")
    folded_path = dst.with_name(f"{stem}.float.onnx")
    onnx.save(model, str(folded_path))
    with _quantizer_log(log_path or dst.with_suffix(".quantize.log")):
        config = get_qnn_qdq_config(
            str(folded_path), _Reader(samples),
            calibrate_method=getattr(CalibrationMethod, method_name),
            activation_type=act_type, weight_type=weight_type,
            per_channel=settings.per_channel or settings.weights_bitwidth == 4,
            init_overrides=overrides.overrides if overrides and overrides.overrides else None,
            nodes_to_exclude=keep_float or None)
        if method_name == "Percentile" and settings.percentile is not None:
            config.extra_options["CalibPercentile"] = float(settings.percentile)
        if method_name in STRIDED:
            config.extra_options["CalibStridedMinMax"] = 1
        quantize(str(folded_path), str(dst), config)
    opset = next((o.version for o in onnx.load(str(dst), load_external_data=False).opset_import
                  if o.domain in ("", "ai.onnx")), None)
    return QuantizeResult(dst, folded, len(samples), findings, overrides, opset,
                          time.monotonic() - start)


def float_nodes(model: onnx.ModelProto, tensors: Sequence[str]) -> list[str]:
    """The names of the nodes producing ``tensors`` (float encodings: the converter
    keeps those ops float), in graph order. An unnamed producer is given a name
    (``<op>__<first output>``) in ``model`` so the quantizer can exclude it."""
    wanted = set(tensors)
    names = {n.name for n in model.graph.node if n.name}
    out: list[str] = []
    for node in model.graph.node:
        if not wanted.intersection(node.output):
            continue
        if not node.name:
            base = f"{node.op_type}__{node.output[0]}"
            name, k = base, 1
            while name in names:
                name, k = f"{base}_{k}", k + 1
            node.name = name
            names.add(name)
        out.append(node.name)
    return out


def _float_finding(nodes: list[str], path: Path | None) -> Finding:
    shown = ", ".join(nodes[:5]) + (f" (+{len(nodes) - 5} more)" if len(nodes) > 5 else "")
    source = path.name if path is not None else "the encodings"
    return Finding("sim.overrides.float", f"{len(nodes)} node(s) kept float as {source} asks "
                   f"(float encodings on their outputs): {shown}", Severity.INFO)


def _unfused_batchnorm(model: onnx.ModelProto) -> list[Finding]:
    n = sum(node.op_type == "BatchNormalization" for node in model.graph.node)
    if not n:
        return []
    return [Finding("sim.batchnorm", f"{n} BatchNormalization node(s) left unfused: quantized "
                    "on their own they were seen to compute wrong results on the HTP "
                    "simulator (the PP-OCR classifier: cosine 0.17 unfused, 1.0 fused); fold "
                    "them into the preceding Conv", Severity.WARNING)]


def _override_findings(o: OverrideSet, path: Path) -> list[Finding]:
    out = [Finding("sim.overrides", f"{len(o.applied)} AIMET encoding(s) from {path.name} "
                   "applied as tensor overrides", Severity.INFO)]
    if o.unknown:
        shown = cut_text(o.unknown, 5)
        out.append(Finding("sim.overrides.unknown", f"{len(o.unknown)} encoding(s) name tensors "
                           f"the model does not have (ignored): {shown}", Severity.WARNING))
    for name, why in o.skipped.items():
        if not why.startswith("32-bit"):
            out.append(Finding("sim.overrides.skipped", f"{name}: not applied ({why})",
                               Severity.WARNING, subject=name))
    return out
