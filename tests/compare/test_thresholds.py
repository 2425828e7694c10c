"""Threshold syntax, merging with the spec defaults, and what evaluate() says."""

from __future__ import annotations

import re

import numpy as np
import pytest

from qnn_ci.compare.metrics import compute_metrics
from qnn_ci.compare.thresholds import (
    apply_thresholds,
    evaluate,
    parse_threshold,
    resolve_bounds,
)
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError


@pytest.mark.parametrize(("token", "output", "metric", "value"), [
    ("cosine=0.999", None, "cosine", 0.999),
    ("logits:max_abs=0.05", "logits", "max_abs", 0.05),
    ("/conv1/Conv_output_0:snr=30", "/conv1/Conv_output_0", "snr", 30.0),
    ("output:0:psnr=40", "output:0", "psnr", 40.0),      # name with ':' (tf2onnx style)
    (" MEAN_ABS = 1e-3", None, "mean_abs", 1e-3),
])
def test_parse_threshold(token, output, metric, value):
    s = parse_threshold(token)
    assert (s.output, s.metric, s.value) == (output, metric, value)


@pytest.mark.parametrize(("token", "says"), [
    ("cosine", "no '=VALUE'"),
    ("cosine=", "no '=VALUE'"),
    ("cosin=0.9", "did you mean cosine"),
    ("logits:=0.9", "no metric name"),
    (":cosine=0.9", "empty output name"),
    ("cosine=high", "'high' is not a number"),
    ("cosine=1.5", "between -1 and 1"),
    ("max_abs=-1", ">= 0"),
    ("snr=nan", "finite"),
])
def test_bad_threshold_names_the_token(token, says):
    with pytest.raises(UserError) as info:
        parse_threshold(token)
    text = info.value.oneline()
    assert repr(token) in text and says in text
    assert "\n" not in text and text.startswith("--threshold:")


def test_apply_thresholds_merges_with_spec_defaults():
    base = Thresholds(per_output={"boxes": {"max_abs": 0.5}})
    t = apply_thresholds(["snr=20", "boxes:max_abs=0.1", "logits:cosine=0.999"], base)
    assert t.default == {"cosine": 0.99, "snr": 20.0}
    assert t.for_output("boxes") == {"cosine": 0.99, "snr": 20.0, "max_abs": 0.1}
    assert t.for_output("logits") == {"cosine": 0.999, "snr": 20.0}
    assert base.per_output["boxes"] == {"max_abs": 0.5}      # base left untouched


def test_resolve_bounds_accepts_graph_names_for_sanitised_files():
    t = apply_thresholds(["/head/Softmax_output_0:cosine=0.9", "23:max_abs=1"])
    bounds = resolve_bounds(t, ["_head_Softmax_output_0", "_23", "other"])
    assert bounds["_head_Softmax_output_0"] == {"cosine": 0.9}
    assert bounds["_23"] == {"cosine": 0.99, "max_abs": 1.0}
    assert bounds["other"] == {"cosine": 0.99}


def test_resolve_bounds_rejects_a_threshold_for_no_output():
    t = apply_thresholds(["logitz:cosine=0.9"])
    with pytest.raises(UserError, match=r"'logitz'.*outputs: logits, boxes"):
        resolve_bounds(t, ["logits", "boxes"])


def test_resolve_bounds_rejects_unknown_metric_from_a_manifest():
    with pytest.raises(UserError, match="unknown metric 'l2'"):
        resolve_bounds(Thresholds(default={"l2": 1.0}), ["x"])


def _samples(rng, noise: list[float]):
    ref = rng.standard_normal(4096)
    return [compute_metrics(ref, ref + s * rng.standard_normal(4096)) for s in noise]


def test_failure_names_output_sample_value_bound_and_loosest_passing(rng):
    ms = _samples(rng, [0.001, 0.3, 0.1])
    bounds = {"cosine": 0.999}
    f1 = evaluate("logits", 1, ms[1], bounds, across=ms)
    assert [f.check for f in f1] == ["compare.threshold"]
    text = f1[0].message
    assert text.startswith(f"logits sample 1: cosine {ms[1].cosine:.6f} is below the "
                           "minimum 0.999000")
    loosest = float(re.search(r"loosest passing bound: cosine=([0-9.]+)", text).group(1))
    worst = min(m.cosine for m in ms)
    assert loosest == pytest.approx(worst, abs=1e-7)
    assert all(m.cosine >= loosest for m in ms)          # it really passes every sample
    assert "worst of 3 samples" in text
    assert "|err| p50" in text and "%" in text           # the error distribution
    assert f1[0].subject == "logits" and f1[0].severity == Severity.ERROR
    # sample 0 meets the bound: no finding
    assert evaluate("logits", 0, ms[0], bounds, across=ms) == []


def test_loosest_passing_for_a_maximum_is_the_observed_max(rng):
    ms = _samples(rng, [0.01, 0.02])
    f = evaluate("y", 0, ms[0], {"max_abs": 1e-3}, across=ms)
    assert len(f) == 1 and "above the maximum" in f[0].message
    bound = float(re.search(r"max_abs=([0-9.e+-]+) ", f[0].message).group(1))
    assert bound >= max(m.max_abs for m in ms)
    assert bound == pytest.approx(max(m.max_abs for m in ms), rel=1e-6)


