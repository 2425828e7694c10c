"""Fuzz the per-layer metrics (qnn_ci.diagnose.layers) and the artefacts written from
them: whatever tensors a run produces (NaN, Inf, huge, zero, denormal, odd shapes,
float16/float64, tensors missing on one side), the report and its CSV/JSON end in a
value, never an exception."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qnn_ci.diagnose.artefacts import write_csv, write_json
from qnn_ci.diagnose.layers import CHANNELS_LAST, TensorInfo, batch_stats, layer_report
from qnn_ci.diagnose.model import Diagnosis

# float32 values drawn into float16 arrays overflow to Inf on purpose (Inf is one of
# the inputs fuzzed): numpy's cast warning says only that.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")

_shapes = hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=5)
_dtypes = st.sampled_from([np.float32, np.float16, np.float64])
_values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@st.composite
def _pair(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    shape = draw(_shapes)
    dtype = draw(_dtypes)
    ref = draw(hnp.arrays(dtype, shape, elements=_values.map(dtype)))
    how = draw(st.sampled_from(["same", "noise", "other", "reshape"]))
    if how == "same":
        return ref, ref.copy()
    if how == "noise":
        with np.errstate(all="ignore"):
            return ref, (ref + draw(st.floats(-1e3, 1e3, width=32))).astype(dtype)
    if how == "reshape" and ref.size:
        return ref, ref.reshape(-1)
    return ref, draw(hnp.arrays(draw(_dtypes), shape, elements=_values))


@given(pairs=st.lists(_pair(), min_size=1, max_size=6), bound=st.floats(-1.0, 1.0),
       snr=st.one_of(st.none(), st.floats(-100, 300)), layout=st.sampled_from(
           [None, CHANNELS_LAST]), drop=st.sets(st.integers(0, 5)))
def test_layer_report_always_ends_in_a_report(pairs, bound, snr, layout, drop) -> None:
    order = [TensorInfo(f"t{i}", f"n{i}", "Conv", (f"t{i - 1}",) if i else ("x",))
             for i in range(len(pairs))]
    reference = {f"t{i}": [r] for i, (r, _) in enumerate(pairs)}
    test = {f"t{i}": [t] for i, (_, t) in enumerate(pairs) if i not in drop}
    bounds = {"cosine": bound} | ({"snr": snr} if snr is not None else {})
    layers, first, jumps = layer_report(order, reference, test, bounds, layout=layout)
    assert [m.tensor for m in layers] == [i.tensor for i in order]
    assert first is None or first.tensor in test
    assert len(jumps) <= 5
    for m in layers:
        for v in (m.cosine, m.worst_channel_cosine):
            assert v is None or math.isnan(v) or -1.0 <= v <= 1.0
    with tempfile.TemporaryDirectory() as tmp:
        d = Diagnosis("quantization", "fuzz", "qdq-cpu", first, layers, jumps)
        write_csv(layers, Path(tmp) / "layers.csv")
        json.loads(write_json(d, Path(tmp) / "diagnosis.json").read_text("utf-8"))


@given(pairs=st.lists(_pair(), min_size=1, max_size=6))
def test_batched_and_single_tensor_metrics_agree_on_what_is_defined(pairs) -> None:
    from qnn_ci.diagnose.layers import tensor_stats

    for (r, t), b in zip(pairs, batch_stats(pairs), strict=True):
        s = tensor_stats(r, t)
        assert (s.cosine is None) == (b.cosine is None)
        assert s.channel_axis == b.channel_axis
