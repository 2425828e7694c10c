"""Fuzz the start-up memo (``<workdir>/.memo``): an entry holding any bytes or any
JSON reads as a miss or, for a signature, as a well-formed ``ModelSignature``;
``signature()`` then answers exactly what the full ONNX reader answers, never
another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.model import signature as ms
from qnn_ci.model.onnx_io import model_signature
from qnn_ci.model.signature import signature
from qnn_ci.model.tensors import ModelSignature
from qnn_ci.util.memo import Memo
from tests.core.graphs import scale_model

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.floats(),
                    st.text(max_size=8), st.sampled_from(["x", "y", "float32", "?"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["inputs", "outputs", "external_data", "key", "value",
                                     "x"]), inner, max_size=4)), max_leaves=20)
SIGNATURE_LIKE = st.fixed_dictionaries({
    "inputs": st.lists(st.lists(JSON, min_size=3, max_size=3), max_size=3),
    "outputs": st.lists(JSON, max_size=3), "external_data": st.lists(JSON, max_size=2)})

_DIR = Path(tempfile.mkdtemp(prefix="qnn-ci-fuzz-memo-"))
MODEL = scale_model(_DIR / "m.onnx")
WANT = model_signature(MODEL)


def _entry(memo: Path) -> Path:
    ms._SEEN.clear()
    signature(MODEL, memo)
    [entry] = (memo / "signature").rglob("*.json")
    return entry


ENTRY = _entry(_DIR / "memo")


def _check_from_json(value: Any) -> None:
    sig = ModelSignature.from_json(value)
    if sig is not None:
        assert sig.to_json() == json.loads(json.dumps(value))


@given(JSON)
def test_from_json_takes_only_well_formed_signatures(value: Any) -> None:
    _check_from_json(value)


@given(SIGNATURE_LIKE)
def test_from_json_on_near_signatures(value: Any) -> None:
    _check_from_json(value)


@given(st.one_of(st.binary(max_size=200),
                 JSON.map(lambda v: json.dumps({"key": ENTRY.stem, "value": v}).encode()),
                 SIGNATURE_LIKE.map(lambda v: json.dumps({"key": ENTRY.stem,
                                                          "value": v}).encode())))
def test_any_entry_is_a_miss_or_the_true_signature(data: bytes) -> None:
    ENTRY.write_bytes(data)
    Memo(_DIR / "memo").get("signature", ENTRY.stem)     # never raises
    ms._SEEN.clear()
    got = signature(MODEL, _DIR / "memo")
    # A forged but well-formed entry under the right key is the one thing a memo
    # cannot tell apart; everything else must give the full reader's answer.
    if got != WANT:
        assert ModelSignature.from_json(json.loads(data)["value"]) == got
