"""The calibration stage: input lists and raw files from a generator, an
existing list, or another export's real outputs (`from:`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.calibration.input_list import read_input_list
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import Status
from qnn_ci.engine.stage import Environment
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.registry import load_stages
from tests.core.graphs import scale_model, two_input_model

GEN = '''
import numpy as np

def floats(count):
    rng = np.random.default_rng(3)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32)}

def doubles():
    yield {"x": np.zeros((1, 4), np.float64)}

def wrong_shape(count):
    for _ in range(count):
        yield {"x": np.ones((2, 4), np.float32)}

def zeros(count):
    for _ in range(count):
        yield {"x": np.zeros((1, 4), np.float32)}

def one_zero(count):
    rng = np.random.default_rng(5)
    for i in range(count):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        yield {"x": x * 0 if i == 1 else x}

def nans(count):
    rng = np.random.default_rng(6)
    for i in range(count):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        if i == 2:
            x[0, 1], x[0, 3] = np.nan, np.inf
        yield {"x": x}

def raises(count):
    yield {"x": np.ones((1, 4), np.float32)}
    raise ValueError("no data here")

def with_ids(count):
    rng = np.random.default_rng(4)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32),
               "ids": rng.integers(2**33, 2**40, size=(1, 4)).astype(np.int64)}
'''


def setup(tmp_path: Path, body: str) -> Pipeline:
    (tmp_path / "gens.py").write_text(GEN)
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(body).lstrip())
    m = load_manifest(p)
    return Pipeline(m.exports, Environment(workdir=tmp_path / "work"), stages=load_stages())


def test_generator_writes_exact_dtype_raw_files_and_held_out(tmp_path: Path) -> None:
    scale_model(tmp_path / "m.onnx", dims=["N", 4])
    p = setup(tmp_path, """
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:floats", samples: 5, held_out: 2}
        """)
    r = p.result("a", "calibration")
    assert r.status == Status.PASSED, r.failure_text()
    assert r.data["samples"] == 5 and r.data["held_out"] == 2
    lst = Path(r.artefacts["input_list"])
    assert lst == tmp_path / "work" / "a" / "calibration" / "input_list.txt"
    lines = lst.read_text().splitlines()
    assert len(lines) == 5 and all(line.startswith("x:=/") for line in lines)
    samples = read_input_list(lst, ["x"])
    held = read_input_list(Path(r.artefacts["held_out_list"]), ["x"])
    assert len(held) == 2
    expected = np.random.default_rng(3).normal(size=(7, 1, 4)).astype(np.float32)
    got = [np.fromfile(s["x"], "<f4").reshape(1, 4) for s in samples + held]
    np.testing.assert_array_equal(np.stack(got), expected)
    assert all(s["x"].stat().st_size == 16 for s in samples)


def test_int64_inputs_stay_int64(tmp_path: Path) -> None:
    two_input_model(tmp_path / "two.onnx")
    p = setup(tmp_path, """
        exports:
          - name: two
            model: two.onnx
            calibration: {generator: "gens:with_ids", samples: 3, held_out: 0}
        """)
    r = p.result("two", "calibration")
    assert r.status == Status.PASSED, r.failure_text()
    (first, *_) = read_input_list(Path(r.artefacts["input_list"]), ["x", "ids"])
    assert first["ids"].stat().st_size == 4 * 8
    rng = np.random.default_rng(4)
    rng.normal(size=(1, 4))
    want = rng.integers(2**33, 2**40, size=(1, 4)).astype(np.int64)
    np.testing.assert_array_equal(np.fromfile(first["ids"], "<i8").reshape(1, 4), want)


@pytest.mark.parametrize(("gen", "words"), [
    ("gens:raises", "generator 'gens:raises' raised ValueError: no data here ("),
    ("broken:gen", "generator module 'broken' failed to import: SyntaxError"),
    ("gens:doubles", "input 'x' expected dtype float32, got float64"),
    ("gens:wrong_shape", "input 'x' expected shape [1, 4], got [2, 4]"),
    ("gens:nothere", "gens has no function 'nothere'"),
])
def test_bad_generators_name_the_input_expected_and_got(tmp_path: Path, gen: str,
                                                       words: str) -> None:
    scale_model(tmp_path / "m.onnx", dims=["N", 4])
    (tmp_path / "broken.py").write_text("def gen(count)\n    pass\n")
    p = setup(tmp_path, f"""
        exports:
          - name: a
            model: m.onnx
            inputs: {{x: {{shape: [1, 4]}}}}
            calibration: {{generator: "{gen}", samples: 2}}
        """)
    r = p.result("a", "calibration")
    assert r.status == Status.ERROR
    assert words in r.summary and "\n" not in r.summary
    assert r.summary.startswith(f"{tmp_path / 'qnn-ci.yaml'}:2: exports.a.calibration.")


def test_from_chain_uses_real_upstream_outputs(tmp_path: Path) -> None:
    scale_model(tmp_path / "up.onnx", dims=["N", 4], scale=3.0)
    scale_model(tmp_path / "down.onnx", in_name="feat", out_name="out", dims=[1, 4])
    p = setup(tmp_path, """
        exports:
          - name: up
            model: up.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:floats", samples: 4, held_out: 1}
          - name: down
            model: down.onnx
            calibration:
              from: {export: up, outputs: {y: feat}}
        """)
    r = p.result("down", "calibration")
    assert r.status == Status.PASSED, r.failure_text()
    assert r.data["samples"] == 4 and r.data["held_out"] == 1
    xs = np.random.default_rng(3).normal(size=(5, 1, 4)).astype(np.float32)
    got = [np.fromfile(s["feat"], "<f4").reshape(1, 4)
           for s in read_input_list(Path(r.artefacts["input_list"]), ["feat"])
           + read_input_list(Path(r.artefacts["held_out_list"]), ["feat"])]
    np.testing.assert_allclose(np.stack(got), np.maximum(xs * 3.0, 0), rtol=1e-6)


def test_from_chain_output_that_does_not_fit_is_named(tmp_path: Path) -> None:
    scale_model(tmp_path / "up.onnx", dims=["N", 4])
    scale_model(tmp_path / "down.onnx", in_name="feat", out_name="out", dims=[1, 8])
    p = setup(tmp_path, """
        exports:
          - name: up
            model: up.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:floats", samples: 2}
          - name: down
            model: down.onnx
            calibration: {from: {export: up, outputs: {y: feat}}}
        """)
    r = p.result("down", "calibration")
    assert r.status == Status.ERROR
    assert "outputs of export up sample 0: input 'feat' expected shape [1, 8], got [1, 4]" \
        in r.summary


def test_failed_upstream_blocks_the_chain(tmp_path: Path) -> None:
    scale_model(tmp_path / "up.onnx", dims=["N", 4])
    scale_model(tmp_path / "down.onnx", in_name="y", out_name="out", dims=[1, 4])
    p = setup(tmp_path, """
        exports:
          - name: up
            model: up.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:doubles"}
          - name: down
            model: down.onnx
            calibration: {from: up}
        """)
    r = p.result("down", "calibration")
    assert r.status == Status.SKIPPED and r.summary == "blocked by up::calibration"


def test_existing_input_list_is_checked_and_copied(tmp_path: Path) -> None:
    two_input_model(tmp_path / "two.onnx")
    rng = np.random.default_rng(0)
    lines = []
    for i in range(3):
        rng.normal(size=(1, 4)).astype(np.float32).tofile(tmp_path / f"x{i}.raw")
        np.arange(i, i + 4, dtype=np.int64).tofile(tmp_path / f"ids{i}.raw")
        lines.append(f"x:={tmp_path}/x{i}.raw ids:={tmp_path}/ids{i}.raw")
    (tmp_path / "list.txt").write_text("\n".join(lines))
    p = setup(tmp_path, """
        exports:
          - name: two
            model: two.onnx
            calibration: {input_list: list.txt, samples: 2}
        """)
    r = p.result("two", "calibration")
    assert r.status == Status.PASSED, r.failure_text()
    assert {k: v for k, v in r.data.items() if k != "content_digest"} == {
        "samples": 2, "held_out": 1, "inputs": {
        "x": {"dtype": "float32", "shape": [1, 4]}, "ids": {"dtype": "int64", "shape": [1, 4]}}}
    # A list written with int32 ids is refused with the line and the reason.
    np.arange(4, dtype=np.int32).tofile(tmp_path / "ids0.raw")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    p2 = setup(tmp_path, """
        exports:
          - name: two
            model: two.onnx
            calibration: {input_list: list.txt}
        """)
    r2 = p2.result("two", "calibration")
    assert r2.status == Status.ERROR
    assert "line 1: ids: ids0.raw is 16 bytes, expected 32" in r2.summary


def test_same_generator_module_name_in_two_manifest_folders(tmp_path: Path) -> None:
    results = []
    for folder, scale in (("one", 1.0), ("two", 5.0)):
        d = tmp_path / folder
        d.mkdir()
        scale_model(d / "m.onnx", dims=["N", 4])
        (d / "calib.py").write_text(
            "import numpy as np\n"
            f"def gen(count):\n    for _ in range(count):\n"
            f"        yield {{'x': np.full((1, 4), {scale}, np.float32)}}\n")
        (d / "qnn-ci.yaml").write_text(
            "exports:\n  - name: a\n    model: m.onnx\n    inputs: {x: {shape: [1, 4]}}\n"
            "    calibration: {generator: 'calib:gen', samples: 1, held_out: 0}\n")
        m = load_manifest(d / "qnn-ci.yaml")
        r = Pipeline(m.exports, Environment(workdir=d / "work"),
                     stages=load_stages()).result("a", "calibration")
        (sample,) = read_input_list(Path(r.artefacts["input_list"]), ["x"])
        results.append(float(np.fromfile(sample["x"], "<f4")[0]))
    assert results == [1.0, 5.0]


def test_synthetic_data_one_sample_warns_every_sample_fails(tmp_path: Path) -> None:
    scale_model(tmp_path / "m.onnx", dims=["N", 4])
    p = setup(tmp_path, """
        exports:
          - name: real
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:one_zero", samples: 4, held_out: 0}
          - name: fake
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:zeros", samples: 4, held_out: 0}
        """)
    real = p.result("real", "calibration")
    assert real.status == Status.PASSED and "1 warning(s)" in real.summary
    (warn,) = real.findings
    assert warn.check == "inputs.all_zero" and warn.message.startswith("sample 1: x is all zeros")
    fake = p.result("fake", "calibration")
    assert fake.status == Status.FAILED
    assert [f.check for f in fake.errors()] == ["inputs.all_samples_zero"]
    assert "every one of the 4 sample(s) of input 'x' is all zeros" in fake.failure_text()


def test_nan_or_inf_in_calibration_data_fails_at_the_source(tmp_path: Path) -> None:
    scale_model(tmp_path / "m.onnx", dims=["N", 4])
    p = setup(tmp_path, """
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "gens:nans", samples: 4, held_out: 0}
        """)
    r = p.result("a", "calibration")
    assert r.status == Status.FAILED
    (f,) = r.errors()
    assert f.check == "inputs.non_finite" and f.message == "sample 2: x has 2 NaN/Inf value(s) of 4"


def test_held_out_from_an_input_list_and_a_short_generator(tmp_path: Path) -> None:
    two_input_model(tmp_path / "two.onnx")
    rng = np.random.default_rng(0)
    lines = []
    for i in range(4):
        rng.normal(size=(1, 4)).astype(np.float32).tofile(tmp_path / f"x{i}.raw")
        np.arange(i, i + 4, dtype=np.int64).tofile(tmp_path / f"ids{i}.raw")
        lines.append(f"x:={tmp_path}/x{i}.raw ids:={tmp_path}/ids{i}.raw")
    (tmp_path / "list.txt").write_text("\n".join(lines))
    scale_model(tmp_path / "m.onnx", dims=["N", 4])
    (tmp_path / "few.py").write_text(
        "import numpy as np\n"
        "def gen(count):\n"
        "    for i in range(3):\n"
        "        yield {'x': np.full((1, 4), i + 1, np.float32)}\n")
    p = setup(tmp_path, """
        exports:
          - name: listed
            model: two.onnx
            calibration: {input_list: list.txt, held_out: 1}
          - name: short
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "few:gen", samples: 10, held_out: 2}
          - name: too_short
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {generator: "few:gen", samples: 10, held_out: 3}
        """)
    listed = p.result("listed", "calibration")
    assert (listed.data["samples"], listed.data["held_out"]) == (3, 1)
    short = p.result("short", "calibration")
    assert short.status == Status.PASSED
    assert (short.data["samples"], short.data["held_out"]) == (1, 2)
    (warn,) = [f for f in short.findings if f.check == "calibration.short"]
    assert warn.message == "the generator gave 3 sample(s), 12 were asked for " \
        "(samples + held_out)"
    too_short = p.result("too_short", "calibration")
    assert too_short.status == Status.ERROR
    assert "3 sample(s) cannot give 3 held out" in too_short.summary
