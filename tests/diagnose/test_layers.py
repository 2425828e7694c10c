"""Per-layer metrics (qnn_ci.diagnose.layers): pure numpy, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qnn_ci.diagnose.layers import (
    CHANNELS_LAST,
    LayerAccumulator,
    TensorInfo,
    bounds_for,
    channel_axis,
    layer_report,
    tensor_stats,
)
from qnn_ci.engine.bounds import Thresholds

RNG = np.random.default_rng(11)


def collapsed(ref: np.ndarray, channel: int, axis: int = 1) -> np.ndarray:
    """``ref`` with one channel zeroed (what per-tensor weight rounding does)."""
    out = ref.copy()
    index = [slice(None)] * ref.ndim
    index[axis] = channel
    out[tuple(index)] = 0.0
    return out


@pytest.mark.parametrize(("shape", "layout", "axis"), [
    ((1, 16, 8, 8), None, 1), ((1, 8, 8, 16), CHANNELS_LAST, 3), ((1, 4, 100), None, 1),
    ((1, 100, 4), CHANNELS_LAST, 2), ((2, 3, 4, 5, 6), None, 1), ((1, 10), None, None),
    ((10,), None, None), ((1, 8, 1, 1), None, None), ((1, 1, 8, 8), None, None)])
def test_channel_axis_rule(shape: tuple[int, ...], layout: str | None, axis: int | None) -> None:
    assert channel_axis(shape, layout) == axis


def test_a_collapsed_channel_hides_in_the_tensor_wide_cosine() -> None:
    ref = RNG.standard_normal((1, 16, 8, 8))
    ref[:, 0] *= 1000.0                      # one channel carries the energy
    s = tensor_stats(ref, collapsed(ref, 5))
    assert s.cosine is not None and s.cosine > 0.99999
    assert (s.channel_axis, s.worst_channel, s.worst_channel_cosine) == (1, 5, 0.0)
    assert s.snr_db is not None and s.snr_db > 50


def test_channels_last_layout_finds_the_same_channel() -> None:
    ref = RNG.standard_normal((1, 8, 8, 16))
    s = tensor_stats(ref, collapsed(ref, 3, axis=3), CHANNELS_LAST)
    assert (s.channel_axis, s.worst_channel, s.worst_channel_cosine) == (3, 3, 0.0)


def test_near_zero_channels_are_not_judged() -> None:
    ref = RNG.standard_normal((1, 4, 8, 8))
    ref[:, 2] = 1e-9                          # a dead channel: rounding noise only
    test = ref.copy()
    test[:, 2] = -1e-9
    s = tensor_stats(ref, test)
    assert s.worst_channel != 2 and s.worst_channel_cosine == pytest.approx(1.0)


def test_all_zero_reference_has_no_cosine_and_no_divergence() -> None:
    order = [TensorInfo("z", "relu", "Relu")]
    layers, first, _ = layer_report(order, {"z": [np.zeros((1, 4, 4, 4))]},
                                    {"z": [np.full((1, 4, 4, 4), 1e-4)]}, {"cosine": 0.99})
    assert layers[0].cosine is None and layers[0].max_abs == pytest.approx(1e-4)
    assert first is None and not layers[0].crosses


def test_nan_mismatch_is_a_divergence() -> None:
    ref = RNG.standard_normal((1, 4, 4, 4))
    test = ref.copy()
    test[0, 0, 0, 0] = np.nan
    layers, first, _ = layer_report([TensorInfo("t", "n", "Conv")], {"t": [ref]}, {"t": [test]},
                                    {"cosine": 0.99})
    assert first is not None and first.tensor == "t" and math.isnan(first.value or 0.0)
    assert layers[0].crosses and layers[0].max_abs == math.inf


def chain() -> tuple[list[TensorInfo], dict[str, list[np.ndarray]], dict[str, list[np.ndarray]]]:
    """x -> conv1 -> t1 -> relu1 -> t2 (not measured) -> conv2 -> t3 -> gemm -> t4,
    two samples; conv2 collapses channel 2 in sample 1 only."""
    order = [TensorInfo("t1", "conv1", "Conv", ("x", "w1")),
             TensorInfo("t2", "relu1", "Relu", ("t1",)),
             TensorInfo("t3", "conv2", "Conv", ("t2", "w2")),
             TensorInfo("t4", "gemm", "Gemm", ("t3",))]
    ref: dict[str, list[np.ndarray]] = {"t1": [], "t3": [], "t4": []}
    test: dict[str, list[np.ndarray]] = {"t1": [], "t3": [], "t4": []}
    for n in range(2):
        t1 = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
        t3 = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
        t3[:, 0] *= 100
        t4 = RNG.standard_normal((1, 10)).astype(np.float32)
        ref["t1"].append(t1)
        ref["t3"].append(t3)
        ref["t4"].append(t4)
        test["t1"].append((t1 + 1e-4 * RNG.standard_normal(t1.shape)).astype(np.float32))
        test["t3"].append(collapsed(t3, 2) if n == 1 else t3.copy())
        test["t4"].append((t4 * 0.5 + 0.5 * RNG.standard_normal(t4.shape)).astype(np.float32))
    return order, ref, test


def test_first_divergence_worst_sample_and_jumps() -> None:
    order, ref, test = chain()
    layers, first, jumps = layer_report(order, ref, test, {"cosine": 0.99})
    assert [m.tensor for m in layers] == ["t1", "t2", "t3", "t4"]
    assert [m.index for m in layers] == [0, 1, 2, 3]
    t1, t2, t3, t4 = layers
    assert t2.cosine is None and not t2.crosses            # never measured
    assert t3.worst_channel == 2 and t3.worst_channel_cosine == 0.0   # sample 1's, the worst
    assert t3.cosine is not None and t3.cosine > 0.99       # hidden tensor-wide
    assert first is not None
    assert (first.tensor, first.node, first.op_type, first.index) == ("t3", "conv2", "Conv", 2)
    assert (first.metric, first.value, first.bound) == ("worst_channel_cosine", 0.0, 0.99)
    assert t4.crosses and t4.channel_axis is None
    # t3's node input t2 was not measured: its worst input is t1, further up.
    assert t3.jump == pytest.approx(min(t1.cosine, t1.worst_channel_cosine) - 0.0)
    assert jumps[0].tensor == "t3" and all(j.jump and j.jump > 0 for j in jumps)
    assert [j.jump for j in jumps] == sorted((j.jump for j in jumps), reverse=True)


def test_snr_and_max_abs_bounds_apply_when_given() -> None:
    order, ref, test = chain()
    ref = {"t1": ref["t1"]}
    test = {"t1": test["t1"]}
    _, first, _ = layer_report(order[:1], ref, test, {"cosine": 0.9, "snr": 200.0})
    assert first is not None and first.metric == "snr"
    _, first, _ = layer_report(order[:1], ref, test, {"cosine": 0.9, "max_abs": 1e-9})
    assert first is not None and first.metric == "max_abs"
    _, first, _ = layer_report(order[:1], ref, test, {"cosine": 0.9})
    assert first is None


def test_accumulator_keeps_metrics_not_arrays() -> None:
    order, ref, test = chain()
    acc = LayerAccumulator(order)
    for n in range(2):
        acc.add({k: v[n] for k, v in ref.items()}, {k: v[n] for k, v in test.items()})
    rep = acc.report({"cosine": 0.99})
    assert acc.samples == 2 and rep.compared == 3 and rep.missing == ["t2"]
    arrays = [v for v in vars(acc).values() if isinstance(v, np.ndarray)]
    assert not arrays
    # the reusable workspace is bounded by the batch size, whatever the model's size
    from qnn_ci.diagnose.layers import BATCH_ELEMENTS

    total = sum(buf.size for buf in acc._workspace._bufs)
    assert 0 < total <= 3 * BATCH_ELEMENTS


def test_bounds_for_takes_the_strictest_and_snr_only_when_every_output_has_it() -> None:
    t = Thresholds(default={"cosine": 0.99},
                   per_output={"a": {"cosine": 0.999, "snr": 30.0}, "b": {"snr": 20.0}})
    assert bounds_for(t, ["a", "b"]) == {"cosine": 0.999, "snr": 30.0}
    assert bounds_for(t, ["a", "b", "c"]) == {"cosine": 0.999}
    assert bounds_for(t, ["b"]) == {"cosine": 0.99, "snr": 20.0}
    # an output's absolute bounds never reach an interior tensor (other units)
    assert bounds_for(Thresholds(default={"max_abs": 0.1}), ["y"]) == {"cosine": 0.99}
    assert bounds_for(Thresholds(default={"cosine": 0.99, "max_abs": 0.05,
                                          "mean_abs": 0.01}), ["y"]) == {"cosine": 0.99}


def test_first_divergence_is_scale_free_where_the_damage_enters() -> None:
    """The PP-OCR classifier case: an early conv's tensor carries values ~100x the
    output's (max_abs 1.46 against the output's 0.05 bound, cosine 0.9953: fine),
    and the damage enters later, where one channel's cosine falls to -0.53."""
    from qnn_ci.diagnose.layers import TensorInfo

    order = [TensorInfo("conv1", "Conv.1", "Conv", ("x",)),
             TensorInfo("conv8", "Conv.8", "Conv", ("conv1",))]
    big = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32) * 60.0
    noisy = big + RNG.standard_normal(big.shape).astype(np.float32) * 6.0
    late = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    broken = late.copy()
    broken[0, 2] = -0.53 * late[0, 2] + 0.85 * RNG.standard_normal((8, 8)).astype(np.float32)
    bounds = bounds_for(Thresholds(default={"cosine": 0.99, "max_abs": 0.05}), ["logits"])
    layers, first, _ = layer_report(order, {"conv1": [big], "conv8": [late]},
                                    {"conv1": [noisy], "conv8": [broken]}, bounds)
    assert layers[0].max_abs is not None and layers[0].max_abs > 1.0
    assert layers[0].cosine is not None and layers[0].cosine > 0.99
    assert not layers[0].crosses
    assert first is not None and first.tensor == "conv8"
    assert first.metric == "worst_channel_cosine" and first.worst_channel == 2
    assert first.value is not None and first.value < 0


