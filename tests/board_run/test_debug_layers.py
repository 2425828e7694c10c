"""The board diagnosis: a failing htp_vs_cpu is attributed from the comparisons the
stage made, and one ``qnn-net-run --debug`` run of the HTP backend names the first
diverging layer — through the real engine, the stand-in SDK and the stand-in board
over sshd, with one HTP layer broken by the board's ``htp_layer_wrong`` fault."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from fixtures.qairt_standin.net_run import set_faults
from qnn_ci.diagnose.names import map_debug_files, sanitize_chars
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import CalibrationSpec, DiagnosisSpec, ExportSpec, InputSpec, TargetSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.report import junit
from qnn_ci.report.summary import Row, markdown_summary, terminal_table
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, Board, build_cnn, write_samples

STAGES = ("static_shapes", "calibration", "dry_run", "convert", "model_lib", "so_load",
          "htp_vs_cpu")
BROKEN = "r1"                     # the Relu after the first Conv: its HTP result is wrong


def _run(board: Board, tmp_path: Path, **changes: Any) -> tuple[StageResult, ExportSpec]:
    model = build_cnn(tmp_path / "cnn.onnx")
    lst = write_samples(tmp_path / "cal", 6, seed=5)
    export = ExportSpec(
        name="cnn", model=model, manifest=tmp_path / "qnn-ci.yaml", line=1,
        inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(input_list=lst, samples=4),
        target=TargetSpec(soc="QCS6490", lib_target="aarch64-oe-linux-gcc11.2"),
        board="standin")
    export = replace(export, **changes)
    env = Environment(workdir=tmp_path / "qnn-ci-work", esdk_env=make_esdk(tmp_path / "esdk"),
                      boards={"standin": board.config},
                      environ={"PATH": "/usr/bin:/bin",
                               "QNN_SDK_ROOT": str(make_sdk(tmp_path / "sdk", "2.31.0")),
                               "QNN_CI_LOCK_DIR": str(tmp_path / "locks")})
    results = {r.stage: r for r in
               Pipeline([export], env, stages=load_stages(STAGES)).run_export("cnn")}
    return results["htp_vs_cpu"], export


def test_broken_htp_layer_is_attributed_to_the_htp_and_named(board: Board,
                                                             tmp_path: Path) -> None:
    # the CPU backend runs the converter's quantized graph: the QDQ-on-CPU role
    set_faults(board.folder, {"cpu_quantized": True,
                              "htp_layer_wrong": {"backend": "htp", "tensor": BROKEN}})
    r, export = _run(board, tmp_path)
    assert r.status == Status.FAILED, r.failure_text()
    p = r.properties
    assert p["diagnosis.attribution"] == "htp", p.get("diagnosis.error")
    assert p["diagnosis.path"] == "board-debug"
    assert p["diagnosis.first_divergence.tensor"] == BROKEN
    assert p["diagnosis.first_divergence.op_type"] == "Relu"
    assert p["diagnosis.cost.debug_run_s"] > 0 and p["diagnosis.cost.debug_samples"] == 1
    assert "CPU backend worst cosine" in p["diagnosis.detail"]
    # the per-layer report: every float layer of the model, in topological order
    d = r.data["diagnosis"]
    layers = [m["tensor"] for m in d["layers"]]
    assert layers == ["/c1/Conv_output_0", "r1", "feat/map:0", "gap", "flat", "logits"]
    by_name = {m["tensor"]: m for m in d["layers"]}
    assert by_name["/c1/Conv_output_0"]["cosine"] > 0.999     # before the break: fine
    assert by_name[BROKEN]["cosine"] < 0.9
    assert d["worst_jumps"][0]["tensor"] == BROKEN
    for kind in ("csv", "json", "png"):
        assert Path(d["artefacts"][kind]).is_file()
        assert Path(r.artefacts[f"diagnosis_{kind}"]).is_file()
        assert p[f"diagnosis.artefact.{kind}"] == d["artefacts"][kind]
    rows = list(csv.DictReader(Path(d["artefacts"]["csv"]).open()))
    assert [row["tensor"] for row in rows] == layers
    assert json.loads(Path(d["artefacts"]["json"]).read_text())["first_divergence"][
        "tensor"] == BROKEN
    # the texts: pytest failure text / JUnit output, the terminal table, the job summary
    text = r.failure_text()
    assert "diagnosis: htp loss" in text and f"first divergence at {BROKEN!r}" in text
    props = junit.testcase(export.manifest, "cnn", 1, r).properties      # type: ignore[attr-defined]
    assert props["qnn.diagnosis.attribution"] == "htp"
    assert props["qnn.diagnosis.first_divergence.tensor"] == BROKEN
    row = Row(export.manifest, "cnn", 1, r)
    assert "diagnosis: htp loss" in terminal_table([row])
    md = markdown_summary([row], root=tmp_path)
    assert "**Diagnosis of `htp_vs_cpu`**" in md and f"`{BROKEN}` (Relu" in md
    assert "[layers.csv](qnn-ci-work/cnn/htp_vs_cpu/diagnosis/layers.csv)" in md
    # the board was left clean after the extra run
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]


def test_float_cpu_backend_cannot_attribute_but_still_names_the_layer(
        board: Board, tmp_path: Path) -> None:
    """The stand-in CPU backend computes in float by default (the fp32 role): the
    board cannot tell quantization from the HTP, and says so; the per-layer report
    still finds the broken layer, here in the sub-folder layout a ``/`` makes."""
    set_faults(board.folder, {"slash_subfolders": True,
                              "htp_layer_wrong": {"backend": "htp", "tensor": BROKEN}})
    r, _ = _run(board, tmp_path)
    assert r.status == Status.FAILED
    assert r.properties["diagnosis.attribution"] == "none"
    assert "cannot tell quantization loss from HTP loss" in r.properties["diagnosis.detail"]
    assert r.properties["diagnosis.first_divergence.tensor"] == BROKEN
    debug = tmp_path / "qnn-ci-work" / "cnn" / "htp_vs_cpu" / "diagnosis" / "board" / "out_htp"
    assert (debug / "Result_0" / "c1" / "Conv_output_0.raw").is_file()   # nested layout


def test_diagnosis_disabled_runs_nothing(board: Board, tmp_path: Path) -> None:
    set_faults(board.folder, {"htp_layer_wrong": {"backend": "htp", "tensor": BROKEN}})
    r, _ = _run(board, tmp_path, diagnosis=DiagnosisSpec(enabled=False))
    assert r.status == Status.FAILED
    assert not [k for k in r.properties if k.startswith("diagnosis.")]
    assert "diagnosis" not in r.data and "diagnosis:" not in r.failure_text()
    assert not (tmp_path / "qnn-ci-work" / "cnn" / "htp_vs_cpu" / "diagnosis").exists()


@pytest.mark.parametrize(("keys", "matched"), [
    (["_c1_Conv_output_0", "r1", "feat_map_0"],
     {"_c1_Conv_output_0": "/c1/Conv_output_0", "r1": "r1", "feat_map_0": "feat/map:0"}),
    (["c1/Conv_output_0", "feat/map_0"],                         # a `/` made folders
     {"c1/Conv_output_0": "/c1/Conv_output_0", "feat/map_0": "feat/map:0"}),
    (["cnn/_c1_Conv_output_0", "cnn/logits"],                     # a graph-name level
     {"cnn/_c1_Conv_output_0": "/c1/Conv_output_0", "cnn/logits": "logits"}),
])
def test_debug_file_names_map_back_to_onnx_names(keys: list[str],
                                                 matched: dict[str, str]) -> None:
    names = ["x", "/c1/Conv_output_0", "r1", "feat/map:0", "gap", "flat", "logits"]
    result = map_debug_files(names, keys)
    assert result.matched == matched
    assert not result.collisions and not result.unmatched


def test_collisions_and_strangers_are_named_never_guessed() -> None:
    # "a/b" and "a.b" both sanitise to "a_b": the converter made "a_b" and "a_b_1"
    result = map_debug_files(["a/b", "a.b", "7up"], ["a_b", "a_b_1", "_7up", "zz",
                                                      "_7up_native"])
    assert result.collisions == {"a_b": ["a.b", "a/b"]}
    assert result.matched == {"_7up": "7up"}
    assert sorted(result.unmatched) == ["a_b_1", "zz"]
    assert result.native_skipped == ["_7up_native"]
    notes = " ".join(result.notes())
    assert "a_b -> a.b, a/b" in notes and "a_b_1, zz" in notes
    assert sanitize_chars("a..b") == "a__b" and sanitize_chars("3x") == "_3x"


def test_debug_files_read_back_in_onnx_order_and_the_rest_is_named(tmp_path: Path) -> None:
    import numpy as np

    from qnn_ci.diagnose.board import read_debug_layers

    res = tmp_path / "Result_0"
    (res / "c1").mkdir(parents=True)
    nchw = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    nchw.transpose(0, 2, 3, 1).tofile(res / "_conv_out.raw")     # listed NHWC
    nchw.tofile(res / "c1" / "same.raw")                         # listed in ONNX order
    nchw.transpose(0, 2, 3, 1).tofile(res / "unlisted.raw")      # not in the _net.json
    np.zeros(7, np.float32).tofile(res / "short.raw")
    np.zeros(2, np.float32).tofile(res / "shape_idx.raw")        # an int tensor's file
    shapes = {"/conv/out": (2, 3, 4, 5), "c1/same": (2, 3, 4, 5), "unlisted": (2, 3, 4, 5),
              "short": (2, 3)}
    dims = {"_conv_out": [2, 4, 5, 3], "c1_same": [2, 3, 4, 5]}
    layers = read_debug_layers(res, shapes, dims, ["x", "w", "shape_idx", *shapes])
    assert sorted(layers.values) == ["/conv/out", "c1/same", "unlisted"]
    for name in layers.values:
        np.testing.assert_array_equal(layers.values[name], nchw)
    notes = " ".join(layers.notes)
    assert "1 --debug file(s) of the wrong size were left out: short (28 bytes" in notes
    assert "not float layers (inputs, weights, integer tensors) and were not compared: " \
        "shape_idx" in notes
    assert "1 rank-4 layer(s) not in the converter's _net.json were read as spatial-first" \
        in notes
