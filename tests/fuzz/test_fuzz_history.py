"""Fuzz the run history: a JUnit report (written by qnn-ci's own writer, then mutated)
and a history file holding any bytes or any JSON end in records or one ``UserError``;
what ``append`` writes always reads back; trends over any finite numbers never raise."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.errors import UserError
from qnn_ci.nightly import history, trends
from qnn_ci.report.junit import JUnitWriter
from qnn_ci.report.junit import testcase as junit_case
from tests.fuzz.mutations import JSON_TOKENS, apply_edits, byte_edits

_DIR = Path(tempfile.mkdtemp(prefix="qnn-ci-fuzz-history-"))


def _report() -> bytes:
    path = _DIR / "seed.xml"
    writer = JUnitWriter(path)
    for stage, props in (
            ("sim_npu", {"soc": "QCS6490", "nodes_on_htp": 6, "nodes_total": 7}),
            ("sim_numerics", {"soc": "QCS6490", "sim_vs_fp32.y.cosine": 0.99912,
                              "sim_vs_fp32.y.snr": 31.5, "sim_vs_fp32.y.cosine.min": 0.99}),
            ("htp_vs_cpu", {"board": "rb3", "latency.median_ms": 4.2, "latency.p90_ms": 5.0,
                            "latency.method": "profile"})):
        writer.add(junit_case(_DIR / "qnn-ci.yaml", "tiny", 2,
                              StageResult(stage, Status.PASSED, "ok", properties=props)))
    writer.write()
    return path.read_bytes()


SEED = _report()
XML_TOKENS = [b"<", b">", b"/>", b"</testcase>", b"<testcase name='a::b'>", b"<properties>",
              b"<property name='qnn.x' value='1e308'/>", b"&amp;", b"&#0;", b"&#x10FFFF;",
              b"<!DOCTYPE x>", b"<![CDATA[", b"]]>", b"<?xml version='1.0' encoding='utf-16'?>",
              b"<?xml version='1.0' encoding='bogus'?>", b"::", b'value="nan"',
              b'timestamp="2026-13-45"', b'timestamp="9999-12-31T23:59:59-23:59"',
              b"\xff\xfe", b"\x00", b"<" * 200, b"<a>" * 300]


def _records_or_user_error(data: bytes) -> list[dict[str, Any]] | None:
    path = _DIR / "r.xml"
    path.write_bytes(data)
    try:
        return history.records_from_junit(path, commit="c", where=_DIR)
    except UserError:
        return None


@given(edits=byte_edits(XML_TOKENS))
def test_any_report_bytes_give_records_or_one_line(edits: list[tuple[Any, ...]]) -> None:
    records = _records_or_user_error(apply_edits(SEED, edits))
    if records:
        db = _DIR / "h.jsonl"
        db.unlink(missing_ok=True)
        assert history.append(db, records) == len(records)
        back = history.read_history(db)
        assert [history.record_line(r) for r in back] == \
            [history.record_line(r) for r in records]
        trends.trends(back)


def test_the_seed_report_gives_its_records() -> None:
    records = _records_or_user_error(SEED)
    assert records is not None
    assert {r["stage"]: r["metrics"] for r in records} == {
        "sim_npu": {"nodes_on_htp": 6, "nodes_total": 7},
        "sim_numerics": {"sim_vs_fp32.y.cosine": 0.99912, "sim_vs_fp32.y.snr": 31.5},
        "htp_vs_cpu": {"latency.median_ms": 4.2, "latency.p90_ms": 5.0}}


GOOD = (b'{"date": "2026-11-01T00:00:00Z", "commit": "c", "export": "e", "stage": "s", '
        b'"soc": null, "board": null, "status": "passed", "metrics": {"m.cosine": 0.5}}\n')
LINE_TOKENS = [*JSON_TOKENS, b"\n", b'"date": "2026-02-30"', b'"metrics": {}', b'"m": true',
               b'"date": "+999999-01-01"', b'"x": 1e308']


def _read(data: bytes) -> list[dict[str, Any]] | None:
    path = _DIR / "db.jsonl"
    path.write_bytes(data)
    try:
        return history.read_history(path)
    except UserError:
        return None


@given(edits=byte_edits(LINE_TOKENS))
def test_any_history_bytes_read_or_one_line(edits: list[tuple[Any, ...]]) -> None:
    records = _read(apply_edits(GOOD * 8, edits))
    if records is not None:
        for t in trends.trends(records, last=3):
            json.dumps(t.to_dict(), allow_nan=False)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3), max_leaves=10)


@given(key=st.sampled_from(["date", "commit", "export", "stage", "soc", "board", "status",
                            "metrics"]), value=JSON_VALUES)
def test_any_json_in_a_record_reads_or_one_line(key: str, value: Any) -> None:
    record = json.loads(GOOD)
    record[key] = value
    _read(json.dumps(record).encode() + b"\n")


FINITE = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**300, 10**300)


@given(values=st.lists(FINITE, max_size=12),
       metric=st.sampled_from(["a.cosine", "b.snr", "c.max_abs", "latency.p90_ms",
                               "nodes_on_htp", "other"]),
       tolerance=st.none() | st.floats(0, 1e300))
def test_drift_over_any_numbers(values: list[float], metric: str,
                                tolerance: float | None) -> None:
    overrides = {trends.metric_kind(metric): tolerance} if tolerance is not None else None
    reason = trends.drift(values, metric, trends.rule_for(metric, overrides))
    assert reason is None or (len(values) >= trends.MIN_WORSE_STEPS + 1
                              and "\n" not in reason and metric in reason)
    if metric == "other":
        assert reason is None


DATES = st.text(max_size=40) | st.datetimes(timezones=st.timezones()).map(
    lambda d: d.isoformat()) | st.sampled_from(["9999-12-31T23:59:59-23:59",
                                                 "0001-01-01T00:00:00+05:00", "2026-02-30"])


@given(stamp=DATES)
def test_any_suite_timestamp_gives_a_date_or_one_line(stamp: str) -> None:
    from qnn_ci.report.junit import quoteattr, xml_text

    data = SEED.replace(b'name="qnn-ci"', b'name="qnn-ci" timestamp='
                        + quoteattr(xml_text(stamp)).encode(), 1)
    records = _records_or_user_error(data)
    if records is not None:
        assert len(records) == 3
        history.parse_date(records[0]["date"])
