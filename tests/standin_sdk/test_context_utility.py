"""The stand-in context blob and the stand-in host ``qnn-context-binary-utility``
(both JSON layouts), round-tripped through ``qnn_ci.sdk.context_info``: the
blob's own bytes, the utility's JSON, ``merge``, ``run_context_utility``,
``check_context`` on the utility's I/O, and ``qnn-ci context-info --sdk-root``."""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures.qairt_standin import HOST_BIN, make_sdk
from fixtures.qairt_standin.context_blob import read_context_payload, write_context_blob
from fixtures.qairt_standin.context_utility import describe
from fixtures.qairt_standin.sdk_config import read_config, write_config
from qnn_ci.cli import main
from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError
from qnn_ci.sdk.context_info import (
    ContextTensor,
    ExpectedTensor,
    check_context,
    merge,
    read_context_info,
    run_context_utility,
)
from qnn_ci.tables import get_soc
from tests.fuzz.mutations import json_edits
from tests.standin_sdk.conftest import run_tool

INPUTS = [{"name": "x", "dtype": "QNN_DATATYPE_UFIXED_POINT_8", "dims": [1, 8, 8, 3]}]
OUTPUTS = [{"name": "feat/map:0", "dtype": "QNN_DATATYPE_UFIXED_POINT_16", "dims": [1, 10]},
           {"name": "score", "dtype": "QNN_DATATYPE_FLOAT_32", "dims": [1]}]
BUILD = "v2.31.0.250130151446"
EXAMPLES = int(os.environ.get("QNN_CI_FUZZ_EXAMPLES", "100"))
FACTS = {"soc": "SM8550", "arch": 73, "vtcm_bytes": 8 << 20, "hvx_threads": 4,
         "build": BUILD, "graph_name": "g", "inputs": INPUTS, "outputs": OUTPUTS}


