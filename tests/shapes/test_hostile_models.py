"""Hostile ONNX models and arguments for every place that loads a user's model
(qnn_ci.model.onnx_io, the shapes stage, `qnn-ci shapes`, `qnn-ci encodings --model`,
manifests' model signature): an unknown element type, dims too large to test,
a dim beyond int64, names that are not UTF-8, truncated and bit-flipped files,
FIFOs and oversized files. Each is one line or a finding -- never a traceback."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.cli import main
from qnn_ci.errors import UserError
from qnn_ci.model.onnx_io import MODEL_CAP, graph_inputs, load_model, model_signature
from qnn_ci.sdk.encodings_coverage import load_model as load_for_encodings
from qnn_ci.shapes import analyse_and_pin

from .conftest import make_model, save, tensor

LOADERS: dict[str, Callable[[Path], object]] = {
    "onnx_io": load_model, "encodings": load_for_encodings, "signature": model_signature,
    "shapes": lambda p: analyse_and_pin(p, {}, opset=None, out_path=None)}


def _relu(elem: int = TensorProto.FLOAT, dims: list[int | str] | None = None) -> onnx.ModelProto:
    dims = dims or ["n", 4]
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      [tensor("x", dims, elem)], [tensor("y", dims, elem)])


def _one_line(call: Callable[[], object]) -> str:
    with pytest.raises(UserError) as info:
        call()
    line = info.value.oneline()
    assert line and "\n" not in line
    return line


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_unknown_element_type(tmp_path: Path, loader: str) -> None:
    model = _relu()
    model.graph.input[0].type.tensor_type.elem_type = 999
    path = save(model, tmp_path / "e999.onnx")
    line = _one_line(lambda: LOADERS[loader](path))
    assert line == (f"cannot read ONNX model {path}: graph input 'x' has unknown element "
                    "type 999 (not an ONNX TensorProto data type)")


def test_unknown_element_type_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _relu()
    model.graph.output[0].type.tensor_type.elem_type = 999
    path = save(model, tmp_path / "e999.onnx")
    assert main(["shapes", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "graph output 'y' has unknown element type 999" in err


def test_dims_too_large_to_test_are_a_finding(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = save(_relu(dims=["n", "m"]), tmp_path / "dyn.onnx")
    report = analyse_and_pin(path, {"x": (2 ** 31, 2 ** 31)}, opset=None, out_path=None)
    reasons = [f.message for f in report.findings if f.check == "shapes.equivalence"]
    assert len(reasons) == 1
    assert "input 'x' [2147483648, 2147483648] float32" in reasons[0]
    assert "too large to test" in reasons[0]
    assert main(["shapes", str(path), "--dim", f"x={2 ** 31},{2 ** 31}", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["equivalent"] is None


@pytest.mark.parametrize(("dim", "why"), [
    (str(2 ** 63), "dim 9223372036854775808 is larger than ONNX allows"),
    ("9" * 5000, "is larger than ONNX allows"),
    ("٣", "is not an integer"),
])
def test_dims_beyond_int64(tmp_path: Path, capsys: pytest.CaptureFixture[str], dim: str,
                           why: str) -> None:
    path = save(_relu(), tmp_path / "dyn.onnx")
    assert main(["shapes", str(path), "--dim", f"x={dim},4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and "--dim x" in err


def test_pin_beyond_int64_in_the_library(tmp_path: Path) -> None:
    path = save(_relu(), tmp_path / "dyn.onnx")
    line = _one_line(lambda: analyse_and_pin(path, {"x": (2 ** 63, 4)}, opset=None,
                                             out_path=None))
    assert "larger than ONNX allows" in line


def _patch_name(model: onnx.ModelProto, old: bytes) -> bytes:
    """The serialized model with one byte of ``old`` made invalid UTF-8 (same length,
    so the protobuf stays well formed)."""
    data = model.SerializeToString()
    assert old in data
    return data.replace(old, old[:1] + b"\xff" + old[2:])


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_tensor_name_not_utf8(tmp_path: Path, loader: str) -> None:
    model = make_model([helper.make_node("Relu", ["inputx"], ["y"], name="relu")],
                       [tensor("inputx", [1, 4])], [tensor("y", [1, 4])])
    path = tmp_path / "utf.onnx"
    path.write_bytes(_patch_name(model, b"inputx"))
    line = _one_line(lambda: LOADERS[loader](path))
    assert line.startswith(f"cannot read ONNX model {path}: ")
    assert "is not valid UTF-8 (b'i\\xffputx')" in line


def test_dim_param_not_utf8_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "utf.onnx"
    path.write_bytes(_patch_name(_relu(dims=["batchdim", 4]), b"batchdim"))
    assert main(["shapes", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a dim_param of input 'x'" in err and "UTF-8" in err


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_truncated_and_bit_flipped_models(cls_model: Path, tmp_path: Path, loader: str) -> None:
    data = cls_model.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 3])
    assert _one_line(lambda: LOADERS[loader](cut)).startswith(f"cannot read ONNX model {cut}: ")
    flipped = bytearray(data)
    flipped[3] ^= 0xFF                    # the length of the first string field
    bad = tmp_path / "flip.onnx"
    bad.write_bytes(bytes(flipped))
    assert _one_line(lambda: LOADERS[loader](bad)).startswith(f"cannot read ONNX model {bad}")


def test_fifo_model_is_refused_quickly(tmp_path: Path) -> None:
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.setdefault("rc", main(["shapes", str(fifo)])),
                              daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail("qnn-ci shapes waited on a FIFO")
    assert box["rc"] == 2


def test_sparse_model_above_two_gib(tmp_path: Path) -> None:
    path = tmp_path / "huge.onnx"
    with path.open("wb") as fh:
        fh.truncate(MODEL_CAP + 1)
    assert "bigger models keep weights in external data" in _one_line(lambda: load_model(path))


def test_external_data_with_a_bad_offset(tmp_path: Path) -> None:
    model = _relu(dims=[1, 4])
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    model.graph.initializer.append(weight)
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True,
              location="m.data", size_threshold=0)
    loaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for entry in loaded.graph.initializer[0].external_data:
        if entry.key == "offset":
            entry.value = "12abc"
    onnx.save(loaded, str(tmp_path / "bad.onnx"))
    line = _one_line(lambda: analyse_and_pin(tmp_path / "bad.onnx", {}, opset=None,
                                             out_path=tmp_path / "out.onnx"))
    assert "external_data offset '12abc' is not a byte count" in line


def test_graph_inputs_of_types_numpy_lacks(tmp_path: Path) -> None:
    path = save(_relu(elem=TensorProto.FLOAT8E4M3FN, dims=[1, 4]), tmp_path / "f8.onnx")
    assert [i.name for i in graph_inputs(load_model(path))] == ["x"]
    report = analyse_and_pin(path, {}, opset=None, out_path=None)
    json.dumps(report.to_dict())


def test_feed_files_that_are_not_arrays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(_relu(dims=[1, 4]), tmp_path / "m.onnx")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    assert main(["shapes", str(path), "--feed", f"x={bad}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--feed x: cannot read" in err
    assert main(["shapes", str(path), "--feed", "x=" + "9" * 5000]) == 2
    assert "too large for an integer input" in capsys.readouterr().err
