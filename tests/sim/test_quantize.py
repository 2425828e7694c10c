"""Quantizing for the HTP: the manifest's bitwidths, per-channel, AIMET overrides,
pre-processing (BatchNormalization fused), unsupported settings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qnn_ci.engine.results import Severity
from qnn_ci.engine.spec import QuantizationSpec
from qnn_ci.errors import UserError
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from tests.sim.conftest import needs_sim

pytestmark = needs_sim


def _qparams(model_path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """QuantizeLinear input tensor -> (scale, zero point)."""
    m = onnx.load(str(model_path))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] in inits:
            out.setdefault(n.input[0], (inits[n.input[1]], inits[n.input[2]]))
    return out


def test_defaults_are_w8a16(graphs: dict[str, Path], tmp_path: Path, conv_feeds) -> None:
    res = quantize_for_htp(graphs["conv"], tmp_path / "conv.qdq.onnx", conv_feeds(3),
                           QuantSettings.from_spec(QuantizationSpec()))
    q = _qparams(res.model)
    assert q["x"][1].dtype == np.uint16          # activations 16-bit
    assert q["w_quantized"][1].dtype == np.uint8     # weights 8-bit
    assert res.samples == 3 and res.opset == 21   # 16-bit Q/DQ need opset 21
    assert res.constants_folded == 0


def test_w8a8_per_channel(graphs: dict[str, Path], tmp_path: Path, conv_feeds) -> None:
    res = quantize_for_htp(graphs["conv"], tmp_path / "conv.qdq.onnx", conv_feeds(3),
                           QuantSettings(act_bitwidth=8, per_channel=True))
    m = onnx.load(str(res.model))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    dq_w = next(n for n in m.graph.node if n.op_type == "DequantizeLinear"
                and n.output[0].startswith("w"))
    assert inits[dq_w.input[1]].shape == (4,)     # one scale per output channel
    x_q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    assert inits[x_q.input[2]].dtype == np.uint8


def test_aimet_encodings_become_tensor_overrides(graphs: dict[str, Path], tmp_path: Path,
                                                 conv_feeds) -> None:
    enc = tmp_path / "conv.encodings"
    enc.write_text(json.dumps({
        "version": "1.0.0",
        "activation_encodings": [
            {"name": "x", "dtype": "INT", "enc_type": "PER_TENSOR", "bw": 16, "is_sym": False,
             "scale": [5e-5], "offset": [-20000]},
            {"name": "not_in_model", "dtype": "INT", "enc_type": "PER_TENSOR", "bw": 16,
             "is_sym": False, "scale": [1e-4], "offset": [0]}],
        "param_encodings": [
            {"name": "w", "dtype": "INT", "enc_type": "PER_CHANNEL", "bw": 8, "is_sym": True,
             "scale": [0.004, 0.005, 0.006, 0.007], "offset": [-128] * 4}],
        "quantizer_args": {}}))
    res = quantize_for_htp(graphs["conv"], tmp_path / "conv.qdq.onnx", conv_feeds(2),
                           QuantSettings(overrides=enc))
    scale, zp = _qparams(res.model)["x"]
    assert float(scale) == pytest.approx(5e-5) and int(zp) == 20000
    w_scale, w_zp = _qparams(res.model)["w_quantized"]
    np.testing.assert_allclose(w_scale, [0.004, 0.005, 0.006, 0.007], rtol=1e-6)
    assert w_zp.tolist() == [128] * 4 and w_zp.dtype == np.uint8
    assert res.overrides is not None and res.overrides.applied == ["x", "w"]
    checks = {f.check: f for f in res.findings}
    assert "not_in_model" in checks["sim.overrides.unknown"].message
    assert checks["sim.overrides.unknown"].severity == Severity.WARNING


def test_batchnorm_is_fused_before_quantizing(graphs: dict[str, Path], tmp_path: Path,
                                              conv_feeds) -> None:
    res = quantize_for_htp(graphs["bn"], tmp_path / "bn.qdq.onnx", conv_feeds(2),
                           QuantSettings())
    ops = {n.op_type for n in onnx.load(str(res.model)).graph.node}
    assert "BatchNormalization" not in ops
    pre = next(f for f in res.findings if f.check == "sim.batchnorm_fused")
    assert pre.message.startswith("1 BatchNormalization node(s) folded into the convolution")
    # Without pre-processing it stays, and the report warns about it.
    raw = quantize_for_htp(graphs["bn"], tmp_path / "raw" / "bn.qdq.onnx", conv_feeds(2),
                           QuantSettings(), fuse=False)
    assert "BatchNormalization" in {n.op_type for n in onnx.load(str(raw.model)).graph.node}
    assert "sim.batchnorm" in {f.check for f in raw.findings}


@pytest.mark.parametrize(("settings", "key"), [
    (QuantSettings(act_bitwidth=4), "quantization.act_bitwidth"),
    (QuantSettings(weights_bitwidth=2), "quantization.weights_bitwidth"),
])
def test_unsupported_bitwidths_are_user_errors(graphs: dict[str, Path], tmp_path: Path,
                                               conv_feeds, settings: QuantSettings,
                                               key: str) -> None:
    with pytest.raises(UserError) as err:
        quantize_for_htp(graphs["conv"], tmp_path / "c.qdq.onnx", conv_feeds(1), settings)
    assert err.value.key == key


def test_settings_the_path_cannot_honour_are_warned(graphs: dict[str, Path], tmp_path: Path,
                                                    conv_feeds) -> None:
    res = quantize_for_htp(graphs["conv"], tmp_path / "c.qdq.onnx", conv_feeds(1),
                           QuantSettings(bias_bitwidth=8, act_calibration="sqnr",
                                         param_calibration="sqnr", float_fallback=True))
    warned = {f.check for f in res.findings if f.severity == Severity.WARNING}
    assert {"sim.quantize.bias", "sim.quantize.calibration",
            "sim.quantize.param_calibration"} <= warned
    assert "sim.quantize.float_fallback" in {f.check for f in res.findings}
    spec = QuantizationSpec(float_fallback=True, per_channel=True, act_bitwidth=8)
    assert QuantSettings.from_spec(spec) == QuantSettings(act_bitwidth=8, per_channel=True,
                                                          float_fallback=True)
