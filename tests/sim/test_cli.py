"""`qnn-ci sim`: exit codes 0/1/2, what it prints, --json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qnn_ci.cli import main
from tests.sim.conftest import needs_sim, write_samples

pytestmark = needs_sim


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sim", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_unknown_soc_is_bad_input_before_anything_runs(capsys, tmp_path: Path) -> None:
    code, out, err = _run(capsys, str(tmp_path / "missing.onnx"), "--soc", "QCS6491",
                          "--out", str(tmp_path / "o"))
    assert code == 2 and out == ""
    assert "--soc: unknown SoC 'QCS6491' (did you mean QCS6490?)" in err
    assert not (tmp_path / "o").exists()


def test_dynamic_dims_need_dim(capsys, graphs, tmp_path: Path) -> None:
    code, _, err = _run(capsys, str(graphs["dyn"]), "--soc", "QCS6490",
                        "--out", str(tmp_path))
    assert code == 2
    assert "dynamic input(s) not pinned: x: give --dim x=<d0>,3,8,8" in err


@pytest.mark.parametrize(("argv", "words"), [
    (["--dim", "y=1,3,8,8"], "has no input 'y'"),
    (["--dim", "x=1,3,8"], "rank"),
    (["--dim", "x=1,3,a,8"], "integers"),
])
def test_bad_dims_are_bad_input(capsys, graphs, tmp_path: Path, argv: list[str],
                                words: str) -> None:
    code, _, err = _run(capsys, str(graphs["dyn"]), "--soc", "QCS6490", "--out",
                        str(tmp_path), *argv)
    assert code == 2 and words in err and err.count("\n") == 1


def test_unreadable_model_is_bad_input(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    code, _, err = _run(capsys, str(bad), "--soc", "QCS6490", "--out", str(tmp_path / "o"))
    assert code == 2 and "cannot read ONNX model" in err


def test_pinned_model_with_calibration_prints_the_report(capsys, graphs, tmp_path: Path,
                                                         conv_feeds) -> None:
    cal = write_samples(tmp_path / "cal", conv_feeds(4), "cal")
    test = write_samples(tmp_path / "cal", conv_feeds(2, seed=9), "test")
    out_dir = tmp_path / "out"
    code, out, _ = _run(capsys, str(graphs["dyn"]), "--soc", "QCS6490", "--dim",
                        "x=1,3,8,8", "--calibration", str(cal), "--test-inputs", str(test),
                        "--out", str(out_dir))
    assert code == 0, out
    assert "SoC:      QCS6490 (HTP v68, simulator id 93)" in out
    assert "arch:     v68 (binary soc_type=QCS6490, vtcm_size=2097152)" in out
    assert "nodes on HTP / total: 13 / 13" in out
    assert "nodes not on the HTP: none" in out
    assert f"context model:  {out_dir / 'dyn.static_ctx.onnx'}" in out
    assert f"context binary: {out_dir / 'dyn.static_ctx_qnn.bin'}" in out
    assert "numerics: 2 held-out sample(s)" in out
    assert "  y sample 0: cosine " in out and "  y sample 1: cosine " in out
    assert out.rstrip().splitlines()[-1].startswith("PASSED: QCS6490")
    assert (out_dir / "dyn.static.onnx").is_file() and (out_dir / "sim_report.json").is_file()


def test_json_output_and_the_random_calibration_path(capsys, graphs, tmp_path: Path) -> None:
    code, out, _ = _run(capsys, str(graphs["conv"]), "--soc", "SM8550", "--json",
                        "--out", str(tmp_path))
    assert code == 0
    doc = json.loads(out)                       # nothing native leaked into stdout
    assert doc["passed"] and doc["random_calibration"] and doc["numerics"] is None
    assert doc["prepare"]["soc_type"] == "SM8550" and doc["prepare"]["arch"] == 73
    assert doc["prepare"]["nodes_on_htp"] == doc["prepare"]["nodes_total"]
    assert "sim.random_calibration" in {f["check"] for f in doc["findings"]}
    code, out, _ = _run(capsys, str(graphs["conv"]), "--soc", "SM8550",
                        "--out", str(tmp_path))
    assert "calibration: RANDOM data (no --calibration): prepare result only" in out


def test_fp16_graph_exit_1_on_qcs6490_naming_the_node_and_0_on_sm8550(capsys, graphs,
                                                                       tmp_path: Path) -> None:
    code, out, _ = _run(capsys, str(graphs["fp16"]), "--soc", "QCS6490",
                        "--out", str(tmp_path / "v68"))
    assert code == 1
    assert "  - node 'cast_in' of type Cast: QNN error code 3110" in out
    assert "[fp16.tensor]" in out and "FAILED: QCS6490" in out
    # No binary: the target's arch, said to be the target's, not "?".
    assert ("arch:     v68 (QCS6490's HTP; no context binary was built (prepare failed), "
            "so nothing was read back)") in out
    # The counts add up, all from the session's assignment record.
    m = re.search(r"nodes in the session: (\d+) = (\d+) on HTP \+ (\d+) rejected \+ (\d+) "
                  r"not on HTP without a logged reason", out)
    assert m, out
    total, on_htp, rejected, other = map(int, m.groups())
    assert on_htp + rejected + other == total and rejected == 2 and other == 0
    assert f"nodes on HTP / total: {on_htp} / {total}" in out
    assert "nodes not on the HTP: 2\n" in out
    assert out.count("  - node ") == 2
    # The Convert op the EP made for cast_in is named with it, not counted as a node.
    assert "- node 'cast_in_ort_qnn_ep_convert'" not in out
    assert "made for it failed too: 'cast_in_ort_qnn_ep_convert' (Convert" in out
    # Nodes onnxruntime added for the EP are named.
    assert re.search(r"\d+ inserted or rewritten by onnxruntime for the EP: '[^']+", out)
    assert f"prepare FAILED, {on_htp}/{total} nodes on HTP, 2 rejected" in out
    code, out, _ = _run(capsys, str(graphs["fp16"]), "--soc", "SM8550",
                        "--out", str(tmp_path / "v73"))
    assert code == 0 and "PASSED: SM8550" in out


def test_out_of_threshold_numerics_exit_1(capsys, graphs, tmp_path: Path, conv_feeds) -> None:
    cal = write_samples(tmp_path / "cal", conv_feeds(3), "cal")
    code, out, _ = _run(capsys, str(graphs["conv"]), "--soc", "QCS6490", "--calibration",
                        str(cal), "--samples", "1", "-t", "max_abs=1e-9",
                        "--out", str(tmp_path / "o"))
    assert code == 1
    assert "numerics: 1 calibration (no --test-inputs) sample(s)" in out
    assert "[compare.threshold] y sample 0: max_abs" in out


def test_default_out_folder_is_qnn_ci_out_model(capsys, graphs, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, str(graphs["conv"]), "--soc", "SM8550")
    assert code == 0
    assert f"context binary: {tmp_path / 'qnn-ci-out' / 'conv' / 'conv_ctx_qnn.bin'}" in out
    assert (tmp_path / "qnn-ci-out" / "conv" / "conv_ctx_qnn.bin").is_file()
