"""Fuzz the state-input pairing and the warning grouping: any tensor names (a model's
names are any text), dtypes and shapes, any warning texts, end in a value — and what
they say holds: a pair's output exists with the input's dtype; the grouped counts add
up to the warnings given."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.calibration.state_inputs import state_inputs
from qnn_ci.engine.results import Severity
from qnn_ci.engine.warning_lines import (
    group_warnings,
    warning_lines,
    warning_properties,
    warnings_report,
)

_names = st.one_of(st.text(max_size=12),
                   st.sampled_from(["h", "hn", "c", "cn", "h0", "state", "stateN", "in_cache0",
                                    "out_cache0", "past_key_values.0.key", "present.0.key",
                                    "x_in", "x_out", "in_", "out_", "_in", "n", "0", ""]))
_dtypes = st.sampled_from(["float32", "float16", "int64"])
_shapes = st.one_of(st.none(), st.lists(st.integers(min_value=0, max_value=4), max_size=3),
                    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=2)),
                             max_size=3))
_tensors = st.lists(st.fixed_dictionaries({"name": _names, "dtype": _dtypes, "shape": _shapes}),
                    max_size=6)


@given(inputs=_tensors, outputs=_tensors, declared=st.lists(_names, max_size=3))
def test_state_inputs_pairs_only_what_fits(inputs: list[dict], outputs: list[dict],
                                           declared: list[str]) -> None:
    state, findings = state_inputs(inputs, outputs, declared)
    names = {i["name"] for i in inputs}
    assert state <= names
    assert set(declared) & names <= state
    assert all(f.severity == Severity.INFO for f in findings)
    assert bool(findings) == bool(state)
    dtypes = {}
    for i in inputs:
        dtypes.setdefault(i["name"], set()).add(i["dtype"])
    for n in state - set(declared):
        assert any(o["dtype"] in dtypes[n] for o in outputs)


_texts = st.lists(st.one_of(
    st.text(max_size=40),
    st.builds(lambda n, w: f"[inputs.all_zero] sample {n}: {w} is all zeros",
              st.integers(min_value=0, max_value=10**6), st.sampled_from(["x", "x1", "in_0"]))),
    max_size=40)


@given(texts=_texts, limit=st.integers(min_value=0, max_value=8))
def test_warning_grouping_adds_up(texts: list[str], limit: int) -> None:
    groups = group_warnings(texts)
    assert sum(g.count for g in groups) == len(texts)
    assert [g.count for g in groups] == sorted((g.count for g in groups), reverse=True)
    lines = warning_lines(texts, limit)
    assert len(lines) <= limit + 1
    props = warning_properties(texts, limit)
    assert props.get("warnings.count", 0) == len(texts)
    assert len(props) == (0 if not texts else 1 + min(limit, len(groups)))
    report = warnings_report([("a::calibration", texts)], limit)
    assert bool(report) == bool(texts)
