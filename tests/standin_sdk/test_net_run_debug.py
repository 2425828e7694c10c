"""The stand-in ``qnn-net-run --debug``: every layer's output beside the graph
outputs, in the converter's names and layout, with the backend's own numbers; and
the ``htp_layer_wrong`` fault that breaks one HTP layer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fixtures.qairt_standin.net_run import make_board, set_faults
from tests.board_run.conftest import INPUT_SHAPE, StandinBuild, standin_build, write_samples

LAYERS = {"/c1/Conv_output_0": "_c1_Conv_output_0", "r1": "r1", "gap": "gap", "flat": "flat"}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> StandinBuild:
    return standin_build(tmp_path_factory.mktemp("debug-build"))


@pytest.fixture(scope="module")
def reference(build: StandinBuild, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, dict[str, np.ndarray]]:
    """One sample's input list and the fp32 values of every layer (ONNX order)."""
    lst = write_samples(tmp_path_factory.mktemp("debug-in"), 1, seed=21)
    n, c, h, w = INPUT_SHAPE      # the board reads the raw input spatial-first
    x = np.fromfile(lst.read_text().split(":=")[1].strip(), np.float32).reshape(
        n, h, w, c).transpose(0, 3, 1, 2)
    model = onnx.load(str(build.model))
    model.graph.output.extend([onnx.ValueInfoProto(name=n) for n in LAYERS])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return lst, dict(zip(names, sess.run(None, {"x": x}), strict=True))


def _run(board: Path, build: StandinBuild, lst: Path, backend: str, out: Path,
         *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["LD_LIBRARY_PATH"] = str(board / "lib")
    return subprocess.run([str(board / "bin" / "qnn-net-run"), "--model", str(build.library),
                           "--backend", str(board / "lib" / backend), "--input_list",
                           str(lst), "--output_dir", str(out), *extra],
                          env=env, capture_output=True, text=True, timeout=120)


def _layer(folder: Path, key: str, onnx_shape: tuple[int, ...]) -> np.ndarray:
    data = np.fromfile(folder / f"{key}.raw", np.float32)
    if len(onnx_shape) == 4:     # the converter's spatial-first layout
        n, c, h, w = onnx_shape
        return data.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    return data.reshape(onnx_shape)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_debug_dumps_every_layer_in_converter_names_and_layout(
        build: StandinBuild, reference: tuple[Path, dict[str, np.ndarray]],
        tmp_path: Path) -> None:
    lst, ref = reference
    board = make_board(tmp_path / "board")
    r = _run(board, build, lst, "libQnnCpu.so", tmp_path / "cpu", "--debug")
    assert r.returncode == 0, r.stderr
    files = {p.relative_to(tmp_path / "cpu" / "Result_0").as_posix()
             for p in (tmp_path / "cpu").rglob("*.raw")}
    assert files == {f"{k}.raw" for k in LAYERS.values()} | {"logits.raw", "feat_map_0.raw"}
    for name, key in LAYERS.items():      # CPU backend: exact float32
        np.testing.assert_allclose(_layer(tmp_path / "cpu" / "Result_0", key,
                                          ref[name].shape), ref[name], rtol=1e-5, atol=1e-5)
    # without --debug: the graph outputs only
    r = _run(board, build, lst, "libQnnCpu.so", tmp_path / "plain")
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (tmp_path / "plain").rglob("*.raw")} == {"logits.raw",
                                                                     "feat_map_0.raw"}


def test_htp_layers_carry_quantization_and_the_broken_layer(
        build: StandinBuild, reference: tuple[Path, dict[str, np.ndarray]],
        tmp_path: Path) -> None:
    lst, ref = reference
    board = make_board(tmp_path / "board")
    r = _run(board, build, lst, "libQnnHtp.so", tmp_path / "htp", "--debug")
    assert r.returncode == 0, r.stderr
    res = tmp_path / "htp" / "Result_0"
    for name, key in LAYERS.items():      # quantized, but close
        got = _layer(res, key, ref[name].shape)
        assert not np.array_equal(got, ref[name])
        assert _cos(got, ref[name]) > 0.999
    set_faults(board, {"htp_layer_wrong": {"tensor": "r1", "amount": 1.0}})
    r = _run(board, build, lst, "libQnnHtp.so", tmp_path / "broken", "--debug")
    assert r.returncode == 0, r.stderr
    res = tmp_path / "broken" / "Result_0"
    assert _cos(_layer(res, "_c1_Conv_output_0", ref["/c1/Conv_output_0"].shape),
                ref["/c1/Conv_output_0"]) > 0.999        # before the broken layer: fine
    assert _cos(_layer(res, "r1", ref["r1"].shape), ref["r1"]) < 0.9
    # the CPU backend is not touched by an HTP fault
    r = _run(board, build, lst, "libQnnCpu.so", tmp_path / "cpu", "--debug")
    np.testing.assert_allclose(_layer(tmp_path / "cpu" / "Result_0", "r1", ref["r1"].shape),
                               ref["r1"], rtol=1e-5, atol=1e-5)


def test_slash_subfolders_layout_for_layers(build: StandinBuild,
                                            reference: tuple[Path, dict[str, np.ndarray]],
                                            tmp_path: Path) -> None:
    lst, _ = reference
    board = make_board(tmp_path / "board", faults={"slash_subfolders": True})
    r = _run(board, build, lst, "libQnnCpu.so", tmp_path / "out", "--debug")
    assert r.returncode == 0, r.stderr
    files = {p.relative_to(tmp_path / "out" / "Result_0").as_posix()
             for p in (tmp_path / "out").rglob("*.raw")}
    assert "c1/Conv_output_0.raw" in files and "feat/map_0.raw" in files
    assert "_c1_Conv_output_0.raw" not in files
