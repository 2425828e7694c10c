"""Fuzz what qnn-ci reads of AI Hub's answers: a profile (``download_profile()``, which
another client or service version may shape otherwise) and a device's attributes.
Reading ends in a profile or a device, never an exception; latencies are finite,
non-negative and p90 >= median; every layer not on the NPU is named."""

from __future__ import annotations

import math
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.hub.device import read_device
from qnn_ci.hub.profile import read_profile

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
_value = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=5)),
    max_leaves=20)
_layer = st.one_of(_value, st.fixed_dictionaries(
    {"name": _value, "type": _value,
     "compute_unit": st.one_of(st.sampled_from(["NPU", "GPU", "CPU", "npu", ""]), _value)}))
_summary = st.one_of(_value, st.fixed_dictionaries({
    "estimated_inference_time": _value, "first_load_time": _value, "warm_load_time": _value,
    "estimated_inference_peak_memory": _value,
    "all_inference_times": st.one_of(_value, st.lists(_value, max_size=8))}))
_profile = st.one_of(_value, st.fixed_dictionaries(
    {"execution_summary": _summary, "execution_detail": st.one_of(_value,
                                                                  st.lists(_layer, max_size=6))}))


@given(_profile)
def test_any_profile_reads_to_a_profile(profile: object) -> None:
    read = read_profile(profile)
    props = read.properties()
    lat = read.latency_ms()
    if lat is not None:
        median, p90, runs = lat
        assert all(math.isfinite(v) and v >= 0 for v in (median, p90))
        assert p90 >= median and runs >= 1
        assert props["latency.median_ms"] == round(median, 4)
    assert props["layers"] == read.layers == sum(read.units.values())
    assert len(read.off_npu) == read.layers - read.units.get("NPU", 0)
    read.describe()


@given(st.lists(st.one_of(st.text(max_size=30), st.sampled_from([
    "soc-model:93", "soc-model:43", "soc-model:x", "chipset:qualcomm-qcs6490-proxy",
    "chipset:sm8550", "chipset:", "hexagon:v68", "hexagon:vv", "hexagon:73"])), max_size=6),
    st.text(max_size=20))
def test_any_device_reads_to_a_device(attributes: list[str], name: str) -> None:
    device = read_device(SimpleNamespace(name=name, os="", attributes=attributes))
    assert device.name == name
    if device.soc is not None and not any(a.startswith("hexagon:") for a in attributes):
        assert device.htp_arch == device.soc.htp_arch
    device.describe()
