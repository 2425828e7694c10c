"""Fuzz the changed-only selection's reading of a manifest at a git revision (any
text there, hostile or not): a result, never an exception."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.runner.changed import _entries, _entry_reasons

_yamlish = st.lists(st.sampled_from([
    "exports:", "  - name: a", "    model: m.onnx", "defaults:", "  quantization: {x: 1}",
    "boards: [1, 2]", "exports: 3", "- *a", "&a [1]", "{", "]", "\t", "name: ~", ":::"]),
    max_size=12).map("\n".join)


@given(st.one_of(st.text(max_size=400), _yamlish))
def test_any_text_at_ref(text: str) -> None:
    got = _entries(text, Path("qnn-ci.yaml"))
    if got is not None:
        defaults, own, _boards = got
        assert isinstance(defaults, dict) and isinstance(own, dict)
        for name, entry in own.items():
            _entry_reasons(name, {}, {}, entry, defaults)