def test_batched_metrics_equal_the_single_tensor_ones() -> None:
    from qnn_ci.diagnose.layers import batch_stats

    pairs = []
    for shape in [(1, 16, 8, 8), (1, 4, 100), (1, 10), (2, 3, 4, 5), (1, 1, 8, 8), (7,),
                  (1, 8, 1, 1), (0, 4, 4)]:
        r = RNG.standard_normal(shape).astype(np.float32)
        t = (r + 0.05 * RNG.standard_normal(shape)).astype(np.float32)
        if r.ndim == 4 and r.shape[1] == 16:
            r[:, 0] *= 1000.0
            t = collapsed(r, 3)
        pairs.append((r, t))
    same = RNG.standard_normal((1, 4, 4, 4)).astype(np.float32)
    pairs.append((same, same.copy()))                          # identical: exact
    zero = np.zeros((1, 4, 4, 4), np.float32)
    pairs.append((zero, zero + 1e-3))                          # reference all zero
    nan = RNG.standard_normal((1, 4, 4, 4)).astype(np.float32)
    nan_t = nan.copy()
    nan_t[0, 1, 0, 0] = np.nan
    pairs.append((nan, nan_t))                                 # NaN: the slow path
    pairs.append((RNG.standard_normal((1, 3, 5, 5)), RNG.standard_normal((1, 3, 5, 5))))  # f64
    batched = batch_stats(pairs)
    for (r, t), b in zip(pairs, batched, strict=True):
        s = tensor_stats(r, t)
        for k in ("cosine", "snr_db", "max_abs", "worst_channel_cosine"):
            x, y = getattr(s, k), getattr(b, k)
            if x is None or y is None:
                assert x is None and y is None, (r.shape, k)
            elif math.isnan(x) or math.isinf(x):
                assert (math.isnan(x) and math.isnan(y)) or x == y, (r.shape, k)
            else:
                assert y == pytest.approx(x, rel=1e-5, abs=1e-6), (r.shape, k)
        assert (b.channel_axis, b.worst_channel) == (s.channel_axis, s.worst_channel)
    identical = batched[-4]
    assert identical.cosine == 1.0 and identical.snr_db == math.inf and identical.max_abs == 0.0
    assert batched[0].worst_channel == 3 and batched[0].worst_channel_cosine == 0.0


