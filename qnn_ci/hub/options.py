"""The AI Hub compile options an export asks for: the classic route's artefact (a
QNN context binary), and the board entry's own ``options``. Who quantizes is the
board's ``quantize``:

- ``qnn-ci`` (default): AI Hub compiles the QDQ model qnn-ci made (``sim_npu``'s,
  from the export's own quantization settings and calibration samples), whose
  quantization the compiled graph keeps; the same QDQ model on onnxruntime's CPU is
  the device's reference, as the CPU backend is a board's.
- ``ai-hub``: AI Hub quantizes the pinned float model, from the export's bit widths
  as ``--quantize_full_type``, calibrated on the export's samples; the export's other
  quantization settings are not AI Hub's to take (``not_applied``)."""

from __future__ import annotations

import shlex

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.errors import UserError
from qnn_ci.tables import HUB_QUANTIZE_TYPES, HUB_TARGET_RUNTIME


def quantize_type(export: ExportSpec) -> str:
    q = export.quantization
    found = HUB_QUANTIZE_TYPES.get((q.weights_bitwidth, q.act_bitwidth))
    if found is None:
        known = ", ".join(f"weights {w} / activations {a}"
                          for (w, a) in sorted(HUB_QUANTIZE_TYPES))
        raise UserError(f"AI Hub has no --quantize_full_type for weights {q.weights_bitwidth} "
                        f"/ activations {q.act_bitwidth} bits; it takes {known}",
                        file=export.manifest, line=export.line, key="quantization")
    return found


QNN_CI, AI_HUB = "qnn-ci", "ai-hub"


def compile_options(export: ExportSpec, board_options: str, quantize: str = QNN_CI) -> str:
    """The options string of the compile job (``shlex``-quoted)."""
    parts = ["--target_runtime", HUB_TARGET_RUNTIME]
    if quantize == AI_HUB:
        parts += ["--quantize_full_type", quantize_type(export)]
    try:
        extra = shlex.split(board_options)
    except ValueError as exc:
        raise UserError(f"the board's options cannot be split into arguments: {exc}",
                        key="options") from None
    return shlex.join([*parts, *extra])


def not_applied(export: ExportSpec, quantize: str = AI_HUB) -> list[str]:
    """The export's quantization settings an AI Hub compile does not take (none when
    AI Hub compiles qnn-ci's QDQ model)."""
    if quantize != AI_HUB:
        return []
    q = export.quantization
    found = []
    if q.per_channel:
        found.append("per_channel")
    if q.act_calibration or q.param_calibration or q.percentile is not None:
        found.append("calibration methods")
    if q.overrides is not None:
        found.append("overrides (AIMET encodings)")
    if q.float_fallback:
        found.append("float_fallback")
    return found