def test_snr_and_psnr_minimums(rng):
    ms = _samples(rng, [0.1])            # SNR ~ 20 dB
    f = evaluate("y", 0, ms[0], {"snr": 30.0, "psnr": 10.0})
    assert [x.message.split(": ")[1].split(" ")[0] for x in f] == ["snr"]
    assert "dB" in f[0].message


def test_near_zero_reference_fails_plainly_without_an_absolute_bound():
    m = compute_metrics(np.zeros(100), np.full(100, 1e-2))
    f = evaluate("mask", 2, m, {"cosine": 0.99})
    assert [(x.check, x.severity) for x in f] == [("compare.reference_near_zero",
                                                   Severity.ERROR)]
    assert "mask sample 2: the reference is zero everywhere" in f[0].message
    assert "cosine would only measure noise" in f[0].message
    assert "--threshold mask:max_abs=" in f[0].message


def test_near_zero_reference_is_judged_by_an_absolute_bound_when_given():
    m = compute_metrics(np.zeros(100), np.full(100, 1e-2))
    ok = evaluate("mask", 0, m, {"cosine": 0.99, "max_abs": 0.1})
    assert [(x.check, x.severity) for x in ok] == [("compare.reference_near_zero",
                                                    Severity.WARNING)]
    assert "judged by max_abs only" in ok[0].message
    bad = evaluate("mask", 0, m, {"cosine": 0.99, "max_abs": 1e-3})
    assert {(x.check, x.severity) for x in bad} == {
        ("compare.reference_near_zero", Severity.WARNING), ("compare.threshold", Severity.ERROR)}


def test_near_zero_against_the_quantization_step_says_why(rng):
    """The PP-OCR detector case: a map peaking at 6.8e-6 on a 1/65536 output grid is
    no "FAIL cosine", it is a near-zero reference, said plainly."""
    ref = np.zeros(1000, np.float32)
    ref[::7] = np.float32(6.8e-6) * rng.random(len(ref[::7]), np.float32)
    ref[0] = np.float32(6.8e-6)
    test = (ref + 1.3e-6 * rng.standard_normal(1000)).astype(np.float32)
    assert evaluate("maps", 0, compute_metrics(ref, test), {"cosine": 0.99})[0].check == \
        "compare.threshold"                     # blind to the grid: fails on noise
    m = compute_metrics(ref, test, resolution=1 / 65536)
    [f] = evaluate("maps", 0, m, {"cosine": 0.99})
    assert (f.check, f.severity) == ("compare.reference_near_zero", Severity.ERROR)
    assert f.message.startswith("maps sample 0: the reference is near zero everywhere (max "
                                "|ref| 6.8e-06 is within 4 quantization steps of zero (step "
                                "1.526e-05)), so cosine would only measure noise")
    ok = evaluate("maps", 0, m, {"cosine": 0.99, "max_abs": 1e-5})
    assert [(x.check, x.severity) for x in ok] == [("compare.reference_near_zero",
                                                    Severity.WARNING)]


def test_nan_in_test_is_an_error_and_shared_nan_a_warning(rng):
    ref = rng.standard_normal(100)
    test = ref.copy()
    test[5] = np.nan
    f = evaluate("y", 0, compute_metrics(ref, test), {"cosine": 0.99})
    assert [(x.check, x.severity) for x in f] == [("compare.nan_inf", Severity.ERROR)]
    assert "1 of 100 positions disagree" in f[0].message and "test 1 NaN" in f[0].message
    ref[5] = np.nan
    f = evaluate("y", 0, compute_metrics(ref, test), {"cosine": 0.99})
    assert [(x.check, x.severity) for x in f] == [("compare.nan_inf", Severity.WARNING)]


def test_all_nan_never_passes_silently():
    ref = np.full(8, np.nan)
    f = evaluate("y", 0, compute_metrics(ref, ref.copy()), {"cosine": 0.99})
    assert [(x.check, x.severity) for x in f] == [("compare.nan_inf", Severity.ERROR)]
    assert "nothing could be compared" in f[0].message


@pytest.mark.parametrize("metric", ["cosine", "snr", "psnr", "max_abs", "mean_abs"])
def test_a_value_exactly_at_its_bound_passes_and_a_hair_past_it_fails(rng, metric):
    """Bounds are inclusive: `cosine: 0.99` accepts 0.99 exactly; one ulp stricter fails."""
    ms = _samples(rng, [0.05])[0]
    value = ms.value(metric)
    assert value is not None and np.isfinite(value)
    assert evaluate("y", 0, ms, {metric: value}) == []
    stricter = np.nextafter(value, np.inf if metric in ("cosine", "snr", "psnr") else -np.inf)
    f = evaluate("y", 0, ms, {metric: float(stricter)})
    assert [x.check for x in f] == ["compare.threshold"], f