def test_artefacts_are_written_and_the_png_is_skipped_without_matplotlib(
        tmp_path, monkeypatch) -> None:
    import csv
    import json
    import sys

    from qnn_ci.diagnose.artefacts import write_artefacts
    from qnn_ci.diagnose.model import Diagnosis

    order, ref, test = chain()
    layers, first, jumps = layer_report(order, ref, test, {"cosine": 0.99})
    d = Diagnosis("quantization", "numbers", "qdq-cpu", first, layers, jumps)
    write_artefacts(d, tmp_path / "with", 0.99)
    assert (tmp_path / "with" / "layers.png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader((tmp_path / "with" / "layers.csv").open(encoding="utf-8")))
    assert [r["tensor"] for r in rows] == ["t1", "t2", "t3", "t4"]
    assert rows[2]["worst_channel"] == "2" and rows[2]["crosses"] == "True"
    assert rows[1]["cosine"] == ""                      # never measured: empty, not 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # as if not installed
    d2 = Diagnosis("quantization", "numbers", "qdq-cpu", first, layers, jumps)
    write_artefacts(d2, tmp_path / "without", 0.99)
    assert set(d2.artefacts) == {"csv", "json"}
    assert not (tmp_path / "without" / "layers.png").exists()
    assert any("matplotlib is not installed" in n for n in d2.notes)
    saved = json.loads((tmp_path / "without" / "diagnosis.json").read_text("utf-8"))
    assert saved["notes"] == d2.notes and saved["artefacts"] == d2.artefacts


@pytest.mark.parametrize("noise", [1e-2, 1e-4, 1e-6])
def test_float32_sums_keep_cosine_and_snr_precise(noise: float) -> None:
    from qnn_ci.diagnose.layers import batch_stats

    r = RNG.standard_normal((1, 8, 256, 256)).astype(np.float32) + 3.0
    t = (r + noise * RNG.standard_normal(r.shape)).astype(np.float32)
    r64, t64 = r.astype(np.float64).ravel(), t.astype(np.float64).ravel()
    cos = float(r64 @ t64 / np.linalg.norm(r64) / np.linalg.norm(t64))
    e = t64 - r64
    snr = 10 * math.log10(float(r64 @ r64) / float(e @ e))
    for s in (tensor_stats(r, t), batch_stats([(r, t)])[0]):
        assert s.cosine == pytest.approx(cos, abs=1e-9)
        assert s.snr_db == pytest.approx(snr, abs=0.01)


def test_the_text_of_a_diagnosis_that_found_no_loss_has_no_first_divergence() -> None:
    """Outputs within their bounds: no "first divergence" under "no loss found"; the
    tensor nearest its bound is named as such, or, when an interior tensor is past the
    bound although the outputs are not, as the smallest margin. A loss keeps its line."""
    from qnn_ci.diagnose.model import NONE, QUANTIZATION, Diagnosis
    from qnn_ci.diagnose.text import text_lines

    order = [TensorInfo("a", "conv_a", "Conv", ["x"]), TensorInfo("b", "conv_b", "Conv", ["a"]),
             TensorInfo("y", "relu", "Relu", ["b"])]
    ref = RNG.normal(size=(1, 8, 4, 4)).astype(np.float32)
    mild = ref + 0.02 * RNG.normal(size=ref.shape).astype(np.float32)
    bounds = bounds_for(Thresholds(), ["y"])
    layers, first, jumps = layer_report(order, {"a": [ref], "b": [ref], "y": [ref]},
                                        {"a": [ref], "b": [mild], "y": [ref]}, bounds)
    assert first is None
    passed = Diagnosis(NONE, "nothing failed its bound", "qdq-cpu", first, layers, jumps,
                       bounds=bounds)
    lines = text_lines(passed)
    assert lines[0] == "diagnosis: no loss found (nothing failed its bound)"
    assert not [line for line in lines if "divergence" in line], lines
    b = layers[1]
    low = min(b.cosine or 1.0, b.worst_channel_cosine or 1.0)
    assert "  closest to its bound: 'b' (Conv 'conv_b', tensor 1): " in "\n".join(lines)
    assert "vs bound 0.99" in "\n".join(lines) and low < 1.0

    interior = collapsed(ref, 3)      # one channel of an interior tensor lost, outputs fine
    layers, first, jumps = layer_report(order, {"a": [ref], "b": [ref], "y": [ref]},
                                        {"a": [ref], "b": [interior], "y": [ref]}, bounds)
    assert first is not None and first.tensor == "b"
    inside = Diagnosis(NONE, "nothing failed its bound", "qdq-cpu", first, layers, jumps,
                       bounds=bounds)
    lines = text_lines(inside)
    assert not [line for line in lines if "divergence" in line], lines
    assert [line for line in lines if line.startswith("  smallest margin: 'b' (Conv 'conv_b'")
            and line.endswith("past it inside the graph while the outputs stay within theirs")]
    assert "divergence" not in inside.headline()

    lost = Diagnosis(QUANTIZATION, "QDQ on CPU worst cosine 0.5", "qdq-cpu", first, layers,
                     jumps, bounds=bounds)
    assert "  first divergence: 'b' (Conv 'conv_b', tensor 1): " in "\n".join(text_lines(lost))
    assert "first divergence at 'b'" in lost.headline()
