"""`qnn-ci run`: the pipeline without pytest, against the stand-in SDK: exit
semantics, the JUnit report (interruptions: test_interrupts.py), and a cached re-run that
starts no SDK tool."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from qnn_ci.cli import main
from tests.core.graphs import FLOATS_GEN, scale_model


def project(tmp_path: Path, extra: str = "") -> Path:
    scale_model(tmp_path / "m.onnx", dims=["N", 8])
    (tmp_path / "gens.py").write_text(FLOATS_GEN)
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


def chain(tmp_path: Path) -> Path:
    scale_model(tmp_path / "up.onnx", dims=["N", 8], scale=3.0)
    scale_model(tmp_path / "down.onnx", in_name="feat", out_name="out", dims=[1, 8])
    (tmp_path / "gens.py").write_text(FLOATS_GEN)
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent("""
        exports:
          - name: up
            model: up.onnx
            inputs: {x: {shape: [1, 8]}}
            calibration: {generator: "gens:floats", samples: 3, held_out: 0}
          - name: down
            model: down.onnx
            calibration: {from: {export: up, outputs: {y: feat}}}
        """).lstrip())
    return p


def test_selecting_a_downstream_export_runs_its_upstream_quietly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = chain(tmp_path)
    junit = tmp_path / "j.xml"
    code = main(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--export", "down",
                 "--stage", "calibration", "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "down::calibration" not in out and "PASS  calibration" in out
    assert "up  (" not in out                     # the upstream ran but is not reported
    assert set(cases(junit)) == {"down::static_shapes", "down::calibration"}
    assert (tmp_path / "w" / "up" / "calibration" / "input_list.txt").is_file()
    assert (tmp_path / "w" / "down" / "calibration" / "input_list.txt").is_file()


def test_unknown_export_name_and_duplicate_names_across_manifests_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = chain(tmp_path)
    assert main(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--export",
                 "dwn"]) == 2
    assert "--export 'dwn': no such export (did you mean 'down'?)" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    scale_model(other / "up.onnx", dims=[1, 8])
    (other / "qnn-ci.yaml").write_text("exports:\n  - name: up\n    model: up.onnx\n")
    assert main(["run", str(manifest), str(other / "qnn-ci.yaml"), "--workdir",
                 str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert f"{other / 'qnn-ci.yaml'}:2: name: export 'up' is also defined in {manifest}" in err


def test_bad_manifest_is_in_the_junit_and_annotated(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    scale_model(tmp_path / "m.onnx", dims=[1, 8])
    p = tmp_path / "qnn-ci.yaml"
    p.write_text("exports:\n  - name: a\n    model: m.onnx\n    opsett: 17\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    monkeypatch.chdir(tmp_path)
    junit = tmp_path / "j.xml"
    assert main(["run", str(p), "--junit", str(junit), "--workdir", str(tmp_path / "w")]) == 2
    out = capsys.readouterr()
    assert "::error file=qnn-ci.yaml,line=4,title=(manifest)%3A%3Amanifest::" in out.out
    assert "unknown key 'opsett' (did you mean 'opset'?)" in out.err
    (case,) = ET.parse(junit).getroot().iter("testcase")
    assert case.get("name") == "(manifest)::manifest" and case.find("error") is not None
    assert "### (manifest)" in (tmp_path / "summary.md").read_text()


def test_unwritable_paths_are_one_line_errors(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    manifest = chain(tmp_path)
    blocker = tmp_path / "afile"
    blocker.write_text("")
    assert main(["run", str(manifest), "--junit", str(blocker / "j.xml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "afile/j.xml: --junit: cannot write the JUnit report" in err[0]
    assert main(["shapes", str(tmp_path / "up.onnx"), "--dim", "x=1,8", "-o",
                 str(blocker / "x.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]


def test_edits_rerun_only_the_stages_they_affect(tmp_path: Path, sdk_env: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    manifest = project(tmp_path)
    args = ["run", str(manifest), "--workdir", str(tmp_path / "w"), "--export", "a",
            "--stage", "model_lib", "--stage", "contract", "--json"]

    def statuses() -> dict[str, bool]:
        assert main(args) == 0
        return {r["stage"]: r["cached"] for r in json.loads(capsys.readouterr().out)}

    assert not any(statuses().values())
    # A threshold is read by no stage run here: everything is reused.
    manifest.write_text(manifest.read_text().replace(
        "  inputs: {x: {shape: [1, 8]}}", "  inputs: {x: {shape: [1, 8]}}\n"
        "  thresholds: {cosine: 0.95}"))
    assert all(statuses().values())
    # A comment in the generator re-runs calibration; its output is byte-identical,
    # so nothing downstream re-runs.
    (tmp_path / "gens.py").write_text(FLOATS_GEN + "\n# a comment\n")
    cached = statuses()
    assert not cached["calibration"]
    assert cached["convert"] and cached["model_lib"] and cached["contract"]
