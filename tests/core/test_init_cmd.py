"""`qnn-ci init`: the manifest it writes loads with the project's loader and passes
`static_shapes` through the real CLI as written (a model built here with a dynamic
batch and an int64 input; real models from the wheels), the calibration skeleton
refuses to make data up, the workflow is valid and lints clean, and nothing existing
is ever overwritten."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.cli import main
from qnn_ci.cli.init_files import yaml_scalar
from qnn_ci.manifest.loader import load_manifest


def classifier(path: Path, *, ids_name: str = "ids", batch: str = "N",
               probs_name: str = "probs") -> Path:
    """logits = x @ W + mean(E[ids]); probs = Softmax(logits); label = ArgMax(logits).
    x float32 [batch, 8], ids int64 [batch, 'seq'] (both dims free in the model)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((10, 3)).astype(np.float32), "E")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Gather", ["E", ids_name], ["emb"]),
             helper.make_node("ReduceMean", ["emb"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("Add", ["xw", "pooled"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["soft"], axis=-1),
             helper.make_node("Identity", ["soft"], [probs_name]),
             helper.make_node("ArgMax", ["logits"], ["label"], axis=-1, keepdims=0)]
    graph = helper.make_graph(
        nodes, "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8]),
         helper.make_tensor_value_info(ids_name, TensorProto.INT64, [batch, "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3]),
         helper.make_tensor_value_info(probs_name, TensorProto.FLOAT, [batch, 3]),
         helper.make_tensor_value_info("label", TensorProto.INT64, [batch])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def init(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["init", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def static_shapes(capsys: pytest.CaptureFixture[str], manifest: Path, work: Path
                  ) -> tuple[int, str, dict[str, ET.Element]]:
    junit = work / "junit.xml"
    status = main(["run", str(manifest), "--stage", "static_shapes", "--workdir", str(work),
                   "--junit", str(junit)])
    out = capsys.readouterr().out
    cases = {c.get("name", ""): c for c in ET.parse(junit).getroot().iter("testcase")}
    return status, out, cases


def test_built_model_manifest_loads_and_passes_static_shapes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = classifier(tmp_path / "my model-v2.onnx")
    out_dir = tmp_path / "models"
    status, out, err = init(capsys, model, "--soc", "qcs6490", "--out", out_dir)
    assert status == 0, err
    assert err == ""
    assert "static_shapes passes with these sizes" in out
    assert "next: qnn-ci run" in out and "--stage static_shapes" in out

    manifest = load_manifest(out_dir / "qnn-ci.yaml")
    (export,) = manifest.exports
    assert export.name == "my_model-v2"                    # the stem, made a valid name
    assert export.model == model.resolve()
    assert export.target.soc == "QCS6490"
    x, ids = export.inputs["x"], export.inputs["ids"]
    assert (x.shape, x.dtype, x.encoding) == ((1, 8), "float32", None)
    # 'N' is batch-like: 1; 'seq' is not: a guess, checked
    assert (ids.shape, ids.dtype, ids.encoding) == ((1, 32), "int64", "other")
    assert export.calibration.generator == "calib_my_model_v2:samples"
    assert export.thresholds.default["cosine"] == 0.99
    assert export.thresholds.per_output == {"probs": {"max_abs": 0.05}}   # Softmax output

    text = (out_dir / "qnn-ci.yaml").read_text()
    assert ("# TODO: x dim 0: the model leaves this dim free (dim_param 'N'); 1 here: pin "
            "the size you ship") in text
    assert "# TODO: ids dim 1: the model leaves this dim free (dim_param 'seq'); 32 here" in text
    assert "# label: int64 output" in text

    status, run_out, cases = static_shapes(capsys, out_dir / "qnn-ci.yaml", tmp_path / "w")
    assert status == 0, run_out
    case = cases["my_model-v2::static_shapes"]
    assert case.find("failure") is None and case.find("skipped") is None
    assert case.find("error") is None


def test_dims_given_are_written_without_todo(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    model = classifier(tmp_path / "m.onnx")
    status, _out, err = init(capsys, model, "--dim", "x=4,8", "--name", "clf", "--out",
                             tmp_path)
    assert status == 0, err
    export = load_manifest(tmp_path / "qnn-ci.yaml").export("clf")
    # 'N' is 4 wherever it appears: --dim gave it for x
    assert export.inputs["x"].shape == (4, 8) and export.inputs["ids"].shape == (4, 32)
    text = (tmp_path / "qnn-ci.yaml").read_text()
    assert "TODO: x dim" not in text and "TODO: ids dim 0" not in text
    assert "TODO: ids dim 1: the model leaves this dim free (dim_param 'seq')" in text
    status, out, _ = static_shapes(capsys, tmp_path / "qnn-ci.yaml", tmp_path / "w")
    assert status == 0, out


def test_names_from_the_model_cannot_break_the_yaml(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An input named `on` (YAML 1.1 true), an output with a colon and a space, a
    dim_param holding a line break and YAML of its own: written quoted or in a
    one-line repr, read back as the same names."""
    model = classifier(tmp_path / "m.onnx", ids_name="on", probs_name="class probs:0",
                       batch="N\nexports: []\n  - name: evil")
    status, _out, err = init(capsys, model, "--out", tmp_path)
    assert status == 0, err
    export = load_manifest(tmp_path / "qnn-ci.yaml").export("m")
    assert set(export.inputs) == {"x", "on"}
    assert export.inputs["on"].encoding == "other"
    assert export.thresholds.per_output == {"class probs:0": {"max_abs": 0.05}}
    assert "evil" not in [e.name for e in load_manifest(tmp_path / "qnn-ci.yaml").exports]
    status, out, _ = static_shapes(capsys, tmp_path / "qnn-ci.yaml", tmp_path / "w")
    assert status == 0, out


@pytest.mark.parametrize("text", ["on", "y", "No", "null", "x:0", "a: b", "1", "12:30",
                                  "-x", "#c", "a\tb", 'q"uote', "back\\slash", "ünï",
                                  "emoji 😀", "nel\x85", "line\nbreak", "x:", "", "../m.onnx",
                                  "/abs/m.onnx", ".inf", ".5", "./.nan", "..", "a #b"])
def test_yaml_scalar_reads_back_as_the_same_text(text: str) -> None:
    assert yaml.safe_load(f"key: {yaml_scalar(text)}\n") == {"key": text}
    assert yaml.safe_load(f"{yaml_scalar(text)}: 1\n") == {text: 1}


def test_real_model_from_a_wheel_through_the_installed_command(
        tmp_path: Path, rec_model: Path) -> None:
    """The PP-OCRv4 recogniser: x [batch, 3, '?', width]. The first guess (224 x 224)
    does not survive its reshapes; init says so and writes a size that does."""
    (tmp_path / ".git").mkdir()                       # the repository root
    exe = Path(sys.executable).parent / "qnn-ci"
    proc = subprocess.run([str(exe), "init", str(rec_model), "--soc", "SM8650",
                           "--out", "models", "--workflow"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "sizes 224 did not pass" in proc.stdout
    manifest = tmp_path / "models" / "qnn-ci.yaml"
    text = manifest.read_text()
    assert "model: pkg:rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx" in text
    export = load_manifest(manifest).export("ch_PP-OCRv4_rec_infer")
    assert export.inputs["x"].shape == (1, 3, 32, 32)
    assert export.thresholds.per_output == {"softmax_11.tmp_0": {"max_abs": 0.05}}
    run = subprocess.run([str(exe), "run", "models/qnn-ci.yaml", "--stage", "static_shapes",
                          "--workdir", "w"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS  static_shapes" in run.stdout
    workflow = (tmp_path / ".github/workflows/qnn-ci.yml").read_text()
    assert 'pip install --no-deps "rapidocr-onnxruntime==' in workflow   # ships the model


def test_real_model_that_no_size_rescues_is_written_and_said(
        tmp_path: Path, silero_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Silero VAD does not pass static_shapes at any size (an LSTM inside an `If`):
    init writes the manifest, says so in one line and exits 1; the stage agrees."""
    status, out, err = init(capsys, silero_model, "--out", tmp_path)
    assert status == 1
    assert err.count("\n") == 1
    assert err.startswith("qnn-ci init: warning: static_shapes does not pass with sizes "
                          "tried: 32, 64, 128, 256, 16, 8: not static:")
    assert "wrote" in out and (tmp_path / "qnn-ci.yaml").is_file()
    text = (tmp_path / "qnn-ci.yaml").read_text()
    assert "# TODO: sr is a scalar" in text                  # the sample rate
    export = load_manifest(tmp_path / "qnn-ci.yaml").export("silero_vad")
    assert export.inputs["sr"].encoding == "other" and export.inputs["sr"].shape == ()
    status, run_out, cases = static_shapes(capsys, tmp_path / "qnn-ci.yaml", tmp_path / "w")
    assert status == 1, run_out
    assert cases["silero_vad::static_shapes"].find("failure") is not None


def test_generator_skeleton_refuses_to_make_data_up(
        tmp_path: Path, cls_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _out, err = init(capsys, cls_model, "--name", "cls", "--out", tmp_path)
    assert status == 0, err
    source = tmp_path / "calib_cls.py"
    text = source.read_text()
    assert "#   'x'  float32  [1, 3, 224, 224]" in text
    spec = importlib.util.spec_from_file_location("calib_cls", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(NotImplementedError, match=r"calib_cls\.py has no calibration data yet"):
        module.samples(4)
    # Through the pipeline: the calibration stage stops on the TODO, one line, and
    # writes no sample.
    work = tmp_path / "w"
    status = main(["run", str(tmp_path / "qnn-ci.yaml"), "--stage", "calibration",
                   "--workdir", str(work)])
    out = capsys.readouterr().out
    assert status == 2, out
    line = next(ln for ln in out.splitlines() if "ERROR calibration" in ln)
    assert "raised NotImplementedError: calib_cls.py has no calibration data yet" in line
    assert not list(work.rglob("*.raw")) and not list(work.rglob("input_list.txt"))


def test_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = classifier(tmp_path / "m.onnx")
    out_dir = tmp_path / "models"
    out_dir.mkdir()
    (out_dir / "qnn-ci.yaml").write_text("keep me\n")
    status, out, err = init(capsys, model, "--out", out_dir)
    assert status == 2 and out == ""
    assert err.count("\n") == 1
    assert "qnn-ci.yaml: already exists: qnn-ci init never overwrites a file" in err
    assert (out_dir / "qnn-ci.yaml").read_text() == "keep me\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["qnn-ci.yaml"]

    # The workflow counts too, and is checked before anything is written.
    (out_dir / "qnn-ci.yaml").unlink()
    (tmp_path / ".git").mkdir()
    wf = tmp_path / ".github" / "workflows" / "qnn-ci.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text("mine\n")
    status, _out, err = init(capsys, model, "--out", out_dir, "--workflow")
    assert status == 2 and ".github/workflows/qnn-ci.yml: already exists" in err
    assert wf.read_text() == "mine\n" and list(out_dir.iterdir()) == []

    # A second init over its own files: refused, the first files kept.
    wf.unlink()
    assert init(capsys, model, "--out", out_dir)[0] == 0
    first = (out_dir / "calib_m.py").read_text()
    status, _out, err = init(capsys, model, "--out", out_dir, "--soc", "SM8550")
    assert status == 2 and "already exists" in err
    assert (out_dir / "calib_m.py").read_text() == first
    assert "SM8550" not in (out_dir / "qnn-ci.yaml").read_text()


@pytest.mark.parametrize(("args", "message"), [
    (["--soc", "QCS649"], "--soc: unknown SoC 'QCS649' (did you mean QCS6490?); known: "
                          "QCS6490,"),
    (["--name=-x"], "--name: '-x' is not an export name"),
    (["--dim", "x=1,2,8"], "--dim 'x=1,2,8': rank 3 but input 'x' has rank 2"),
    (["--dim", "x=2,9"], "dim 1 of input 'x' is fixed at 8 in the model, got 9"),
])
def test_bad_input_is_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        message: str) -> None:
    model = classifier(tmp_path / "m.onnx")
    status, out, err = init(capsys, model, "--out", tmp_path / "out", *args)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_unreadable_model_is_one_line(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not a model at all\xff\xff")
    status, _out, err = init(capsys, bad, "--out", tmp_path / "out")
    assert status == 2 and err.count("\n") == 1
    assert "cannot read ONNX model" in err
    status, _out, err = init(capsys, tmp_path / "missing.onnx", "--out", tmp_path / "out")
    assert status == 2 and "model not found" in err
    assert not (tmp_path / "out").exists()


def _uncommented(text: str) -> str:
    """The workflow with its commented-out jobs (self-hosted, AI Hub) switched on; the
    ``##`` lines are prose and stay comments."""
    head, sep, tail = text.partition("  # sdk-and-board:")
    job = (sep + tail).splitlines()
    return head + "\n".join(line.replace("  # ", "  ", 1) for line in job) + "\n"


def test_workflow_is_valid_and_lints_clean(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".git").mkdir()
    model = classifier(tmp_path / "m.onnx")
    status, out, err = init(capsys, model, "--out", tmp_path / "models", "--workflow",
                            "--soc", "QCS6490")
    assert status == 0, err
    path = tmp_path / ".github" / "workflows" / "qnn-ci.yml"
    assert "wrote .github/workflows/qnn-ci.yml" in out or str(path) in out
    text = path.read_text()
    doc = yaml.safe_load(text)
    assert list(doc["jobs"]) == ["host-and-simulator"]
    assert doc["permissions"] == {"contents": "read"}
    job = doc["jobs"]["host-and-simulator"]
    assert job["runs-on"] == "ubuntu-latest"
    steps = job["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@")
    assert steps[0]["with"]["persist-credentials"] is False
    runs = "\n".join(s.get("run", "") for s in steps)
    assert '"qnn-ci[sim] @ git+https://github.com/qnn-ci/qnn-ci@v0"' in runs
    assert "qnn-ci run models/qnn-ci.yaml --junit qnn-ci-junit.xml" in runs

    on = _uncommented(text)
    full = yaml.safe_load(on)
    assert list(full["jobs"]) == ["host-and-simulator", "sdk-and-board", "ai-hub"]
    hub = full["jobs"]["ai-hub"]
    assert hub["runs-on"] == "ubuntu-latest" and "head.repo.full_name" in hub["if"]
    assert hub["steps"][-1]["env"] == {"QAI_HUB_API_TOKEN": "${{ secrets.QAI_HUB_API_TOKEN }}"}
    assert "qnn-ci[sim,ai-hub] @ " in hub["steps"][-2]["run"]
    assert "qnn-ci run models/qnn-ci.yaml --board ai-hub" in hub["steps"][-1]["run"]
    board = full["jobs"]["sdk-and-board"]
    assert board["runs-on"] == ["self-hosted", "linux", "qairt"]
    assert "head.repo.full_name == github.repository" in board["if"]
    assert "qnn-ci run models/qnn-ci.yaml --board" in board["steps"][-1]["run"]

    from tests.core.test_action import actionlint, zizmor_findings

    lint = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not Path(lint).exists():
        actionlint()                                       # skips with the reason
    uncommented = tmp_path / "uncommented.yml"
    uncommented.write_text(on)
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [qairt]\n")
    for wf in (path, uncommented):
        proc = subprocess.run([lint, "-config-file", str(config), str(wf)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert zizmor_findings(path, uncommented) == []


def test_workflow_says_when_the_model_is_outside_the_repository(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "elsewhere").mkdir()
    model = classifier(tmp_path / "elsewhere" / "m.onnx")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    status, out, err = init(capsys, model, "--out", repo / "models", "--workflow")
    assert status == 0, err
    assert "note: the model is outside the repository" in out
    assert "model: ../../elsewhere/m.onnx" in (repo / "models" / "qnn-ci.yaml").read_text()
    assert (repo / ".github" / "workflows" / "qnn-ci.yml").is_file()


def test_model_without_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A graph that computes from constants alone: nothing to pin, nothing checked."""
    const = numpy_helper.from_array(np.ones((2, 2), np.float32), "c")
    graph = helper.make_graph([helper.make_node("Relu", ["c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              initializer=[const])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "c.onnx")
    status, out, err = init(capsys, tmp_path / "c.onnx", "--out", tmp_path)
    assert status == 0, err
    assert "static_shapes passes" not in out            # nothing was guessed
    assert load_manifest(tmp_path / "qnn-ci.yaml").export("c").inputs == {}
