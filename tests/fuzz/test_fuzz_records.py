"""Fuzz the store of compiled record methods (``qnn_ci.records``): a file holding any
bytes -- behind the right magic number or not, a marshalled value of any shape --
reads as a mapping of texts to code objects (often empty), never an exception."""

from __future__ import annotations

import marshal
import tempfile
from pathlib import Path
from types import CodeType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.records import _MAGIC, _Codes, _read

MARSHALLABLE: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3), max_leaves=8)


def _check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records.fuzz.codes"
        path.write_bytes(data)
        codes = _read(path)
        assert all(isinstance(t, str) and isinstance(c, CodeType) for t, c in codes.items())
        assert _Codes(path).compiled("x = 1") is not None     # still compiles


@given(st.binary(max_size=200), st.booleans())
def test_any_bytes_read_as_a_mapping(data: bytes, magic: bool) -> None:
    _check((_MAGIC if magic else b"") + data)


@given(MARSHALLABLE)
def test_any_marshalled_value_reads_as_a_mapping(value: Any) -> None:
    _check(_MAGIC + marshal.dumps(value))
