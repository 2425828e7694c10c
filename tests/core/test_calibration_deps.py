"""The calibration cache key covers what a generator really runs and reads: every
module of the user's project it imports (transitively, statically found) and the
data files listed under `calibration.depends` — editing one re-runs calibration
and every stage after it, with new `.raw` bytes; touching nothing reuses all."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.calibration.input_list import read_input_list
from qnn_ci.calibration.project_modules import import_closure, package_versions
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.stage import Environment
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.registry import load_stages
from tests.sim.conftest import REASON as SIM_REASON
from tests.sim.conftest import conv_graph

INIT = "from calib.gen import samples  # noqa: F401\n"
GEN = '''
from pathlib import Path

import numpy as np

from . import docimg
from .docimg import SEED


def samples(count):
    import calib.lazy as lazy            # imported only when the generator runs
    wavs = sorted((Path(__file__).parents[1] / "speech").rglob("*.wav"))
    offset = sum(int(np.frombuffer(p.read_bytes(), np.uint8).sum()) for p in wavs) / 1000
    rng = np.random.default_rng(SEED)
    for _ in range(count):
        yield {"x": (docimg.page(rng) * lazy.GAIN + offset).astype(np.float32)}
'''
DOCIMG = '''
import importlib

import numpy as np

SEED = 3
_extra = importlib.import_module("calib.extra")


def page(rng):
    return np.linspace(-1, 1, 192).reshape(1, 3, 8, 8) * rng.uniform(0.5, 1.5) \\
        + rng.uniform(-0.2, 0.2)
'''
MANIFEST = """
exports:
  - name: doc
    model: m.onnx
    target: {soc: SM8550}
    sim: {samples: 1}
    calibration:
      generator: "calib.gen:samples"
      samples: 3
      held_out: 1
      depends: [DEPENDS]
"""
STAGES = ("static_shapes", "calibration", "sim_npu", "sim_numerics")


def project(tmp_path: Path, depends: str = '"speech/**/*.wav"') -> Path:
    pkg = tmp_path / "calib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "gen.py").write_text(GEN)
    (pkg / "docimg.py").write_text(DOCIMG)
    (pkg / "lazy.py").write_text("GAIN = 1.0\n")
    (pkg / "extra.py").write_text("")
    (pkg / "unused.py").write_text("raise RuntimeError('never imported')\n")
    (tmp_path / "speech" / "en").mkdir(parents=True)
    (tmp_path / "speech" / "a.wav").write_bytes(b"RIFF" + bytes(range(40)))
    (tmp_path / "speech" / "en" / "b.wav").write_bytes(b"RIFF" + bytes(range(60)))
    conv_graph(tmp_path / "m.onnx")
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text(MANIFEST.replace("DEPENDS", depends).lstrip())
    return manifest


def run(manifest: Path, stages: tuple[str, ...] = STAGES) -> dict[str, StageResult]:
    m = load_manifest(manifest)
    env = Environment(workdir=manifest.parent / "work")
    pipeline = Pipeline(m.exports, env, stages=load_stages(stages))
    return {r.stage: r for r in pipeline.run_export("doc")}


def raw_bytes(result: StageResult) -> list[bytes]:
    lst = Path(result.artefacts["input_list"])
    return [s["x"].read_bytes() for s in read_input_list(lst, ["x"])]


def rerun(results: dict[str, StageResult]) -> set[str]:
    return {s for s, r in results.items() if not r.cached}


@pytest.fixture(autouse=True)
def _forget_calib() -> None:
    """Each test's project has its own `calib` package."""
    for name in [n for n in sys.modules if n == "calib" or n.startswith("calib.")]:
        del sys.modules[name]


def test_closure_is_the_project_modules_it_imports_and_not_third_party(
        tmp_path: Path) -> None:
    project(tmp_path)
    closure = import_closure("calib.gen", tmp_path)
    assert closure is not None
    assert {n: closure.label(p) for n, p in closure.files.items()} == {
        "calib": "calib/__init__.py", "calib.gen": "calib/gen.py",
        "calib.docimg": "calib/docimg.py", "calib.lazy": "calib/lazy.py",
        "calib.extra": "calib/extra.py"}
    assert closure.third_party == ("numpy",)       # pathlib, importlib: the stdlib
    versions = package_versions(closure.third_party)
    assert versions["numpy"] == np.__version__
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))