@pytest.fixture(scope="module")
def sdks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One stand-in SDK per JSON layout."""
    out = {}
    for style in ("info", "flat"):
        root = make_sdk(tmp_path_factory.mktemp(f"sdk_{style}") / "qairt", "2.31.0")
        write_config(root, replace(read_config(root), context_json_style=style))
        out[style] = root
    return out


def _blob(path: Path, soc: str = "SM8550", arch: int = 73, vtcm_mb: int = 8) -> Path:
    return write_context_blob(path, graph_name="det_model", inputs=INPUTS, outputs=OUTPUTS,
                              soc=soc, arch=arch, vtcm_bytes=vtcm_mb << 20,
                              sdk_version="2.31.0", build=BUILD, hvx_threads=8,
                              payload={"graph_name": "det_model", "onnx_b64": "AAAA"})


def test_the_blob_reads_like_a_real_binary(tmp_path: Path) -> None:
    path = _blob(tmp_path / "ctx.bin")
    info = read_context_info(path)
    assert (info.kind, info.soc, info.htp_arch, info.vtcm_bytes, info.hvx_threads) == \
        ("binary", "SM8550", 73, 8 << 20, 8)
    assert (info.build_id, info.qnn_version) == (BUILD, "2.31.0")
    assert info.size_bytes == path.stat().st_size
    assert [g.name for g in info.graphs] == ["det_model"] and not info.io_known
    assert info.header_names == ("x", "feat/map:0", "score")
    assert all(info.mentions(t["name"]) for t in INPUTS + OUTPUTS)
    # the trailer carries the model library's payload unchanged, and the facts
    facts = read_context_payload(path)
    assert facts is not None and facts["payload"] == {"graph_name": "det_model",
                                                      "onnx_b64": "AAAA"}
    assert (facts["soc"], facts["arch"], facts["graph_name"]) == ("SM8550", 73, "det_model")
    assert read_context_payload(tmp_path / "missing.bin") is None


def test_an_alias_names_the_same_soc(tmp_path: Path) -> None:
    info = read_context_info(_blob(tmp_path / "ctx.bin", "QCM6490", 68, 2))
    assert info.soc == "QCS6490"
    assert check_context(info, soc=get_soc("QCS6490"), runtime_qnn_version="2.31.0",
                         expected=[ExpectedTensor("score", None, None, False)]) == []


@pytest.mark.parametrize("style", ["info", "flat"])
def test_utility_json_round_trips_in_both_layouts(sdks: dict[str, Path], tmp_path: Path,
                                                  style: str) -> None:
    binary = _blob(tmp_path / "ctx.bin")
    utility, note = run_context_utility(sdks[style], binary, tmp_path / "work")
    assert note is None and utility is not None
    assert utility.kind == "utility_json" and utility.size_bytes is None
    assert (utility.soc, utility.htp_arch, utility.vtcm_bytes, utility.hvx_threads) == \
        ("SM8550", 73, 8 << 20, 8)
    assert utility.qnn_version == "2.31.0" and utility.build_id.endswith(BUILD[1:])
    assert utility.spill_fill_bytes == 0
    (graph,) = utility.graphs
    assert graph.name == "det_model"
    assert graph.inputs == (ContextTensor("x", "QNN_DATATYPE_UFIXED_POINT_8", (1, 8, 8, 3)),)
    assert graph.outputs == (
        ContextTensor("feat/map:0", "QNN_DATATYPE_UFIXED_POINT_16", (1, 10)),
        ContextTensor("score", "QNN_DATATYPE_FLOAT_32", (1,)))
    raw = json.loads(Path(utility.source).read_text())
    assert ("info" in raw) == (style == "info")       # the two layouts really differ
    merged = merge(read_context_info(binary), utility)
    assert merged.kind == "binary" and merged.size_bytes == binary.stat().st_size
    assert merged.graphs == utility.graphs and merged.io_known
    assert merged.build_id == BUILD and merged.names >= {"x", "score", "det_model"}


def test_check_context_compares_types_shapes_and_sides(sdks: dict[str, Path],
                                                       tmp_path: Path) -> None:
    binary = _blob(tmp_path / "ctx.bin")
    utility, _ = run_context_utility(sdks["info"], binary, tmp_path / "work")
    info = merge(read_context_info(binary), utility)
    good = [ExpectedTensor("x", "QNN_DATATYPE_UFIXED_POINT_8", (1, 8, 8, 3), True),
            ExpectedTensor("score", "FLOAT_32", (1,), False),
            ExpectedTensor("feat/map:0", None, None, False)]
    assert check_context(info, soc=get_soc("SM8550"), expected=good,
                         runtime_qnn_version="2.31.0") == []
    bad = [ExpectedTensor("x", "QNN_DATATYPE_FLOAT_32", (1, 3, 8, 8), True),
           ExpectedTensor("score", None, None, True),
           ExpectedTensor("logits", None, None, False)]
    findings = check_context(info, soc=get_soc("SM8550"), expected=bad,
                             runtime_qnn_version="2.29.0")
    got = sorted((f.check, f.subject) for f in findings)
    assert got == [("context.io_names", "logits"), ("context.io_names", "score"),
                   ("context.io_shapes", "x"), ("context.io_types", "x"),
                   ("context.newer_than_runtime", "ctx.bin")]
    assert all(f.severity == Severity.ERROR for f in findings)
    side = next(f.message for f in findings if f.subject == "score")
    assert "(it is a graph output)" in side


def test_the_utility_refuses_other_files_and_is_reported(sdks: dict[str, Path],
                                                         tmp_path: Path) -> None:
    other = tmp_path / "not_a_context.bin"
    other.write_bytes(b"\x7fELF" + b"\0" * 100)
    run = run_tool(sdks["info"], "qnn-context-binary-utility", "--context_binary", other,
                   "--json_file", tmp_path / "x.json")
    assert run.code == 1 and "Failed to read context binary" in run.stderr
    assert not (tmp_path / "x.json").exists()
    info, note = run_context_utility(sdks["info"], other, tmp_path / "work")
    assert info is None and note is not None and "\n" not in note
    assert "qnn-context-binary-utility failed (exit status 1)" in note
    assert "Failed to read context binary" in note
    # an SDK without the tool, or none at all: nothing to say
    assert run_context_utility(tmp_path, other, tmp_path / "w2") == (None, None)
    assert run_context_utility(None, other, tmp_path / "w3") == (None, None)
    assert (sdks["info"] / HOST_BIN / "qnn-context-binary-utility").is_file()


def test_context_info_command_merges_the_utility(sdks: dict[str, Path], tmp_path: Path,
                                                 capsys, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    binary = _blob(tmp_path / "ctx.bin", "QCS6490", 68, 2)
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    assert main(["context-info", str(binary), "--sdk-root", str(sdks["flat"])]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "SoC: QCS6490" in out and "HTP arch: v68" in out and "VTCM: 2 MiB (2097152 bytes)" \
        in out
    assert "    input  x  QNN_DATATYPE_UFIXED_POINT_8 [1, 8, 8, 3]" in out
    assert "    output feat/map:0  QNN_DATATYPE_UFIXED_POINT_16 [1, 10]" in out
    assert "spill/fill buffer: 0 bytes" in out
    # $QNN_SDK_ROOT is used the same way; the utility's JSON alone reads too
    monkeypatch.setenv("QNN_SDK_ROOT", str(sdks["info"]))
    assert main(["context-info", "--json", str(binary)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["graphs"][0]["outputs"][1] == {"name": "score", "dtype": "QNN_DATATYPE_FLOAT_32",
                                              "dims": [1]}
    utility, _ = run_context_utility(sdks["info"], binary, tmp_path / "work")
    assert utility is not None
    assert main(["context-info", str(utility.source)]) == 0
    out = capsys.readouterr().out
    assert "(qnn-context-binary-utility JSON)" in out and "SoC: QCS6490" in out
    # a utility that fails is a note, not an error; its log is kept where the note says
    broken = tmp_path / "broken.bin"
    broken.write_bytes(binary.read_bytes().replace(b"qnnci-standin-context-1", b"x" * 23))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert main(["context-info", str(broken), "--sdk-root", str(sdks["info"])]) == 0
    out, err = capsys.readouterr()
    assert "SoC: QCS6490" in out and err.startswith("note: qnn-context-binary-utility failed")
    log = re.search(r"\(log (\S+)\)$", err.strip())
    assert log and Path(log.group(1)).is_file() and "Failed to read" in Path(
        log.group(1)).read_text()
    # a successful run leaves nothing behind
    assert main(["context-info", str(binary), "--sdk-root", str(sdks["info"])]) == 0
    assert len(list((tmp_path / "tmp").iterdir())) == 1


@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data(), style=st.sampled_from(["info", "flat"]))
def test_fuzz_edited_utility_json(tmp_path: Path, data: st.DataObject, style: str) -> None:
    """Edits of the utility's JSON (either layout): a ContextInfo whose checks run, or
    one UserError line."""
    doc = data.draw(json_edits(describe(FACTS, style)))
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    try:
        info = read_context_info(path)
    except UserError as exc:
        assert "\n" not in exc.oneline() and str(path) in exc.oneline()
        return
    json.dumps(info.to_dict())
    check_context(info, soc=get_soc("SM8550"), runtime_qnn_version="2.31.0", expected=[
        ExpectedTensor("x", "QNN_DATATYPE_UFIXED_POINT_8", (1, 8, 8, 3), True),
        ExpectedTensor("score", None, (1,), False)])
