"""`qnn-ci inputs validate`: names, paths, sizes, and signs of synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.cli import main
from tests.core.graphs import scale_model, two_input_model


@pytest.fixture
def two(tmp_path: Path) -> Path:
    return two_input_model(tmp_path / "two.onnx")


def raw(tmp_path: Path, name: str, arr: np.ndarray) -> Path:
    p = tmp_path / name
    arr.tofile(p)
    return p


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["inputs", "validate", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_clean_list_with_header_and_plain_paths(tmp_path: Path, two: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    lines = ["#z"]
    for i in range(3):
        x = raw(tmp_path, f"x{i}.raw", rng.normal(size=(1, 4)).astype(np.float32))
        ids = raw(tmp_path, f"ids{i}.raw", rng.integers(0, 100, (1, 4)).astype(np.int64))
        lines.append(f"x:={x} ids:={ids}" if i < 2 else f"{x} {ids}")
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(lines) + "\n")
    code, out = run_json(capsys, str(lst), "--model", str(two))
    assert code == 0, out
    assert out["samples"] == 3 and out["clean"]
    assert out["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 4]},
                             {"name": "ids", "dtype": "int64", "shape": [1, 4]}]


def test_every_problem_is_flagged_by_line(tmp_path: Path, two: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    x = raw(tmp_path, "x.raw", rng.normal(size=(1, 4)).astype(np.float32))
    ids32 = raw(tmp_path, "ids32.raw", np.arange(4, dtype=np.int32))   # the int64 trap
    ids = raw(tmp_path, "ids.raw", np.arange(4, dtype=np.int64))
    zeros = raw(tmp_path, "zeros.raw", np.zeros((1, 4), np.float32))
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join([
        f"x:={x} ids:={ids32}",                 # 1: wrong dtype size
        f"x:={x}",                              # 2: missing ids
        f"x:={x} ids:={ids} mask:={ids}",       # 3: extra name; x identical to line 1
        f"x:=relative.raw ids:={ids}",          # 4: relative path
        f"x:={tmp_path / 'nope.raw'} ids:={ids}",  # 5: missing file
        f"x:={zeros} ids:={ids}",               # 6: all zeros
    ]) + "\n")
    code, out = run_json(capsys, str(lst), "--model", str(two))
    assert code == 1
    got = {(f["check"], f["message"].split(":")[0]) for f in out["findings"]}
    assert ("inputs.size", "line 1") in got
    assert ("inputs.missing", "line 2") in got
    assert ("inputs.unknown", "line 3") in got
    assert ("inputs.identical", "line 3") in got
    assert ("inputs.relative_path", "line 4") in got
    assert ("inputs.missing_file", "line 5") in got
    assert ("inputs.all_zero", "line 6") in got
    size = next(f for f in out["findings"] if f["check"] == "inputs.size")
    assert "16 bytes, expected 32" in size["message"] and "fits int32" in size["message"]


def test_dynamic_input_needs_dim_and_dims_are_checked(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = scale_model(tmp_path / "dyn.onnx", dims=["N", 4])
    x = raw(tmp_path, "x.raw", np.ones((2, 4), np.float32))
    lst = tmp_path / "l.txt"
    lst.write_text(f"x:={x}\n")
    assert main(["inputs", "validate", str(lst), "--model", str(model)]) == 2
    assert "has no static shape" in capsys.readouterr().err
    assert main(["inputs", "validate", str(lst), "--model", str(model), "--dim", "x=2,4"]) == 0
    capsys.readouterr()
    assert main(["inputs", "validate", str(lst), "--model", str(model), "--dim", "x=2"]) == 2
    assert "rank 1 but input 'x' has rank 2" in capsys.readouterr().err
    assert main(["inputs", "validate", str(lst), "--model", str(model), "--dim", "xs=2,4"]) == 2
    assert "no input 'xs' (did you mean 'x'?)" in capsys.readouterr().err


def test_bad_input_exits_2(tmp_path: Path, two: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inputs", "validate", str(tmp_path / "none.txt"), "--model", str(two)]) == 2
    assert "input list not found" in capsys.readouterr().err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["inputs", "validate", str(tmp_path / "none.txt"), "--model", str(bad)]) == 2
    assert "cannot read ONNX model" in capsys.readouterr().err


def test_nan_values_are_flagged(tmp_path: Path, two: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    x = np.array([[1.0, np.nan, 2.0, 3.0]], np.float32)
    xp = raw(tmp_path, "x.raw", x)
    ids = raw(tmp_path, "ids.raw", np.arange(4, dtype=np.int64))
    lst = tmp_path / "l.txt"
    lst.write_text(f"x:={xp} ids:={ids}\n")
    code, out = run_json(capsys, str(lst), "--model", str(two))
    assert code == 1
    assert [f["check"] for f in out["findings"]] == ["inputs.non_finite"]
    assert out["findings"][0]["message"] == "line 1: x has 1 NaN/Inf value(s) of 4"
