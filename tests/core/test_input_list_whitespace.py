"""QNN's input list separates inputs by whitespace and samples by newlines, and marks
names with `:=`: a path or tensor name that holds one of those cannot be written.
Calibration (writing), `qnn-ci inputs validate` and reading a user's list refuse it
at once, naming the path or the input and what to do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.calibration.input_list import read_input_list, write_input_list
from qnn_ci.calibration.list_tokens import UnwritableInputList
from qnn_ci.cli import main
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.stage import Environment
from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.registry import load_stages
from tests.core.graphs import scale_model
from tests.sim.conftest import REASON as SIM_REASON

GEN = """
import numpy as np

def gen(count):
    rng = np.random.default_rng(0)
    for _ in range(count):
        yield {NAME: rng.normal(size=(1, 4)).astype(np.float32)}
"""
# Every kind of whitespace str.split()/splitlines() cut at, not only the space.
WHITESPACE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028",
              "\u3000"]


def model_with_input(path: Path, name: str) -> Path:
    """y = Relu(<name>) with one float input [1, 4], named as given."""
    graph = helper.make_graph(
        [helper.make_node("Relu", [name], ["y"], name="relu")], "named",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def calibrate(folder: Path, calibration: str, *, workdir: Path | None = None,
              stages: tuple[str, ...] = ("static_shapes", "calibration"),
              extra: str = "") -> dict[str, StageResult]:
    manifest = folder / "qnn-ci.yaml"
    manifest.write_text("exports:\n  - name: a\n    model: m.onnx\n"
                        f"    calibration: {calibration}\n{extra}")
    env = Environment(workdir=workdir or folder / "work")
    pipeline = Pipeline(load_manifest(manifest).exports, env, stages=load_stages(stages))
    return {r.stage: r for r in pipeline.run_export("a")}


def raws(folder: Path, n: int = 2) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    paths = []
    for i in range(n):
        p = folder / f"x{i}.raw"
        rng.normal(size=(1, 4)).astype(np.float32).tofile(p)
        paths.append(p)
    return paths


def validate(lst: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["inputs", "validate", str(lst), "--model", str(model)])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def test_a_work_folder_with_a_space_fails_calibration_naming_the_option(
        tmp_path: Path) -> None:
    folder = tmp_path / "my project"
    folder.mkdir()
    scale_model(folder / "m.onnx", dims=[1, 4])
    (folder / "gens.py").write_text(GEN.replace("NAME", "'x'"))
    results = calibrate(folder, "{generator: 'gens:gen', samples: 2, held_out: 0}",
                        stages=("static_shapes", "calibration", "sim_npu"),
                        extra="    target: {soc: SM8550}\n")
    cal = results["calibration"]
    assert cal.status == Status.ERROR
    assert f"the work folder '{folder / 'work' / 'a' / 'calibration'}' contains a space" \
        in cal.summary
    assert "use --workdir (qnn-ci run) or --qnn-workdir (pytest)" in cal.summary
    assert cal.summary.startswith(f"{folder / 'qnn-ci.yaml'}:2: ")
    assert not (folder / "work" / "a" / "calibration" / "input_list.txt").exists()
    # The stage after it is blocked by the real cause (it used to fail with an
    # unrelated "mixes `name:=path` entries and plain paths").
    assert results["sim_npu"].summary == (SIM_REASON or "blocked by a::calibration")
    # The same project with a work folder elsewhere calibrates.
    ok = calibrate(folder, "{generator: 'gens:gen', samples: 2, held_out: 0}",
                   workdir=tmp_path / "work")["calibration"]
    assert ok.status == Status.PASSED, ok.failure_text()


@pytest.mark.parametrize("named", [True, False])
def test_a_user_input_list_in_a_folder_with_a_space_is_refused_naming_the_path(
        tmp_path: Path, named: bool, capsys: pytest.CaptureFixture[str]) -> None:
    model = scale_model(tmp_path / "m.onnx", dims=[1, 4])
    paths = raws(tmp_path / "my data")
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{'x:=' if named else ''}{p}\n" for p in paths))
    want = f"path '{paths[0]}' contains a space"
    advice = "move the raw files to a folder without whitespace"
    # reading it
    with pytest.raises(UnwritableInputList) as err:
        read_input_list(lst, ["x"])
    assert want in str(err.value) and advice in str(err.value)
    assert str(err.value).startswith(f"{lst}:1: ")
    # `qnn-ci inputs validate`: one line, exit 2
    code, err_text = validate(lst, model, capsys)
    assert code == 2 and want in err_text and "\n" not in err_text
    # the calibration stage reading it
    cal = calibrate(tmp_path, "{input_list: list.txt}")["calibration"]
    assert cal.status == Status.ERROR and want in cal.summary and advice in cal.summary


def test_a_two_input_plain_list_split_by_a_space_is_named_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two plain entries for two inputs parse — as the wrong paths: validate says why."""
    from tests.core.graphs import two_input_model

    model = two_input_model(tmp_path / "two.onnx")
    (x,) = raws(tmp_path / "my data", 1)
    lst = tmp_path / "list.txt"
    lst.write_text(f"{x}\n")
    code, err_text = validate(lst, model, capsys)
    assert code == 2 and f"path '{x}' contains a space" in err_text


