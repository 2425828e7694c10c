"""sim_numerics on the real simulator: the near-zero rule gets the output's
quantization step from the QDQ model, so an output the HTP cannot resolve is
said to be near zero, and a small but genuine signal is still judged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qnn_ci.engine.bounds import Thresholds
from qnn_ci.sim.check import check_htp
from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.numerics import output_steps, simulate_and_compare
from qnn_ci.sim.quantize import QuantSettings
from tests.sim.conftest import conv_graph, needs_sim

pytestmark = needs_sim


def _feeds(count: int, scale: float = 1.0, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    base = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
    return [{"x": ((base * rng.uniform(0.5, 1.5) + rng.uniform(-0.2, 0.2)) * scale)
             .astype(np.float32)} for _ in range(count)]


def _run(model: Path, tmp_path: Path, scale: float = 1.0):
    soc = sim_target("QCS6490")
    report = check_htp(model, tmp_path / "npu", soc, _feeds(4, scale), QuantSettings())
    assert report.passed, [f.message for f in report.errors()]
    assert report.quantize is not None and report.prepare is not None
    return simulate_and_compare(model, report.quantize.model, report.prepare.ctx_model, soc,
                                _feeds(2, scale, seed=7), Thresholds(), tmp_path / "num")


def test_a_sigmoid_map_below_one_output_step_is_near_zero_not_a_cosine_failure(
        tmp_path: Path) -> None:
    """The PP-OCR detector on random input in miniature: a W8A16 Sigmoid output has
    the fixed step 1/65536; a map peaking near 1e-5 is below one step, the HTP
    returns zeros, and cosine would fail on that."""
    model = conv_graph(tmp_path / "sig.onnx", bias=-13.5, act="Sigmoid")
    num = _run(model, tmp_path)
    assert num.quant_steps == {"y": 2 ** -16}
    for comp in (num.comparison, num.qdq_cpu):
        assert comp is not None and not comp.passed
        for s in comp.outputs[0].samples:
            assert s.metrics is not None and s.metrics.ref_peak < 2 ** -16
            assert s.metrics.reference_near_zero and s.metrics.cosine is None
            assert s.verdict == "FAIL reference_near_zero"
    assert {f.check for f in num.comparison.errors()} == {"compare.reference_near_zero"}
    msg = num.comparison.errors()[0].message
    assert "within 4 quantization steps of zero (step 1.526e-05)" in msg
    assert "--threshold y:max_abs=" in msg


def test_a_small_genuine_signal_is_judged_and_passes(tmp_path: Path) -> None:
    """Inputs scaled by 1e-7: the output peaks near 2e-7 (the old fixed floor of
    1e-6 called that "zero everywhere"); calibrated on the same scale, the HTP
    resolves it and cosine is meaningful."""
    model = conv_graph(tmp_path / "small.onnx", bias=0.0)
    num = _run(model, tmp_path, scale=1e-7)
    (step,) = num.quant_steps.values()
    assert step < 1e-8
    assert num.passed, [f.message for f in num.comparison.errors()]
    for s in num.comparison.outputs[0].samples:
        assert s.metrics is not None and s.metrics.ref_peak < 1e-6
        assert not s.metrics.reference_near_zero and s.metrics.cosine > 0.999


def test_output_steps_reads_the_last_dequantize_scale(tmp_path: Path) -> None:
    model = conv_graph(tmp_path / "relu.onnx")
    report = check_htp(model, tmp_path, sim_target("SM8550"), _feeds(2), QuantSettings(
        act_bitwidth=8))
    assert report.quantize is not None
    steps = output_steps(report.quantize.model)
    # 8-bit activations: the calibrated Relu output range [0, max] in 255 steps.
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    peak = max(float(sess.run(None, f)[0].max()) for f in _feeds(2))
    assert steps == {"y": pytest.approx(peak / 255, rel=1e-4)}
    assert output_steps(model) == {}          # a float model has none
