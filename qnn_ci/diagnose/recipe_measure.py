"""Measuring one recipe where its verdict is judged.

A recipe's steps, each cheaper than the next and each able to end it:

1. ``quantize`` -- the float model quantized with the recipe's settings
   (``quantize_for_htp``, the export's calibration samples) into its folder;
2. ``same_parameters`` -- its QDQ model's quantization parameters against the
   baseline's: all equal means the recipe changes nothing (no simulator time);
3. ``prepare`` -- the same prepare as ``sim_npu`` for the export's SoC (CPU
   fallback off, the FP16 audit): a model the HTP refuses is "rejected", with the
   QNN error code and node the EP log names;
4. ``screen`` -- the QDQ model on onnxruntime CPU over the held-out samples
   against fp32 (cheap; ranks candidates, never earns "passes");
5. ``simulate`` -- the prepared model on the SoC's simulator over the same
   held-out samples, judged with the export's thresholds: the verdict.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qnn_ci.compare import compare_sets, load_output_set
from qnn_ci.compare.thresholds import MIN_METRICS
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.sim.quantize import QuantizeResult, QuantSettings
from qnn_ci.sim.samples import Feeds
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)


def first_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def worst_values(comparison: Any) -> dict[str, float | None]:
    """The worst value of every metric that has a bound, over outputs that bound it."""
    worst: dict[str, float | None] = {}
    for out in comparison.outputs:
        for metric in out.bounds:
            for s in out.samples:
                v = s.metrics.value(metric) if s.metrics else None
                if v is None:
                    worst.setdefault(metric, None)
                    continue
                old = worst.get(metric)
                if old is None or _worse(metric, v, old):
                    worst[metric] = float(v)
    return worst


def _worse(metric: str, a: float, b: float) -> bool:
    if math.isnan(a):
        return not math.isnan(b)
    if math.isnan(b):
        return False
    return a < b if metric in MIN_METRICS else a > b


def quantize(float_model: Path, folder: Path, calibration: Sequence[Feeds],
             settings: QuantSettings) -> QuantizeResult:
    from qnn_ci.sim.quantize import quantize_for_htp

    return quantize_for_htp(float_model, folder / "model.qdq.onnx", calibration, settings,
                            log_path=folder / "quantize.log")


def parameters(qdq_model: Path) -> dict[tuple[str, str], str]:
    """(op, quantized tensor) -> a digest of the scale, zero point and axis of each
    QuantizeLinear / DequantizeLinear, and of the integer weight a DequantizeLinear
    reads: what a quantization recipe can change."""
    import onnx

    model = onnx.load(str(qdq_model))
    inits = {i.name: i for i in model.graph.initializer}
    out: dict[tuple[str, str], str] = {}
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or not node.input:
            continue
        h = hashlib.sha256()
        for name in node.input[1:]:
            init = inits.get(name)
            h.update(init.SerializeToString() if init is not None else name.encode())
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            h.update(inits[node.input[0]].SerializeToString())   # a quantized weight
        for attr in node.attribute:
            h.update(attr.SerializeToString())
        tensor = node.input[0] if node.op_type == "QuantizeLinear" else node.output[0]
        out[(node.op_type, tensor)] = h.hexdigest()
    return out


def same_parameters(recipe_model: Path, baseline: dict[tuple[str, str], str]) -> int | None:
    """The number of quantized tensors when ``recipe_model`` quantizes exactly as the
    baseline does (same tensors, same parameters), else None."""
    mine = parameters(recipe_model)
    return len(mine) if mine and mine == baseline else None


def prepare(qdq_model: Path, float_model: Path, folder: Path, soc: SocInfo,
            samples: Sequence[Feeds], settings: QuantSettings) -> tuple[Any, str]:
    """The ``sim_npu`` check of an already quantized model: (its report, "" when it
    prepared and passed the FP16 audit, else why the HTP refuses it)."""
    from qnn_ci.sim.check import check_htp

    made = QuantizeResult(qdq_model, 0, len(samples))

    def reuse(*_: Any) -> QuantizeResult:
        return made

    report = check_htp(float_model, folder, soc, samples, settings, quantizer=reuse)
    if report.passed and report.prepare is not None and report.prepare.ctx_model is not None:
        return report, ""
    return report, refusal(report)


def refusal(report: Any) -> str:
    """``rejected by QCS6490 HTP: QNN error 3110 on node 'conv_b' (Conv)``."""
    soc = report.soc.name
    p = report.prepare
    if p is not None and not p.prepared:
        coded = [r for r in p.rejected if r.error_code is not None] or list(p.rejected)
        if coded:
            r = coded[0]
            code = f"QNN error {r.error_code} on " if r.error_code is not None else ""
            more = f" (+{len(p.rejected) - 1} more node(s))" if len(p.rejected) > 1 else ""
            return f"rejected by {soc} HTP: {code}node {r.name!r} ({r.op_type or '?'}){more}"
        return f"rejected by {soc} HTP: {first_line(p.error or report.summary_line())}"
    errors = report.errors()
    if errors:
        return f"rejected by {soc} HTP: {first_line(errors[0].message)}"
    return f"rejected by {soc} HTP: {first_line(report.summary_line())}"


def screen(qdq_model: Path, held_out: Sequence[Feeds], ref_dir: Path,
           expected: dict[str, tuple[str, tuple[int, ...]]], thresholds: Thresholds,
           folder: Path) -> Any:
    """The QDQ model on onnxruntime CPU against fp32 (its outputs in ``ref_dir``)."""
    from qnn_ci.sim.numerics import output_steps, write_outputs
    from qnn_ci.sim.sessions import cpu_session, run_all

    outputs, _ = run_all(cpu_session(qdq_model), held_out)
    test_dir = write_outputs(folder / "qdq_cpu", outputs)
    return compare_sets(load_output_set(ref_dir), load_output_set(test_dir), thresholds,
                        expected=expected, quant_steps=output_steps(qdq_model))


def simulate(float_model: Path, qdq_model: Path, ctx_model: Path, soc: SocInfo,
             held_out: Sequence[Feeds], thresholds: Thresholds, folder: Path) -> Any:
    """The prepared model on the SoC's simulator against fp32 (``NumericsResult``)."""
    from qnn_ci.sim.numerics import simulate_and_compare

    return simulate_and_compare(float_model, qdq_model, ctx_model, soc, held_out, thresholds,
                                folder / "numerics")
