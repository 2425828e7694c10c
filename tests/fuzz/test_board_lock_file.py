"""Fuzz the board lock file reader: whatever a board's ``.qnn-ci.lock`` holds (any
process on the board can write it), reading it and every message about it ends in
a value, never an exception."""

from __future__ import annotations

import json
import socket

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.boards.lock import (
    LockInfo,
    _age_note,
    parse_lock_read,
    stale_reason,
    unreadable_stale_reason,
)

_numbers = st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                     st.none(), st.booleans())
_records = st.fixed_dictionaries(
    {"host": st.one_of(st.just(socket.gethostname()), st.text(max_size=12), _numbers),
     "pid": _numbers, "runner": st.one_of(st.text(max_size=12), _numbers),
     "since": _numbers})
_content = st.one_of(
    st.text(max_size=200),
    _records.map(json.dumps),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                 lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                     st.text(max_size=5), kids, max_size=3), max_leaves=8).map(json.dumps))
_head = st.one_of(
    st.tuples(st.integers(min_value=0, max_value=2**40),
              st.integers(min_value=0, max_value=2**40)).map(lambda t: f"{t[0]} {t[1]}"),
    st.text(max_size=30).filter(lambda t: "\n" not in t))


@given(head=_head, content=_content, max_age_s=st.floats(min_value=1e-3, max_value=1e9))
def test_any_lock_file_reads_to_a_value(head: str, content: str, max_age_s: float) -> None:
    seen = parse_lock_read(f"{head}\n{content}")
    assert seen.raw == content.rstrip("\n")
    if seen.holder is None:
        unreadable_stale_reason(seen.raw, seen.age_s, max_age_s=max_age_s)
    else:
        assert isinstance(seen.holder.pid, int)
        seen.holder.describe()
        seen.holder.held_for()
        stale_reason(seen.holder, max_age_s=max_age_s)
        LockInfo.from_line(seen.holder.to_line())
    _age_note(seen.holder, max_age_s, seen.age_s)


@given(text=st.text(max_size=300))
def test_any_line_is_a_record_or_none(text: str) -> None:
    info = LockInfo.from_line(text)
    assert info is None or isinstance(info, LockInfo)
