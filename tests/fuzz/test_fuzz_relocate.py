"""Relocation done the fast way equals the plain way, for any values and any root
folders (quotes, backslashes, control characters, non-ASCII): detokenizing a stored
result's JSON text before parsing it (``detokenize_json``, what the result store
does) and walking the parsed values; tokenizing a cache key's values as they are
made plain (``jsonable(value, roots)``) and after."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.engine.cache import jsonable, plain_digest
from qnn_ci.engine.relocate import PROJECT, WORKDIR, Roots, detokenize, detokenize_json, tokenize
from qnn_ci.engine.results import Status

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
WITH_TOKENS = st.builds(lambda a, t, b: a + t + b, TEXT,
                        st.sampled_from([WORKDIR, PROJECT, "", "${", WORKDIR + PROJECT]), TEXT)
KEYS = st.text(st.characters(codec="utf-8"), max_size=6).filter(lambda k: "${" not in k)
VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | WITH_TOKENS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12)
FOLDERS = st.builds(lambda s: "/" + s, TEXT)


@given(VALUES, FOLDERS, st.none() | FOLDERS, st.booleans())
def test_text_and_values_agree(value: Any, workdir: str, project: str | None,
                               ascii_only: bool) -> None:
    roots = Roots(workdir, project)
    text = json.dumps({"result": value}, indent=1, ensure_ascii=ascii_only)
    assert json.loads(detokenize_json(text, roots))["result"] == detokenize(value, roots)


class _Text(str):
    """A str subclass (as a StrEnum is): tokenized as a string."""


@dataclasses.dataclass
class _Record:
    name: Any
    where: Any = None


def _values(tmp: Path) -> st.SearchStrategy[Any]:
    file = tmp / "model.onnx"
    leaves = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
              | WITH_TOKENS | FOLDERS | st.sampled_from(list(Status))
              | st.sampled_from([file, tmp, tmp / "missing", Path("rel/x")])
              | st.sampled_from([_Text(tmp / "x"), _Text("plain")]))
    return st.recursive(leaves, lambda inner: (
        st.lists(inner, max_size=3) | st.tuples(inner, inner)
        | st.dictionaries(KEYS | st.integers(), inner, max_size=3)
        | st.frozensets(TEXT | FOLDERS | st.integers(), max_size=3)
        | st.builds(_Record, inner, inner)), max_leaves=12)


@given(st.data(), FOLDERS, st.none() | FOLDERS)
def test_one_walk_tokenizes_as_two(data: st.DataObject, workdir: str,
                                   project: str | None) -> None:
    """A cache key's plain values, tokenized as they are made (``jsonable(v, roots)``),
    are ``tokenize(jsonable(v), roots)``: the same key."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "model.onnx").write_bytes(b"onnx")
        value = data.draw(_values(Path(tmp)))
        for roots in (Roots(workdir, project), Roots(tmp, None), Roots(workdir, tmp)):
            assert jsonable(value, roots) == tokenize(jsonable(value), roots)
            assert plain_digest(jsonable(value, roots)) == \
                plain_digest(tokenize(jsonable(value), roots))
