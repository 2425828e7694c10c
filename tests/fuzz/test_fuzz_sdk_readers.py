"""Fuzz the converter-output readers with mutations of REAL converter outputs
(../shared/reference/real-outputs, read in place; skipped when absent): the
generated-source reader (streamed and whole), the ``_net.json`` reader, the
recorded-argument-list reader, the FP16 audit and the dry-run log parser. Each
may only give a result, findings or one ``UserError`` line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.errors import UserError
from qnn_ci.sdk.cpp_model import parse_cpp_stream, read_cpp_model
from qnn_ci.sdk.dry_run import fill_ops, parse_dry_run
from qnn_ci.sdk.fp16_audit import audit_fp16, gate_fp16
from qnn_ci.sdk.net_json import parse_net_json, read_net_json
from qnn_ci.sdk.record import parse_record_text, read_record
from qnn_ci.tables import get_soc
from tests.conftest import REAL_OUTPUTS
from tests.fuzz.mutations import (
    HUGE_INT,
    JSON_TOKENS,
    Files,
    apply_edits,
    byte_edits,
    json_edits,
)

CPP_FILES = ["naf_block_sota-qairt2.31.cpp", "resnet18_int8-qairt2.18.cpp",
             "vector_search-qairt2.29.cpp", "passthrough-qairt2.27-head.cpp"]
NET_JSON_FILES = ["vector_search-qairt2.29_net.json", "resnet18_int8-qairt2.18_net.json",
                  "mobilenetv2-qairt2.10_net.json"]
CPP_TOKENS = [b"/*", b"*/", b"//", b'"', b"'", b"{", b"}", b"(", b")", b";", b"\n}\n", b"\\",
              b'.name= "t"', b".dataType= QNN_DATATYPE_FLOAT_16,", b".dataType= ",
              b".quantizeParams= {", b".rank= " + HUGE_INT.encode(), b".offset= -" +
              HUGE_INT.encode(), b"uint32_t d[] = {", b"QnnModel_composeGraphs(",
              b"Command Line used:", b"qnn-onnx-converter; act_bw=", b"x=[", b"\xff\xfe",
              b"\x00", b"\r\n", b" " * 3000, b"converter" * 50]
SOCS = [get_soc("QCS6490"), get_soc("SM8550")]


def _real(names: list[str]) -> dict[str, bytes]:
    found = Files((n, (REAL_OUTPUTS / n).read_bytes()) for n in names
                  if (REAL_OUTPUTS / n).is_file())
    if not found:
        pytest.skip(f"real converter outputs not available in {REAL_OUTPUTS}")
    return found


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the module: each example overwrites its file there."""
    return tmp_path_factory.mktemp("fuzz_sdk")


@pytest.fixture(scope="module")
def cpp_files() -> dict[str, bytes]:
    return _real(CPP_FILES)


@pytest.fixture(scope="module")
def net_json_bytes() -> dict[str, bytes]:
    return _real(NET_JSON_FILES)


@pytest.fixture(scope="module")
def net_json_files(net_json_bytes: dict[str, bytes]) -> dict[str, Any]:
    return Files((n, json.loads(b)) for n, b in net_json_bytes.items())


def only_results(*calls: Callable[[], object]) -> None:
    """Each call ends in a result or one UserError line -- nothing else."""
    for call in calls:
        try:
            result = call()
        except UserError as exc:
            line = exc.oneline()
            assert line and "\n" not in line
            continue
        assert result is not None


def _audit(path: Path) -> object:
    report = audit_fp16(path)
    json.dumps(report.to_dict())
    return [gate_fp16(report, soc) for soc in SOCS]


def _cpp(path: Path) -> object:
    model = read_cpp_model(path)
    json.dumps(model.to_dict())
    model.incomplete()
    return model


def _record(path: Path) -> object:
    rec = read_record(path)
    json.dumps(rec.to_dict())
    for key in ("act_bitwidth", "float_bitwidth", "input_encoding"):
        rec.value(key)
    return rec


@given(name=st.sampled_from(CPP_FILES), edits=byte_edits(CPP_TOKENS),
       step=st.integers(200, 20000))
def test_mutated_real_sources(cpp_files: dict[str, bytes], work: Path, name: str,
                              edits: list[tuple[Any, ...]], step: int) -> None:
    data = apply_edits(cpp_files.get(name) or next(iter(cpp_files.values())), edits)
    path = work / "model.cpp"
    path.write_bytes(data)
    only_results(lambda: _cpp(path), lambda: _audit(path), lambda: _record(path))
    # the streamed parse with tiny blocks (of the first 40,000 characters, to stay
    # cheap): block edges anywhere must not crash it
    text = data.decode("utf-8", errors="replace")[:40_000]
    model = parse_cpp_stream((text[i:i + step] for i in range(0, len(text), step)),
                             source="fuzz", block=step, max_block=4 * step)
    json.dumps(model.to_dict())


@given(name=st.sampled_from(NET_JSON_FILES), data=st.data())
def test_mutated_real_net_json(net_json_files: dict[str, Any], work: Path, name: str,
                               data: st.DataObject) -> None:
    doc = net_json_files.get(name) or next(iter(net_json_files.values()))
    mutated = data.draw(json_edits(doc))
    net = parse_net_json(mutated, source="fuzz")
    json.dumps(net.to_dict())
    path = work / "model_net.json"
    path.write_text(json.dumps(mutated), "utf-8")
    only_results(lambda: read_net_json(path), lambda: _audit(path), lambda: _record(path))


@given(name=st.sampled_from(NET_JSON_FILES), edits=byte_edits(JSON_TOKENS))
def test_net_json_bytes(net_json_bytes: dict[str, bytes], work: Path, name: str,
                        edits: list[tuple[Any, ...]]) -> None:
    raw = net_json_bytes.get(name) or next(iter(net_json_bytes.values()))
    path = work / "bytes_net.json"
    path.write_bytes(apply_edits(raw, edits))
    only_results(lambda: read_net_json(path), lambda: _audit(path), lambda: _record(path))


RECORD_TOKENS = st.sampled_from([
    "qnn-onnx-converter", "; ", " ", "\n", "\t", "act_bitwidth=", "act_bw=", "=", "[", "]",
    "(", ")", "{", "}", "'", '"', "\\", "16", "16.0", "True", "None", "1e999", HUGE_INT,
    "[[", "]]", "-" * 300 + "1", "(" * 250, "input_encoding=[['x', 'bgr']]", "\x00", "é",
    "\udcff"])


@given(pieces=st.lists(st.one_of(RECORD_TOKENS, st.text(max_size=6)), max_size=60))
def test_record_text(pieces: list[str]) -> None:
    rec = parse_record_text("".join(pieces), source="fuzz")
    json.dumps(rec.to_dict())
    for key in list(rec.args)[:5]:
        rec.value(key)
    for c in rec.conflicts:
        c.message()


DRY_TOKENS = st.sampled_from([
    "| Layers | Ops | Inputs | Outputs | Attributes |\n", "|", " | ", "\n", "+---+\n",
    "Conv_0", "Conv", " unsupported in Converter", " unsupported version.", " invalid value",
    "Proceeding with model evaluation...\n", "\x1b[31m", "\x1b[0m", " " * 2000, "-----", "="])


@given(pieces=st.lists(st.one_of(DRY_TOKENS, st.text(max_size=6)), max_size=60))
def test_dry_run_log(pieces: list[str]) -> None:
    report = parse_dry_run("".join(pieces))
    fill_ops(report, {"Conv_0": "Conv"})
    for p in report.problems:
        p.message()
    report.passed(0)
