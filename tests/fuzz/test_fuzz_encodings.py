"""Fuzz the AIMET ``.encodings`` reader with mutations of REAL AIMET exports
(../shared/reference/real-outputs: resnet18 0.6.1 and PP-OCR cls 0.6.1/1.0.0/2.0.0,
read in place; skipped when absent), as JSON-tree edits and as byte edits, and
the coverage check against the model the PP-OCR files were exported from.
``read_encodings`` may only give a result or one ``UserError`` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.errors import UserError
from qnn_ci.sdk.encodings import Encodings, read_encodings
from qnn_ci.sdk.encodings_coverage import bitwidth_mismatches, coverage, float_entries
from tests.conftest import REAL_OUTPUTS, package_file
from tests.fuzz.mutations import JSON_TOKENS, Files, apply_edits, byte_edits, json_edits

FILES = ["resnet18-aimet0.6.1.encodings", "aimet/ppocr_cls-aimet2.42-v0.6.1.encodings",
         "aimet/ppocr_cls-aimet2.42-v1.0.0.encodings",
         "aimet/ppocr_cls-aimet2.42-v2.0.0.encodings"]
KEEP = 24                   # entries kept per section: the real layout, a cheap file


@pytest.fixture(scope="module")
def raw_files() -> dict[str, bytes]:
    found = Files((n, (REAL_OUTPUTS / n).read_bytes()) for n in FILES
                  if (REAL_OUTPUTS / n).is_file())
    if not found:
        pytest.skip(f"real AIMET exports not available in {REAL_OUTPUTS}")
    return found


def _trim(doc: Any) -> Any:
    """The export with each section cut to its first KEEP entries."""
    out = dict(doc)
    for key, value in doc.items():
        if isinstance(value, list):
            out[key] = value[:KEEP]
        elif isinstance(value, dict) and key.endswith("encodings"):
            out[key] = dict(list(value.items())[:KEEP])
    return out


@pytest.fixture(scope="module")
def docs(raw_files: dict[str, bytes]) -> dict[str, Any]:
    return Files((n, _trim(json.loads(b))) for n, b in raw_files.items())


@pytest.fixture(scope="module")
def small_raw(docs: dict[str, Any]) -> dict[str, bytes]:
    return Files((n, json.dumps(d, indent=1).encode()) for n, d in docs.items())


@pytest.fixture(scope="module")
def cls_proto() -> onnx.ModelProto | None:
    path = package_file("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
    return onnx.load(str(path), load_external_data=False) if path else None


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_enc")


def read_and_use(path: Path, model: onnx.ModelProto | None, *, check: bool = True
                 ) -> Encodings | None:
    """What the CLI and the encodings stage do with a file: read it, summarise it
    and check it against the model."""
    try:
        enc = read_encodings(path)
    except UserError as exc:
        line = exc.oneline()
        assert line and "\n" not in line
        return None
    json.dumps(enc.to_dict())
    float_entries(enc)
    for _, encs in enc.entries():
        for e in encs:
            e.to_dict()
    if model is not None and check:
        cov = coverage(enc, model)
        json.dumps(cov.to_dict())
        bitwidth_mismatches(enc, cov, act_bitwidth=16, weights_bitwidth=8, bias_bitwidth=32)
    return enc


@given(name=st.sampled_from(FILES), data=st.data())
def test_mutated_real_exports(docs: dict[str, Any], cls_proto: onnx.ModelProto | None,
                              work: Path, name: str, data: st.DataObject) -> None:
    doc = docs.get(name) or next(iter(docs.values()))
    path = work / "tree.encodings"
    path.write_text(json.dumps(data.draw(json_edits(doc))), "utf-8")
    # coverage runs onnx shape inference on the model (0.2 s): one example in 8
    read_and_use(path, cls_proto if "ppocr" in name else None,
                 check=data.draw(st.integers(0, 7)) == 0)


@given(name=st.sampled_from(FILES), edits=byte_edits(JSON_TOKENS))
def test_real_exports_byte_edits(small_raw: dict[str, bytes], work: Path, name: str,
                                 edits: list[tuple[Any, ...]]) -> None:
    raw = small_raw.get(name) or next(iter(small_raw.values()))
    path = work / "bytes.encodings"
    path.write_bytes(apply_edits(raw, edits))
    read_and_use(path, None)