def test_a_list_that_only_mixes_entries_keeps_its_own_message(tmp_path: Path) -> None:
    (x0, x1) = raws(tmp_path / "data")
    lst = tmp_path / "list.txt"
    lst.write_text(f"x:={x0} {x1}\n")
    with pytest.raises(UserError) as err:
        read_input_list(lst, ["x"])
    assert not isinstance(err.value, UnwritableInputList)
    assert "mixes `name:=path` entries and plain paths" in str(err.value)


@pytest.mark.parametrize(("name", "problem"), [
    ("in put", "contains a space"),
    ("in\nencoder_out:=/etc/passwd", "contains a newline"),
    ("in\tput", "contains a tab"),
    ("in\u2028put", "contains whitespace '\\u2028'"),
    ("a:=b", "contains ':='"),
    ("#x", "starts with '#'"),
])
def test_a_tensor_name_no_list_can_hold_is_refused_everywhere(
        tmp_path: Path, name: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    model = model_with_input(tmp_path / "m.onnx", name)
    assert [i.name for i in onnx.load(model).graph.input] == [name]
    (tmp_path / "gens.py").write_text(GEN.replace("NAME", repr(name)))
    want = f"graph input {name!r} {problem}"
    # calibration refuses before writing anything
    cal = calibrate(tmp_path, "{generator: 'gens:gen', samples: 2, held_out: 0}")
    assert cal["static_shapes"].status == Status.PASSED, cal["static_shapes"].failure_text()
    assert cal["calibration"].status == Status.ERROR
    assert want in cal["calibration"].summary
    assert "rename the input in the model" in cal["calibration"].summary
    assert "\n" not in cal["calibration"].summary
    assert not (tmp_path / "work" / "a" / "calibration" / "raw").exists()
    # `qnn-ci inputs validate` on any list for that model
    (x,) = raws(tmp_path / "data", 1)
    lst = tmp_path / "list.txt"
    lst.write_text(f"{x}\n")
    code, err_text = validate(lst, model, capsys)
    assert code == 2 and want in err_text
    # reading and writing a list for it
    with pytest.raises(UnwritableInputList, match="rename the input"):
        read_input_list(lst, [name])
    out = tmp_path / "out.txt"
    with pytest.raises(UnwritableInputList):
        write_input_list(out, [{name: x}], [name])
    assert not out.exists()


@pytest.mark.parametrize("ws", WHITESPACE)
def test_writing_refuses_every_whitespace_in_a_path(tmp_path: Path, ws: str) -> None:
    folder = tmp_path / f"a{ws}b"
    folder.mkdir()
    p = folder / "x.raw"
    p.write_bytes(bytes(16))
    out = tmp_path / "list.txt"
    with pytest.raises(UnwritableInputList) as err:
        write_input_list(out, [{"x": p}], ["x"])
    assert "contains" in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()
    # a clean path writes a list that reads back as written
    clean = tmp_path / "x.raw"
    clean.write_bytes(bytes(16))
    write_input_list(out, [{"x": clean}], ["x"])
    assert read_input_list(out, ["x"]) == [{"x": clean}]
