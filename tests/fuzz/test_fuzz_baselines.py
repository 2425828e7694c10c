"""Fuzz the baselines file (`qnn-baselines.yaml`): any bytes, a real file with byte
edits, any tree of YAML values give baselines or one-line `UserError`. What loads
is compared with and written back (the same entries read again); the comparison
takes any numbers a run reports."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.errors import UserError
from qnn_ci.nightly import baselines as bl
from qnn_ci.nightly.regression import check_tolerances, compare
from tests.fuzz.mutations import HUGE_INT, apply_edits, byte_edits

REAL = bl.render({
    ("det", "QCS6490", "simulator"): bl.Entry(
        {"nodes_on_htp": 34, "sim_vs_fp32.logits.cosine": 0.99912,
         "sim_vs_fp32.logits.snr": 31.5, "sim_vs_fp32.logits.max_abs": 0.02},
        "3f2c1ab", "2026-11-28", {"qnn_ci": "0.1.0", "onnxruntime_qnn": "1.22.0"}),
    ("det", "QCS6490", "board:rb3"): bl.Entry(
        {"htp_vs_cpu.logits.cosine": 0.9991, "latency.median_ms": 1.84}, "3f2c1ab",
        "2026-11-28", {"sdk": "2.31.0"}),
    ("det", "any", "sdk"): bl.Entry({"library_bytes": 181240}, "unknown", "", {}),
}).encode()
TOKENS = [b":", b"- ", b"{", b"}", b"[", b"]", b"&a ", b"*a", b"<<: *a", b"!!python/object",
          b".nan", b".inf", b"~", b"'", b'"', b"\t", b"\n  ", b"version: 2", b"\xff",
          b"\x00", HUGE_INT.encode(), b"exports:", b"simulator:", b"board:", b"metrics:",
          b"1e999", b"true", b"2026-11-28", b"? "]

_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.text(max_size=12), st.sampled_from(["simulator", "sdk", "board:b",
                                                           "metrics", "commit", "version"]))
_key = st.one_of(st.sampled_from(["version", "exports", "det", "QCS6490", "simulator",
                                  "sdk", "board:rb3", "board:", "metrics", "commit", "date",
                                  "versions", "nodes_on_htp", "latency.median_ms",
                                  "sim_vs_fp32.y.cosine"]), st.text(max_size=8))
_tree = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_key, inner, max_size=4)), max_leaves=25)
_numbers = st.dictionaries(
    st.sampled_from(["nodes_on_htp", "sim_vs_fp32.logits.cosine", "sim_vs_fp32.logits.snr",
                     "sim_vs_fp32.logits.max_abs", "latency.median_ms", "library_bytes",
                     "htp_vs_cpu.logits.cosine", "other"]),
    st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10**6, 10**6)),
    max_size=8)


def _check(data: bytes, now: dict[str, float] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qnn-baselines.yaml"
        path.write_bytes(data)
        try:
            found = bl.load(path)
        except UserError as exc:
            assert "\n" not in exc.oneline()
            return
        assert found is not None
        bl._MEMO.clear()                        # read again: the same entries
        assert bl.load(path).entries == found.entries
        for entry in found.entries.values():
            compare(now if now is not None else entry.metrics, entry, {})
        again = Path(tmp) / "again.yaml"
        bl.write(again, found.entries)
        back = bl.load(again)
        assert back is not None and back.entries == found.entries


@given(st.binary(max_size=600))
def test_any_bytes(data: bytes) -> None:
    _check(data)


@given(byte_edits(TOKENS), _numbers)
def test_edits_of_a_real_file(edits: list[tuple[Any, ...]], now: dict[str, float]) -> None:
    _check(apply_edits(REAL, edits), now)


@given(_tree, _numbers)
def test_any_tree(tree: Any, now: dict[str, float]) -> None:
    try:
        text = yaml.safe_dump(tree, allow_unicode=True)
    except yaml.YAMLError:
        return
    _check(text.encode("utf-8", errors="surrogatepass"), now)


@given(_numbers, _numbers, st.dictionaries(st.text(max_size=20),
                                           st.floats(0, 1e6, allow_nan=False), max_size=4))
def test_compare_any_numbers(now: dict[str, float], old: dict[str, float],
                             tolerances: dict[str, float]) -> None:
    if check_tolerances(tolerances) is not None:
        return
    out = compare(now, bl.Entry(old, "3f2c1ab", "2026-11-28"), tolerances)
    assert out.compared + len(out.new) <= len(now)
    for line in out.worse + out.improved:
        assert "\n" not in line and " → " in line
