"""Fuzz the latency reader: whatever ``qnn-profile-viewer`` prints (another SDK
version, a truncated run, a hostile board's viewer), reading it ends in a latency
or None — and a latency is finite, non-negative, p90 >= median."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from fixtures.qairt_standin.profile_viewer import render_csv, render_summary, render_v28
from qnn_ci.boards import latency as lt
from qnn_ci.boards.latency import Latency, median_p90, parse_viewer_output, timed
from tests.board_run import test_latency as samples

_LOG = {"execute_us": [3000, 3100, 2900, 5000], "init_us": 90000, "graph": "m", "created": 1}


def _standin_summary() -> str:
    return render_summary(_LOG, "x.log")


def _standin_v28() -> str:
    return render_v28(_LOG)


def _standin_csv() -> str:
    return render_csv(_LOG)


_number = st.one_of(st.integers(min_value=-(10**30), max_value=10**30).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["nan", "inf", "1e999", "-0", "0x10", "", "12.", "1e-400"]))
_unit = st.sampled_from(["us", "ms", "ns", "s", "US", "cycles", "count", "", "µs", "usec",
                         "MSEC", "sec", "usb", "inf/sec"])
_line = st.one_of(
    st.builds(lambda n, u: f"    NetRun:  {n} {u}", _number, _unit),
    st.builds(lambda n, u: f"QNN (execute) time : {n}  {u}", _number, _unit),
    st.builds(lambda n, u: f"0,EXECUTE,{n},{u},BACKEND,ROOT,NULL", _number, _unit),
    st.builds(lambda n, u: f'1,BACKEND,{n},{u},BACKEND,SUB-EVENT,"QNN (execute) time",x',
              _number, _unit),
    st.builds(lambda n, u: f"    NetRun IPS (includes IO and misc. time): {n} {u}", _number,
              _unit),
    st.builds(lambda n, u: f"    Backend (QNN (execute) time): {n} {u}", _number, _unit),
    st.builds(lambda g: f"Graph {g} (m):", st.integers(min_value=0, max_value=3)),
    st.sampled_from(["Execute Stats (Average):", "Execute Stats (Min):", "Execute Stats (Max):",
                     "Execute Stats (Overall):", "--- Total Inference Time:", "Finalize Stats:",
                     "Printing All Data Received From Back End", "\ufeff",
                     "Execute Stat 1", "Execute Stats:", "Total Inference Time:",
                     "Graph 0 (model):", "Init Stats:", "-" * 20, "",
                     "Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,"
                     "Event Level,Event Identifier", '"unterminated,', "\x00\r\u2028"]),
    st.text(max_size=60))


def _check(lat: Latency | None) -> None:
    if lat is None:
        return
    assert math.isfinite(lat.median_ms) and math.isfinite(lat.p90_ms)
    assert 0 <= lat.median_ms <= lat.p90_ms
    assert lat.method == "profile" and lat.runs >= 1
    assert lat.source in (lt.PER_INFERENCE_TEXT, lt.PER_INFERENCE_CSV, lt.SUMMARY,
                          lt.OVERALL_IPS)
    props = lat.properties()
    assert props["latency.method"] == "profile" and props["latency.source"] == lat.source
    assert math.isfinite(props["latency.median_ms"]) and math.isfinite(props["latency.p90_ms"])
    lat.describe()


@given(lines=st.lists(_line, max_size=40), runs=st.integers(min_value=1, max_value=10_000))
def test_any_viewer_text_gives_a_latency_or_none(lines: list[str], runs: int) -> None:
    _check(parse_viewer_output("\n".join(lines), runs=runs))


@given(base=st.sampled_from([samples.SUMMARY_TEXT, samples.PER_INFERENCE_TEXT, samples.CSV_TEXT,
                             samples.TWO_GRAPHS_TEXT,
                             _standin_summary(), _standin_v28(), _standin_csv()]),
       cut=st.integers(min_value=0, max_value=4000), junk=st.text(max_size=40),
       at=st.integers(min_value=0, max_value=4000))
def test_cut_and_spliced_real_texts(base: str, cut: int, junk: str, at: int) -> None:
    text = base[:cut] + junk + base[at:]
    _check(parse_viewer_output(text, runs=5))


@given(data=st.binary(max_size=400))
def test_any_bytes_decoded_as_the_stage_does(data: bytes) -> None:
    _check(parse_viewer_output(data.decode("utf-8", "replace"), runs=3))


@given(values=st.lists(st.floats(min_value=0, max_value=1.7e308), min_size=1, max_size=50))
def test_median_never_exceeds_p90(values: list[float]) -> None:
    median, p90 = median_p90(values)
    assert min(values) <= median <= p90 <= max(values)


@given(total=st.floats(allow_nan=True, allow_infinity=True),
       single=st.floats(allow_nan=True, allow_infinity=True),
       runs=st.integers(min_value=-5, max_value=10_000))
def test_timed_is_a_latency_or_none(total: float, single: float, runs: int) -> None:
    lat = timed(total, single, runs)
    if lat is not None:
        assert math.isfinite(lat.median_ms) and lat.median_ms >= 0 and lat.method == "timed"