def test_closure_of_a_plain_module_beside_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "gens.py").write_text("import helpers\nfrom sub import thing\n")
    (tmp_path / "helpers.py").write_text("from . import nothing  # not a package\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    (tmp_path / "sub" / "thing.py").write_text("import json, onnx\n")
    closure = import_closure("gens", tmp_path)
    assert closure is not None
    assert sorted(closure.label(p) for p in closure.files.values()) == [
        "gens.py", "helpers.py", "sub/__init__.py", "sub/thing.py"]
    assert closure.third_party == ("onnx",)
    assert import_closure("not_there", tmp_path) is None


@pytest.mark.skipif(SIM_REASON is not None, reason=SIM_REASON or "")
def test_helper_or_data_change_reruns_calibration_and_everything_after(
        tmp_path: Path) -> None:
    manifest = project(tmp_path)
    first = run(manifest)
    assert {s: r.status for s, r in first.items()} == dict.fromkeys(STAGES, Status.PASSED), \
        {s: r.failure_text() for s, r in first.items()}
    before = raw_bytes(first["calibration"])

    same = run(manifest)                      # touch nothing: everything reused
    assert rerun(same) == set()

    # A different seed in a helper module the generator imports.
    docimg = tmp_path / "calib" / "docimg.py"
    docimg.write_text(docimg.read_text().replace("SEED = 3", "SEED = 1234"))
    seeded = run(manifest)
    assert rerun(seeded) == {"calibration", "sim_npu", "sim_numerics"}
    after_seed = raw_bytes(seeded["calibration"])
    assert after_seed != before and all(a != b for a, b in zip(after_seed, before, strict=True))
    want = np.random.default_rng(1234)
    page = np.linspace(-1, 1, 192).reshape(1, 3, 8, 8) * want.uniform(0.5, 1.5) \
        + want.uniform(-0.2, 0.2)
    offset = (sum(range(40)) + sum(range(60)) + 2 * sum(b"RIFF")) / 1000
    assert after_seed[0] == (page + offset).astype(np.float32).tobytes()
    assert rerun(run(manifest)) == set()

    # A module imported only inside the generator function.
    (tmp_path / "calib" / "lazy.py").write_text("GAIN = 2.0\n")
    lazy = run(manifest)
    assert rerun(lazy) == {"calibration", "sim_npu", "sim_numerics"}
    after_lazy = raw_bytes(lazy["calibration"])
    assert after_lazy != after_seed

    # A data file the generator reads, listed by a `**` glob in calibration.depends.
    wav = tmp_path / "speech" / "en" / "b.wav"
    wav.write_bytes(wav.read_bytes()[:-1] + b"\x7f")
    data = run(manifest)
    assert rerun(data) == {"calibration", "sim_npu", "sim_numerics"}
    assert raw_bytes(data["calibration"]) != after_lazy
    # A new file the glob now matches.
    (tmp_path / "speech" / "c.wav").write_bytes(b"RIFF\x01")
    assert rerun(run(manifest)) == {"calibration", "sim_npu", "sim_numerics"}

    # A project file the generator does not import changes nothing.
    (tmp_path / "calib" / "unused.py").write_text("X = 2\n")
    assert rerun(run(manifest)) == set()


def test_depends_files_join_the_key_without_a_simulator(tmp_path: Path) -> None:
    manifest = project(tmp_path, depends='"speech/a.wav", "speech/en"')
    stages = ("static_shapes", "calibration")
    first = run(manifest, stages)
    assert first["calibration"].status == Status.PASSED, first["calibration"].failure_text()
    before = raw_bytes(first["calibration"])
    assert rerun(run(manifest, stages)) == set()
    (tmp_path / "speech" / "en" / "b.wav").write_bytes(b"RIFF")   # a folder: every file in it
    again = run(manifest, stages)
    assert rerun(again) == {"calibration"}
    assert raw_bytes(again["calibration"]) != before


@pytest.mark.parametrize("depends", ['"speech/*.flac"', '"speech/a.wav", "spech/**/*.wav"'])
def test_a_depends_glob_that_matches_nothing_names_the_key(tmp_path: Path,
                                                           depends: str) -> None:
    manifest = project(tmp_path, depends=depends)
    result = run(manifest, ("static_shapes", "calibration"))["calibration"]
    assert result.status == Status.ERROR
    index = depends.count(",")
    assert f"exports.doc.calibration.depends[{index}]" in result.summary
    assert "matches no file under" in result.summary and "\n" not in result.summary
    assert result.summary.startswith(f"{manifest}:")


def test_an_edited_generator_module_is_imported_afresh_in_the_same_process(
        tmp_path: Path) -> None:
    """The key changes AND the run uses the new code, not the module imported before."""
    (tmp_path / "gens.py").write_text(textwrap.dedent("""
        import numpy as np
        from consts import VALUE
        def gen(count):
            for i in range(count):
                yield {"x": np.full((1, 3, 8, 8), VALUE + i, np.float32)}
        """))
    (tmp_path / "consts.py").write_text("VALUE = 1.0\n")
    conv_graph(tmp_path / "m.onnx")
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text("exports:\n  - name: doc\n    model: m.onnx\n"
                        "    calibration: {generator: 'gens:gen', samples: 2, held_out: 0}\n")
    stages = ("static_shapes", "calibration")
    first = raw_bytes(run(manifest, stages)["calibration"])
    assert [np.frombuffer(b, "<f4")[0] for b in first] == [1.0, 2.0]
    (tmp_path / "consts.py").write_text("VALUE = 100.0\n")
    second = run(manifest, stages)["calibration"]
    assert not second.cached
    assert [np.frombuffer(b, "<f4")[0] for b in raw_bytes(second)] == [100.0, 101.0]
