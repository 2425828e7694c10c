"""`qnn-ci sim --diagnose`: bad input, the text report, the JSON object."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_ci.cli import main
from tests.diagnose.graphs import COLLAPSE_NODE, collapse_model, collapse_samples
from tests.sim.conftest import needs_sim, write_samples

HAS_ADVISOR = importlib.util.find_spec("qnn_ci.diagnose.advisor") is not None


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sim", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli_diag")
    return {"model": collapse_model(folder / "collapse.onnx"),
            "cal": write_samples(folder / "data", collapse_samples(8, seed=1), "cal"),
            "held": write_samples(folder / "data", collapse_samples(2, seed=2), "held")}


def test_diagnose_without_calibration_is_one_line(capsys, material, tmp_path: Path) -> None:
    code, out, err = _run(capsys, str(material["model"]), "--soc", "QCS6490", "--diagnose",
                          "--out", str(tmp_path / "o"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("qnn-ci sim: error: --diagnose needs --calibration INPUT_LIST (real "
                          "samples: random data cannot diagnose numerics): ")
    assert err.count("--diagnose") == 1                      # named once, no doubled prefix
    # how to make the list: the commands it names, each as it is typed
    assert "`qnn-ci run --stage calibration` writes one" in err
    assert "`qnn-ci inputs validate LIST --model MODEL.onnx`" in err
    assert not (tmp_path / "o").exists()


def test_the_list_the_hint_names_is_where_it_says(tmp_path: Path) -> None:
    """``qnn-ci run --stage calibration`` writes the input list at the path the
    --diagnose hint gives, and ``qnn-ci inputs validate`` accepts it."""
    import os
    import textwrap

    from qnn_ci.cli.sim_cmd import DIAGNOSE_NEEDS_CALIBRATION
    from tests.core.graphs import FLOATS_GEN, scale_model

    scale_model(tmp_path / "m.onnx", dims=[1, 8])
    (tmp_path / "gens.py").write_text(FLOATS_GEN)
    (tmp_path / "qnn-ci.yaml").write_text(textwrap.dedent("""
        exports:
          - name: det
            model: m.onnx
            calibration: {generator: "gens:floats", samples: 4, held_out: 1}
        """).lstrip())
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "QNN_SDK_ROOT")}

    def qnn_ci(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "qnn_ci", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)

    done = qnn_ci("run", "--stage", "calibration")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = ".qnn-ci/<export>/calibration/"
    assert folder + "input_list.txt" in DIAGNOSE_NEEDS_CALIBRATION
    for name in ("input_list.txt", "held_out_list.txt"):
        listed = tmp_path / folder.replace("<export>", "det") / name
        checked = qnn_ci("inputs", "validate", str(listed), "--model", "m.onnx")
        assert checked.returncode == 0 and checked.stdout.endswith("clean\n"), checked.stdout


@pytest.mark.parametrize("budget", ["0", "-5", "nan"])
def test_bad_budget_is_one_line(capsys, material, tmp_path: Path, budget: str) -> None:
    code, out, err = _run(capsys, str(material["model"]), "--soc", "QCS6490", "--diagnose",
                          "--calibration", str(material["cal"]), f"--budget={budget}",
                          "--out", str(tmp_path / "o"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--budget must be a positive number of seconds" in err


@needs_sim
def test_text_report_names_attribution_layer_and_fix(capsys, material,
                                                      tmp_path: Path) -> None:
    code, out, err = _run(capsys, str(material["model"]), "--soc", "QCS6490",
                          "--calibration", str(material["cal"]), "--test-inputs",
                          str(material["held"]), "--diagnose", "--budget", "120",
                          "--out", str(tmp_path / "o"))
    assert code == 1                                   # the check's verdict stands
    assert "\ndiagnosis: quantization loss (QDQ on CPU worst cosine" in out
    assert f"first divergence: 'b_relu' (Conv '{COLLAPSE_NODE}', tensor 3)" in out
    assert "worst jumps" in out and "cost: sweep" in out
    for name in ("layers.csv", "diagnosis.json", "layers.png"):
        assert str(tmp_path / "o" / "diagnosis" / name) in out
    # progress: one line per phase on stderr, by default
    assert "qnn-ci sim: attribution: quantization" in err
    assert "qnn-ci sim: per-layer sweep:" in err
    if HAS_ADVISOR:
        assert "1. per_channel: true → worst cosine" in out
        assert "manifest YAML to paste (best recipe):\n    quantization:\n      per_channel: true" \
            in out
        assert "converter flags: --use_per_channel_quantization" in out


@needs_sim
def test_json_has_the_diagnosis_object(material, tmp_path: Path) -> None:
    out_dir = tmp_path / "o"
    proc = subprocess.run(
        [sys.executable, "-m", "qnn_ci", "sim", str(material["model"]), "--soc", "QCS6490",
         "--calibration", str(material["cal"]), "--samples", "1", "--diagnose", "--json",
         "--budget", "120", "--out", str(out_dir)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    d = result["diagnosis"]
    assert d["attribution"] == "quantization"
    fd = d["first_divergence"]
    assert (fd["tensor"], fd["node"], fd["op_type"]) == ("b_relu", COLLAPSE_NODE, "Conv")
    assert fd["metric"] == "worst_channel_cosine" and fd["bound"] == 0.99
    assert [m["index"] for m in d["layers"]] == list(range(len(d["layers"])))
    assert {"tensor", "node", "op_type", "cosine", "snr_db", "max_abs",
            "worst_channel_cosine"} <= set(d["layers"][0])
    assert isinstance(d["recipes"], list)
    if HAS_ADVISOR:
        best = d["recipes"][0]
        assert best["settings"] == {"quantization.per_channel": True} and best["passes"]
        assert best["worst"]["cosine"] > 0.99
    saved = json.loads((out_dir / "sim_report.json").read_text("utf-8"))
    assert saved["diagnosis"] == d
    assert "qnn-ci sim: attribution: quantization" in proc.stderr
