"""Detokenizing a stored result's JSON text before parsing it (``detokenize_json``,
what the result store does) gives what detokenizing the parsed values gives, for any
values and any root folders: quotes, backslashes, control characters, non-ASCII."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.relocate import PROJECT, WORKDIR, Roots, detokenize, detokenize_json

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
