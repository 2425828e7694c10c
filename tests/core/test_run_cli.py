"""`qnn-ci run`: the pipeline without pytest, against the stand-in SDK: exit
semantics, the JUnit report (also when interrupted), and a cached re-run that
starts no SDK tool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from qnn_ci.cli import main
from tests.core.graphs import scale_model

GEN = '''
import os, time
import numpy as np

def floats(count):
    rng = np.random.default_rng(3)
    for i in range(count):
        if os.environ.get("GEN_SLEEP") and i == 2:
            open(os.environ["GEN_SLEEP"], "w").write("sleeping")
            time.sleep(60)
        yield {"x": rng.normal(size=(1, 8)).astype(np.float32)}
'''


def project(tmp_path: Path, extra: str = "") -> Path:
    scale_model(tmp_path / "m.onnx", dims=["N", 8])
    (tmp_path / "gens.py").write_text(GEN)
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(f"""
        defaults:
          target: {{soc: QCS6490, lib_target: aarch64-oe-linux-gcc11.2}}
          inputs: {{x: {{shape: [1, 8]}}}}
          calibration: {{generator: "gens:floats", samples: 6, held_out: 1}}
        exports:
          - name: a
            model: m.onnx
          - name: b
            model: m.onnx
        {extra}""").lstrip())
    return p


@pytest.fixture
def sdk_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_sdk(tmp_path / "sdk", "2.31.0")
    monkeypatch.setenv("QNN_SDK_ROOT", str(root))
    monkeypatch.setenv("ESDK_ENV", str(make_esdk(tmp_path / "esdk")))
    return root


def cases(junit: Path) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}


def test_full_run_then_cached_run_starts_no_sdk_tool(tmp_path: Path, sdk_env: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    manifest = project(tmp_path)
    junit = tmp_path / "report.xml"
    args = ["run", str(manifest), "--workdir", str(tmp_path / "w"), "--junit", str(junit),
            "--stage", "model_lib", "--stage", "contract", "--stage", "fp16_gate"]
    assert main(args) == 0, capsys.readouterr().out
    got = cases(junit)
    assert {"a::convert", "a::contract", "a::fp16_gate", "a::model_lib", "b::model_lib"} <= set(got)
    assert "a::sim_npu" not in got  # --stage runs only what the named stages need
    props = {p.get("name"): p.get("value") for p in got["a::convert"].iter("property")}
    assert props["qnn.sdk_version"] == "2.31.0"
    assert props["qnn.artefact.cpp"].endswith("a/convert/a.cpp")
    capsys.readouterr()
    # Make every SDK tool unrunnable without changing its size or mtime: a
    # re-run with nothing changed must not start any of them.
    tools = list((sdk_env / "bin" / "x86_64-linux-clang").iterdir())
    for tool in tools:
        tool.chmod(0o644)
    try:
        assert main(args) == 0
        out = capsys.readouterr().out
        assert out.count("(cached)") == 14 and "FAIL" not in out, out
    finally:
        for tool in tools:
            tool.chmod(0o755)


def test_refused_setting_and_missing_manifest_exit_2(tmp_path: Path, sdk_env: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    manifest = project(tmp_path)
    text = manifest.read_text().replace("soc: QCS6490,", "soc: QCS6490,\n    ") \
        .replace("  - name: b\n    model: m.onnx", "  - name: b\n    model: m.onnx\n"
                 "    quantization: {float_fallback: true, float_bitwidth: 16}")
    manifest.write_text(text)
    code = main(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--stage", "convert",
                 "--export", "b"])
    out = capsys.readouterr()
    assert code == 2, out
    assert "float_fallback" in out.out
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "manifest not found" in capsys.readouterr().err


def test_interrupted_run_leaves_a_valid_junit(tmp_path: Path) -> None:
    manifest = project(tmp_path)
    junit = tmp_path / "report.xml"
    flag = tmp_path / "sleeping"
    env = dict(os.environ, GEN_SLEEP=str(flag))
    env.pop("QNN_SDK_ROOT", None)
    proc = subprocess.Popen([sys.executable, "-m", "qnn_ci", "run", str(manifest), "--workdir",
                             str(tmp_path / "w"), "--junit", str(junit), "--stage", "calibration"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert flag.exists(), proc.communicate()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    root = ET.parse(junit).getroot()
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == ["a::static_shapes"]
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props.get("qnn.interrupted") == "interrupted by the user"
