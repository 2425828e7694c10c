"""Fuzz the recipe advisor's overrides merge (``qnn_ci.diagnose.recipe_encodings.
write_overrides`` into an export's own ``.encodings``) and the simulator path's
mapping of the result (``qnn_ci.sim.overrides.overrides_from_encodings``), with
mutations of REAL AIMET exports of the PP-OCR classifier (read in place; skipped
when absent). The merge may only write a file or raise one ``UserError`` line;
what it writes must read back with the recipe's entries in it; the mapping must
give an ``OverrideSet`` whatever the entries hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.diagnose.recipe_encodings import write_overrides
from qnn_ci.errors import UserError
from qnn_ci.sdk.encodings import read_encodings
from qnn_ci.sim.overrides import overrides_from_encodings
from tests.conftest import REAL_OUTPUTS, package_file
from tests.fuzz.mutations import JSON_TOKENS, Files, apply_edits, byte_edits, json_edits

FILES = ["aimet/ppocr_cls-aimet2.42-v0.6.1.encodings",
         "aimet/ppocr_cls-aimet2.42-v1.0.0.encodings",
         "aimet/ppocr_cls-aimet2.42-v2.0.0.encodings"]
KEEP = 12                   # entries kept per section: the real layout, a cheap file
CHANNELS = 4                # per-channel encodings kept per 0.6.1 entry


def _trim(doc: Any) -> Any:
    out = dict(doc)
    for key, value in doc.items():
        if isinstance(value, list):
            out[key] = value[:KEEP]
        elif isinstance(value, dict) and key.endswith("encodings"):
            out[key] = {k: v[:CHANNELS] if isinstance(v, list) else v
                        for k, v in list(value.items())[:KEEP]}
    return out


@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    found = Files((n, _trim(json.loads((REAL_OUTPUTS / n).read_bytes()))) for n in FILES
                  if (REAL_OUTPUTS / n).is_file())
    if not found:
        pytest.skip(f"real AIMET exports not available in {REAL_OUTPUTS}")
    return found


@pytest.fixture(scope="module")
def cls_proto() -> onnx.ModelProto:
    path = package_file("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
    if path is None:
        pytest.skip("the PP-OCR classifier is not installed")
    return onnx.load(str(path), load_external_data=False)


@pytest.fixture(scope="module")
def recipe(cls_proto: onnx.ModelProto) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 16-bit weight entry and a float activation for the classifier's first conv."""
    conv = next(n for n in cls_proto.graph.node if n.op_type == "Conv")
    params = {conv.input[1]: [{"bitwidth": 16, "dtype": "int", "is_symmetric": "True",
                               "min": -1.0, "max": 1.0 - 1 / 32768, "offset": -32768,
                               "scale": 1 / 32768}]}
    acts = {conv.output[0]: [{"bitwidth": 16, "dtype": "float"}]}
    return acts, params


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_recipe")


def merge_and_apply(base: Path, out: Path, model: onnx.ModelProto,
                    recipe: tuple[dict[str, Any], dict[str, Any]]) -> None:
    acts, params = recipe
    try:
        note = write_overrides(out, acts, params, base=base)
    except UserError as exc:
        line = exc.oneline()
        assert line and "\n" not in line
        return
    assert isinstance(note, str) and "merged" in note
    enc = read_encodings(out)            # what it writes reads back
    (weight,) = params
    (act,) = acts
    assert enc.by_name()[weight][0].bitwidth == 16
    assert enc.by_name()[act][0].dtype == "float"
    o = overrides_from_encodings(enc, model)
    assert weight in o.applied and act in o.float_tensors


@given(name=st.sampled_from(FILES), data=st.data())
def test_merge_into_mutated_real_exports(docs: dict[str, Any], cls_proto: onnx.ModelProto,
                                         recipe: Any, work: Path, name: str,
                                         data: st.DataObject) -> None:
    doc = docs.get(name) or next(iter(docs.values()))
    base = work / "tree.encodings"
    base.write_text(json.dumps(data.draw(json_edits(doc))), "utf-8")
    merge_and_apply(base, work / "out.encodings", cls_proto, recipe)


@given(name=st.sampled_from(FILES), edits=byte_edits(JSON_TOKENS))
def test_merge_into_byte_edited_real_exports(docs: dict[str, Any], cls_proto: onnx.ModelProto,
                                             recipe: Any, work: Path, name: str,
                                             edits: list[tuple[Any, ...]]) -> None:
    doc = docs.get(name) or next(iter(docs.values()))
    base = work / "bytes.encodings"
    base.write_bytes(apply_edits(json.dumps(doc, indent=1).encode(), edits))
    merge_and_apply(base, work / "out.encodings", cls_proto, recipe)


@given(names=st.lists(st.one_of(st.text(max_size=30), st.from_regex(r"[A-Za-z]{1,12}#[0-9]{1,4}"),
                                st.sampled_from(["Conv#0", "Relu#1", "x", ""])), max_size=6))
def test_focus_names_resolve_or_are_listed_unknown(cls_proto: onnx.ModelProto,
                                                   names: list[str]) -> None:
    from qnn_ci.diagnose.recipe_encodings import int16_weight_encodings, resolve_focus

    plan = resolve_focus(cls_proto, names)
    assert len(plan.nodes) + len(plan.unknown) <= len(names)
    assert set(plan.unknown) <= set(names)
    for encs in int16_weight_encodings(plan, per_channel=True).values():
        assert all(e["bitwidth"] == 16 and e["scale"] > 0 for e in encs)
