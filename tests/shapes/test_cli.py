"""`qnn-ci shapes` through qnn_ci.cli.main: exit codes, --json, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from qnn_ci.cli import main

from .conftest import make_model, save, tensor


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    model = make_model([helper.make_node("Relu", ["input_ids"], ["h"], name="relu"),
                        helper.make_node("Neg", ["h"], ["y"], name="neg")],
                       [tensor("input_ids", ["batch", 4, "?"])], [tensor("y", ["batch", 4, "?"])])
    return save(model, tmp_path / "tiny.onnx")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["shapes", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------- clean and findings

def test_json_clean_exit_0(capsys: pytest.CaptureFixture[str], tiny: Path,
                           tmp_path: Path) -> None:
    out_model = tmp_path / "tiny.static.onnx"
    rc, out, _ = _run(capsys, str(tiny), "--dim", "input_ids=2,4,5", "-o", str(out_model),
                      "--json")
    assert rc == 0
    d = json.loads(out)
    for key in ("inputs", "outputs", "dynamic_tensors", "unshaped_tensors", "filled_tensors",
                "static", "equivalent", "output_model"):
        assert key in d
    (inp,) = d["inputs"]
    assert inp["name"] == "input_ids" and inp["dtype"] == "float32"
    assert [k["kind"] for k in inp["dims"]] == ["symbolic", "static", "symbolic"]
    assert inp["dims"][2]["param"] == "?"
    assert inp["shape"] == [2, 4, 5] and d["outputs"][0]["shape"] == [2, 4, 5]
    assert d["static"] is True and d["equivalent"] is True
    assert d["output_model"] == str(out_model) and out_model.is_file()


def test_text_output(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    rc, out, _ = _run(capsys, str(tiny), "--dim", "input_ids=1,4,3")
    assert rc == 0
    assert "input_ids: float32 ['batch', 4, '?'] -> [1, 4, 3]" in out
    assert out.strip().splitlines()[-1] == "static: 2 tensors, 0 filled from onnxruntime, " \
                                           "equivalent"


def test_findings_exit_1_and_model_still_written(capsys: pytest.CaptureFixture[str], tiny: Path,
                                                 tmp_path: Path) -> None:
    out_model = tmp_path / "partial.onnx"
    rc, out, _ = _run(capsys, str(tiny), "-o", str(out_model), "--json")
    assert rc == 1
    d = json.loads(out)
    assert d["static"] is False and d["equivalent"] is None
    assert {t["name"] for t in d["dynamic_tensors"]} == {"h", "y"}
    assert d["dynamic_tensors"][0] == {"name": "h", "graph": "main", "producer": "relu",
                                       "op_type": "Relu", "dims": ["'batch'", "4", "'?'"]}
    msgs = [f["message"] for f in d["findings"] if f["check"] == "shapes.input"]
    assert msgs and "--dim input_ids=<d0>,4,<d2>" in msgs[0]
    assert out_model.is_file()


def test_text_lists_dynamic_tensors_with_producer(capsys: pytest.CaptureFixture[str],
                                                  tiny: Path) -> None:
    rc, out, _ = _run(capsys, str(tiny))
    assert rc == 1
    assert "still dynamic (2):" in out
    assert "  h ['batch', 4, '?'] [main; from relu, Relu]" in out
    assert "error: [shapes.input] input 'input_ids' is dynamic" in out


def test_real_cls_json(capsys: pytest.CaptureFixture[str], cls_model: Path,
                       tmp_path: Path) -> None:
    rc, out, _ = _run(capsys, str(cls_model), "--dim", "x=1,3,48,192", "--json",
                      "-o", str(tmp_path / "cls.onnx"))
    assert rc == 0
    d = json.loads(out)
    assert d["outputs"][0]["dims"][0]["kind"] == "minus_one"
    assert d["outputs"][0]["shape"] == [1, 2]
    assert d["filled_tensors"] and all({"name", "graph", "producer"} <= set(f)
                                       for f in d["filled_tensors"])


def test_real_vad_with_feed_fails_with_reason(capsys: pytest.CaptureFixture[str],
                                              vad_model: Path) -> None:
    rc, out, _ = _run(capsys, str(vad_model), "--dim", "input=1,512", "--dim",
                      "state=2,1,128", "--feed", "sr=16000", "--no-fill")
    assert rc == 1
    assert "does not load in onnxruntime" in out and "LSTM" in out


def test_feed_from_npy(capsys: pytest.CaptureFixture[str], tiny: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 4, 2), np.float32))
    rc, out, _ = _run(capsys, str(tiny), "--dim", "input_ids=1,4,2", "--feed",
                      f"input_ids={tmp_path / 'x.npy'}", "--json")
    assert rc == 0 and json.loads(out)["equivalent"] is True


def test_opset_flag(capsys: pytest.CaptureFixture[str], tiny: Path, tmp_path: Path) -> None:
    out_model = tmp_path / "o17.onnx"
    rc, out, _ = _run(capsys, str(tiny), "--dim", "input_ids=1,4,2", "--opset", "17",
                      "-o", str(out_model), "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["opset"] == {"from": 13, "to": 17}
    assert onnx.load(str(out_model)).opset_import[0].version == 17


# ---------------------------------------------------------------- bad input: exit 2

def _bad(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("qnn-ci shapes: error: ")
    return lines[0]


def test_bad_missing_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "model not found" in _bad(capsys, str(tmp_path / "nope.onnx"))


def test_bad_unreadable_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xfe this is not protobuf \x00\x01")
    assert "cannot read ONNX model" in _bad(capsys, str(junk))


def test_bad_empty_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert "not an ONNX model" in _bad(capsys, str(empty))


def test_bad_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "not a file" in _bad(capsys, str(tmp_path))


def test_bad_unknown_input_did_you_mean(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    line = _bad(capsys, str(tiny), "--dim", "input_id=1,4,2")
    assert "--dim input_id: the model has no input 'input_id' (did you mean 'input_ids'?)" \
        in line
    assert str(tiny) in line


def test_bad_rank_mismatch(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    line = _bad(capsys, str(tiny), "--dim", "input_ids=1,4")
    assert "--dim input_ids: 2 dims [1, 4] but input 'input_ids' has rank 3" in line


@pytest.mark.parametrize("dims", ["1,4,x", "1,4,2.5", "1,,2"])
def test_bad_non_integer_dim(capsys: pytest.CaptureFixture[str], tiny: Path, dims: str) -> None:
    assert "is not an integer" in _bad(capsys, str(tiny), "--dim", f"input_ids={dims}")


def test_bad_zero_dim(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    assert "must be a positive integer" in _bad(capsys, str(tiny), "--dim", "input_ids=0,4,2")


def test_bad_fixed_dim_changed(capsys: pytest.CaptureFixture[str], tiny: Path) -> None:
    line = _bad(capsys, str(tiny), "--dim", "input_ids=1,5,2")
    assert "dim 1 of input 'input_ids' is fixed at 4 in the model, got 5" in line


@pytest.mark.parametrize(("argv", "text"), [
    (["--dim", "input_ids"], "expected INPUT=d0,d1,..."),
    (["--dim", "input_ids=1,4,2", "--dim", "input_ids=1,4,3"], "given twice"),
    (["--opset", "abc"], "--opset: 'abc' is not an integer opset"),
    (["--opset", "3"], "opset 3 is not supported"),
    (["--opset", "99"], "opset 99 is not supported"),
    (["--feed", "input_ids=/no/such.npy"], "--feed input_ids: file not found"),
    (["--feed", "nosuch=1"], "--feed nosuch: the model has no input 'nosuch'"),
])
def test_bad_flags(capsys: pytest.CaptureFixture[str], tiny: Path, argv: list[str],
                   text: str) -> None:
    full = [str(tiny), *argv]
    if not any(a.startswith("input_ids=1,4") for a in argv):
        full += ["--dim", "input_ids=1,4,2"]
    assert text in _bad(capsys, *full)
