"""What a real QNN context binary says it is: binaries the HTP simulator
(onnxruntime-qnn) writes for QCS6490 (v68, 2 MiB VTCM) and SM8550 (v73), read by
``qnn_ci.sdk.context_info``, ``qnn-ci context-info`` and the ``sim_npu`` stage; and
any bytes at all give a ContextInfo or one UserError line (hypothesis)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.cli import main
from qnn_ci.engine.results import Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec, SimSpec, TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.errors import UserError
from qnn_ci.sdk.context_info import ContextInfo, ExpectedTensor, check_context, read_context_info
from qnn_ci.sim.check import check_htp
from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.quantize import QuantSettings
from qnn_ci.stages.sim_npu import SimNpuStage, _context_facts
from qnn_ci.tables import get_soc
from tests.fuzz.mutations import JSON_VALUES, apply_edits, byte_edits
from tests.sim.conftest import REASON, _save, make_conv_feeds, needs_sim, write_samples

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("QNN_CI_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
                database=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])
ODD = ("in.put:0", "/model/out:0", "ünï")           # names a model may really have
TOKENS = [b"soc_type=", b"soc_type=QCS6490;arch=68;", b";arch=", b";vtcm_size=",
          b"vtcm_size=99999999999999999999999;", b"hvx_threads=-1;", b"\x14\x00\x00\x00",
          b"v2.51.0.260929181845\x00", b"PICKLE/1/", b"\x00" * 64, b"\xff" * 8,
          b"\x7fELF", b"{", b"\xef\xbb\xbf{", b"\x00\x10\x00\x00\x00\x00\x00\x00"]


def _odd_names(path: Path) -> Path:
    """x -> Conv -> Relu -> '/model/out:0' and Conv -> Sigmoid -> 'ünï', input 'in.put:0'."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.random((4, 3, 3, 3)) - 0.5).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", [ODD[0], "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], [ODD[1]], name="r"),
             helper.make_node("Sigmoid", ["c"], [ODD[2]], name="s")]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "odd", [vi(ODD[0], TensorProto.FLOAT, [1, 3, 8, 8])],
                              [vi(ODD[1], TensorProto.FLOAT, [1, 4, 8, 8]),
                               vi(ODD[2], TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    return _save(graph, path)


@pytest.fixture(scope="module")
def binaries(graphs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Path]:
    """Context binaries the simulator wrote: the conv graph (x -> y) for QCS6490 and
    SM8550, and a graph with odd tensor names for QCS6490."""
    if REASON:
        pytest.skip(REASON)
    root = tmp_path_factory.mktemp("ctx_bins")
    odd = _odd_names(root / "odd.onnx")
    out = {}
    for key, model, soc, feeds in (
            ("QCS6490", graphs["conv"], "QCS6490", make_conv_feeds(2)),
            ("SM8550", graphs["conv"], "SM8550", make_conv_feeds(2)),
            ("odd", odd, "QCS6490", [{ODD[0]: f["x"]} for f in make_conv_feeds(2)])):
        report = check_htp(model, root / key, sim_target(soc), feeds, QuantSettings())
        assert report.passed, report.findings
        assert report.prepare is not None and report.prepare.ctx_binary is not None
        out[key] = report.prepare.ctx_binary
    return out


def _expected(*outputs: str, inputs: tuple[str, ...] = ("x",)) -> list[ExpectedTensor]:
    return [ExpectedTensor(n, None, None, True) for n in inputs] + \
        [ExpectedTensor(n, None, None, False) for n in outputs]


def _checks(findings: list, severity: Severity = Severity.ERROR) -> set[str]:
    return {f.check for f in findings if f.severity == severity}


# ----------------------------------------------------------------------------- real binaries

@needs_sim
def test_a_qcs6490_binary_says_qcs6490_v68_2mib(binaries: dict[str, Path]) -> None:
    path = binaries["QCS6490"]
    info = read_context_info(path)
    assert (info.kind, info.soc, info.htp_arch, info.vtcm_bytes) == ("binary", "QCS6490", 68,
                                                                     2097152)
    assert info.hvx_threads == 4 and info.size_bytes == path.stat().st_size
    assert info.qnn_version and re.fullmatch(r"\d+\.\d+\.\d+", info.qnn_version)
    assert info.build_id and info.build_id.startswith(f"v{info.qnn_version}.")
    assert info.mentions("x") and info.mentions("y") and not info.mentions("z")
    assert {"x", "y"} <= set(info.header_names)
    assert len(info.graphs) == 1 and info.graphs[0].name in info.names
    assert not info.io_known                       # the bytes do not tell inputs from outputs
    json.dumps(info.to_dict())
    # a clean check for the SoC it was built for, its alias and the model's own names
    for target in ("QCS6490", "QCM6490"):
        findings = check_context(info, soc=get_soc(target), expected=_expected("y"),
                                 runtime_qnn_version=info.qnn_version)
        assert findings == [], findings


@needs_sim
def test_an_sm8550_binary_says_v73_and_fails_a_qcs6490_target(binaries: dict[str, Path]) -> None:
    info = read_context_info(binaries["SM8550"])
    assert (info.soc, info.htp_arch, info.vtcm_bytes) == ("SM8550", 73, 8 << 20)
    assert check_context(info, soc=get_soc("SM8550"), expected=_expected("y"),
                         runtime_qnn_version=None) == []
    findings = check_context(info, soc=get_soc("QCS6490"), expected=_expected("y"),
                             runtime_qnn_version=None)
    assert _checks(findings) == {"context.soc", "context.arch"}
    assert _checks(findings, Severity.WARNING) == {"context.vtcm"}
    by = {f.check: f.message for f in findings}
    assert "built for SM8550, not the target QCS6490" in by["context.soc"]
    assert "v73" in by["context.arch"] and "v68" in by["context.arch"]
    assert "8 MiB (8388608 bytes)" in by["context.vtcm"] and "2 MiB" in by["context.vtcm"]
    assert all("\n" not in m for m in by.values())


@needs_sim
def test_odd_tensor_names_are_kept_as_the_model_has_them(binaries: dict[str, Path]) -> None:
    info = read_context_info(binaries["odd"])
    assert all(info.mentions(n) for n in ODD), sorted(info.names)
    assert check_context(info, soc=get_soc("QCS6490"), runtime_qnn_version=None,
                         expected=_expected(*ODD[1:], inputs=ODD[:1])) == []


@needs_sim
def test_missing_names_and_a_newer_build_are_errors(binaries: dict[str, Path]) -> None:
    info = read_context_info(binaries["QCS6490"])
    findings = check_context(info, soc=get_soc("QCS6490"), expected=_expected("logits"),
                             runtime_qnn_version="2.31.0.250130")
    assert _checks(findings) == {"context.io_names", "context.newer_than_runtime"}
    names = next(f for f in findings if f.check == "context.io_names")
    assert names.subject == "logits" and "'logits'" in names.message
    newer = next(f for f in findings if f.check == "context.newer_than_runtime").message
    assert "error 5000 (Could not create context from binary)" in newer
    assert f"QNN {info.qnn_version}" in newer and "2.31.0" in newer
    major, minor, patch = map(int, (info.qnn_version or "").split("."))
    for same_or_newer in (info.qnn_version, f"v{major}.{minor}.{patch + 1}.1",
                          f"{major}.{minor + 10}.0"):
        assert "context.newer_than_runtime" not in _checks(check_context(
            info, soc=None, expected=(), runtime_qnn_version=same_or_newer))
    # numerically, not as text: 2.9 is older than 2.10
    old = replace(info, qnn_version="2.10.0")
    assert _checks(check_context(old, soc=None, expected=(), runtime_qnn_version="2.9.0")) == \
        {"context.newer_than_runtime"}


def test_unknown_facts_are_never_errors(tmp_path: Path) -> None:
    info = ContextInfo(tmp_path / "x.bin", "binary", 10, None, None, None, None, None, None,
                       (), frozenset())
    findings = check_context(info, soc=get_soc("QCS6490"), expected=_expected("y"),
                             runtime_qnn_version="2.31.0")
    assert [(f.check, f.severity) for f in findings] == [("context.unknown", Severity.INFO)]
    for what in ("SoC", "HTP arch", "VTCM size", "graph I/O names", "QNN version"):
        assert what in findings[0].message


# ----------------------------------------------------------------------------- the command

@needs_sim
def test_context_info_command_prints_the_facts(binaries: dict[str, Path], capsys,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    assert main(["context-info", str(binaries["QCS6490"])]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "SoC: QCS6490" in out and "HTP arch: v68" in out
    assert "VTCM: 2 MiB (2097152 bytes)" in out and "HVX threads: 4" in out
    assert f"({binaries['QCS6490'].stat().st_size} bytes" in out
    assert re.search(r"^QNN build: v\d+\.\d+\.\d+\.\d+ \(QNN \d+\.\d+\.\d+\)$", out, re.M)
    io_line = next(line for line in out.splitlines() if line.startswith("I/O tensors"))
    assert re.search(r": x, y$", io_line), io_line


@needs_sim
def test_context_info_command_json_in_a_fresh_process(binaries: dict[str, Path]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QNN_SDK_ROOT"}
    proc = subprocess.run([sys.executable, "-m", "qnn_ci", "context-info", "--json",
                           str(binaries["SM8550"])], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["soc"], doc["htp_arch"], doc["vtcm_bytes"]) == ("SM8550", 73, 8388608)
    assert "y" in doc["names"] and doc["utility_note"] is None


@pytest.mark.parametrize(("content", "words"), [
    (b"", "empty file"),
    (b"\x7fELF\x02\x01\x01" + b"\x00" * 60, "an ELF file"),
    (b"hello, not a binary\n" * 50, "not a QNN context binary"),
    (b'{"info": {"graphs": [', "not valid JSON"),
    (b'{"a": 1}', "not qnn-context-binary-utility output"),
    (b"[1, 2]", "not qnn-context-binary-utility output"),
])
def test_bad_files_are_one_line_user_errors(tmp_path: Path, capsys, content: bytes,
                                            words: str) -> None:
    path = tmp_path / "ctx.bin"
    path.write_bytes(content)
    with pytest.raises(UserError, match=re.escape(words)) as exc:
        read_context_info(path)
    assert str(path) in exc.value.oneline() and "\n" not in exc.value.oneline()
    assert main(["context-info", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"qnn-ci context-info: error: {path}: ")


@needs_sim
def test_a_truncated_binary_says_so(binaries: dict[str, Path], tmp_path: Path) -> None:
    data = binaries["QCS6490"].read_bytes()
    for keep in (len(data) // 2, len(data) - 1, 8192):
        path = tmp_path / f"cut{keep}.bin"
        path.write_bytes(data[:keep])
        with pytest.raises(UserError, match="truncated: its header says"):
            read_context_info(path)


# ----------------------------------------------------------------------------- fuzz

@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ctx_fuzz")


def _survives(path: Path, data: bytes) -> None:
    """Any bytes: a ContextInfo that checks and serialises, or one UserError line."""
    path.write_bytes(data)
    try:
        info = read_context_info(path)
    except UserError as exc:
        line = exc.oneline()
        assert "\n" not in line and str(path) in line
        return
    json.dumps(info.to_dict())
    check_context(info, soc=get_soc("QCS6490"), expected=_expected("y"),
                  runtime_qnn_version="2.31.0")


@FUZZ
@given(data=st.binary(max_size=4096))
def test_fuzz_random_bytes(fuzz_dir: Path, data: bytes) -> None:
    _survives(fuzz_dir / "random.bin", data)


@FUZZ
@given(doc=JSON_VALUES)
def test_fuzz_random_json(fuzz_dir: Path, doc: object) -> None:
    _survives(fuzz_dir / "random.json", json.dumps(doc).encode())


@needs_sim
@FUZZ
@given(edits=byte_edits(TOKENS))
def test_fuzz_mutated_real_binary(binaries: dict[str, Path], fuzz_dir: Path,
                                  edits: list) -> None:
    _survives(fuzz_dir / "mutated.bin", apply_edits(binaries["QCS6490"].read_bytes(), edits))


# ----------------------------------------------------------------------------- sim_npu

@needs_sim
def test_sim_npu_reports_the_binary_facts(graphs: dict[str, Path], tmp_path: Path) -> None:
    cal = write_samples(tmp_path / "cal", make_conv_feeds(2), "input_list")
    up = {"static_shapes": StageResult("static_shapes", Status.PASSED,
                                       artefacts={"model": str(graphs["conv"])}),
          "calibration": StageResult("calibration", Status.PASSED,
                                     artefacts={"input_list": str(cal)},
                                     data={"inputs": {"x": {"dtype": "float32",
                                                            "shape": [1, 3, 8, 8]}}})}
    export = ExportSpec("e", graphs["conv"], tmp_path / "qnn-ci.yaml", 7,
                        target=TargetSpec(soc="QCM6490"), sim=SimSpec(samples=2))
    workdir = tmp_path / "work" / "e" / "sim_npu"
    workdir.mkdir(parents=True)
    res = SimNpuStage().run(StageContext(export, Environment(workdir=tmp_path / "work"),
                                         workdir, up))
    assert res.status == Status.PASSED, res.failure_text()
    props = res.properties
    binary = Path(res.artefacts["ctx_binary"])
    assert (props["context.soc"], props["context.htp_arch"], props["context.vtcm_bytes"]) == \
        ("QCS6490", 68, 2097152)
    assert props["context.bytes"] == binary.stat().st_size
    assert re.fullmatch(r"\d+\.\d+\.\d+", props["context.qnn_version"])
    doc = json.loads(Path(res.artefacts["context_info"]).read_text())
    assert doc["soc"] == "QCS6490" and "y" in doc["names"]
    assert not [f for f in res.findings if f.check.startswith("context.")], res.findings
    json.dumps(res.to_dict())


def test_sim_npu_warns_on_an_unreadable_binary(graphs: dict[str, Path], tmp_path: Path) -> None:
    junk = tmp_path / "junk_ctx_qnn.bin"
    junk.write_bytes(b"\x01\x02" * 100)
    props, findings, path = _context_facts(tmp_path, junk, graphs["conv"], get_soc("QCS6490"))
    assert props == {} and path is None
    assert [(f.check, f.severity) for f in findings] == [("context.unreadable",
                                                          Severity.WARNING)]
    assert "not a QNN context binary" in findings[0].message
