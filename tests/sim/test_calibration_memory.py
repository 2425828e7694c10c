"""Calibration in bounded memory: percentile calibrates one sample at a time
(onnxruntime's strided calibration, histograms merged between calls), entropy's
ranges are min-max's (checked here) and min-max calibrates it when every sample's
tensors would not fit; min-max itself is untouched. Real onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from qnn_ci.sim.quantize import QuantSettings, _Reader, intermediate_bytes, quantize_for_htp
from tests.diagnose.graphs import collapse_model, collapse_samples


def _scales(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return {n.input[1]: inits[n.input[1]] for n in model.graph.node
            if n.op_type == "QuantizeLinear" and n.input[1] in inits}


@pytest.fixture(scope="module")
def collapse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collapse_model(tmp_path_factory.mktemp("cal") / "collapse.onnx")


def test_the_reader_takes_a_range() -> None:
    samples = [{"x": np.full(2, i, np.float32)} for i in range(5)]
    reader = _Reader(samples)
    assert len(reader) == 5
    reader.set_range(start_index=2, end_index=4)
    got = []
    while (feeds := reader.get_next()) is not None:
        got.append(int(feeds["x"][0]))
    assert got == [2, 3]
    reader.rewind()
    first = reader.get_next()
    assert first is not None and int(first["x"][0]) == 2


def test_strided_percentile_gives_a_working_model_with_close_scales(
        collapse: Path, tmp_path: Path) -> None:
    """Percentile one sample at a time: the QDQ model runs, each scale within 0.5 %
    of onnxruntime's all-samples-at-once calibration (the merged histogram's bins are
    the first sample's width), and quantize.log shows one collection per sample."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationMethod, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    cal = collapse_samples(6, seed=1)
    res = quantize_for_htp(collapse, tmp_path / "p.qdq.onnx", cal,
                           QuantSettings(act_calibration="percentile"))
    log = (tmp_path / "p.qdq.quantize.log").read_text()
    assert log.count("Collecting tensor data and making histogram") == 6
    folded = tmp_path / "p.float.onnx"
    config = get_qnn_qdq_config(str(folded), _Reader(cal),
                                calibrate_method=CalibrationMethod.Percentile,
                                activation_type=QuantType.QUInt16,
                                weight_type=QuantType.QUInt8)
    quantize(str(folded), str(tmp_path / "whole.qdq.onnx"), config)   # unstrided
    strided, whole = _scales(res.model), _scales(tmp_path / "whole.qdq.onnx")
    assert strided.keys() == whole.keys() and len(strided) >= 5
    for k in whole:
        np.testing.assert_allclose(strided[k], whole[k], rtol=5e-3)
    sess = ort.InferenceSession(str(res.model), providers=["CPUExecutionProvider"])
    out = sess.run(None, collapse_samples(1, seed=9)[0])[0]
    assert out.shape == (1, 10) and np.isfinite(out).all()


def test_min_max_is_untouched_and_entropy_gives_its_ranges(
        collapse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entropy's scales equal min-max's (onnxruntime's 128 bins for 128 levels), said
    in a warning; when every sample's tensors would not fit (QNN_CI_MEMORY), min-max
    calibrates it, with one line saying so: the same scales again."""
    cal = collapse_samples(4, seed=1)
    monkeypatch.setenv("QNN_CI_MEMORY", "64G")
    mm = quantize_for_htp(collapse, tmp_path / "m.qdq.onnx", cal, QuantSettings())
    again = quantize_for_htp(collapse, tmp_path / "m2.qdq.onnx", cal, QuantSettings())
    assert (tmp_path / "m.qdq.onnx").read_bytes() == (tmp_path / "m2.qdq.onnx").read_bytes()
    ent = quantize_for_htp(collapse, tmp_path / "e.qdq.onnx", cal,
                           QuantSettings(act_calibration="entropy"))
    assert "Number of quantized bins : 128" in (tmp_path / "e.qdq.quantize.log").read_text()
    note = [f for f in ent.findings if f.check == "sim.quantize.entropy"]
    assert len(note) == 1 and "only choose the full range" in note[0].message
    a, e = _scales(mm.model), _scales(ent.model)
    assert a.keys() == e.keys() and all(np.array_equal(a[k], e[k]) for k in a)
    assert not [f for f in again.findings if "entropy" in f.check]
    need = intermediate_bytes(onnx.load(str(tmp_path / "e.float.onnx")))
    assert need > 100_000                          # a, b, c ... at 1x8..16x32x32 float32
    monkeypatch.setenv("QNN_CI_MEMORY", str(need * 4 * 4 - 1))   # 4 samples: one too many
    low = quantize_for_htp(collapse, tmp_path / "l.qdq.onnx", cal,
                           QuantSettings(act_calibration="entropy"))
    said = [f for f in low.findings if f.check == "sim.quantize.entropy_memory"]
    assert len(said) == 1 and "calibrated by min-max" in said[0].message
    assert "quantized bins" not in (tmp_path / "l.qdq.quantize.log").read_text()
    assert all(np.array_equal(a[k], _scales(low.model)[k]) for k in a)
