"""Fuzz the ``qairt-dlc-info`` reader and what reads its result (the DLC contract's
checks, the native output types of ``context_run``) with mutations of the dumps in
tests/dlc/test_dlc_info.py (every layout variant) and arbitrary text: each may only give
a result, findings or one ``UserError`` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.engine.spec import ExportSpec, InputSpec, QuantizationSpec
from qnn_ci.sdk.dlc_info import parse_dlc_info, read_dlc_info
from qnn_ci.stages.context_run_dlc import native_types_from_info
from qnn_ci.stages.dlc_contract import outcome_findings, record_findings
from tests.dlc.test_dlc_info import COLUMN, CSV, SNPE, WRAPPED
from tests.fuzz.mutations import HUGE_INT, apply_edits, byte_edits
from tests.fuzz.test_fuzz_sdk_readers import only_results

SAMPLES = {"snpe": SNPE, "column": COLUMN, "csv": CSV, "wrapped": WRAPPED}
TOKENS = [b"|", b"(data type: ", b"; tensor dimension: [", b"]", b")", b"; tensor type: ",
          b"APP_WRITE", b" [NW Input]", b" encoding : bitwidth 99, min x, max , scale 1e999, "
          b"offset -" + HUGE_INT.encode(), b" encoding for channel_0: bitwidth ",
          b"axis-quant: axis: " + HUGE_INT.encode(), b"Quantizer command: ",
          b"Converter command: --act_bitwidth '", b"x=[[", b"Graph Name: ", b"\"", b",",
          b"Id,Name,Type,Inputs,Outputs\n", b"| Input Name | Dimensions | Type |\n",
          b"\x1b[91m", b"\xff\xfe", b"\x00", b"\r\n", b" " * 3000, b"|" * 500,
          b"(data type: " * 50, HUGE_INT.encode()]


def _export(tmp: Path) -> ExportSpec:
    return ExportSpec(name="m", model=tmp / "m.onnx", manifest=tmp / "qnn-ci.yaml", line=1,
                      inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32"),
                              "ids": InputSpec("ids", (1, 4), "int64", encoding="other")},
                      quantization=QuantizationSpec(per_channel=True, percentile=99.9))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_dlc_info")


def _consumers(text: str, tmp: Path) -> object:
    info = parse_dlc_info(text, source="fuzz")
    json.dumps(info.to_dict())
    export = _export(tmp)
    record_findings(info, export, tmp / "list.txt", tmp)
    outcome_findings(info, export, {"ids": "int64"}, {"ids"})
    native_types_from_info(info, {"y": 4, "logits": None, "x": 12})
    [(t.bits, t.is_float16, t.is_fixed_point) for t in info.tensors.values()]
    info.ops_of("y")
    return info


@given(name=st.sampled_from(sorted(SAMPLES)), edits=byte_edits(TOKENS))
def test_mutated_dumps(work: Path, name: str, edits: list[tuple[Any, ...]]) -> None:
    data = apply_edits(SAMPLES[name].encode(), edits)
    path = work / "info.txt"
    path.write_bytes(data)
    text = data.decode("utf-8", errors="replace")
    only_results(lambda: read_dlc_info(path), lambda: _consumers(text, work))


@given(text=st.text(max_size=2000))
def test_any_text(work: Path, text: str) -> None:
    only_results(lambda: _consumers(text, work))
