"""Cache invalidation in the direction that matters: change one thing a stage reads
(an export setting it declares, a file it hashes, an upstream result) and EXACTLY
that stage and the stages after it whose inputs changed re-run; every other stage,
upstream ones first, is reused.

The matrix runs the real stages — static_shapes, calibration (a generator package
with a helper and a `depends:` data file, then an input list), encodings, sim_npu,
sim_numerics on onnxruntime-qnn; dry_run, convert, contract, fp16_gate, model_lib
on the stand-in SDK; so_load, htp_vs_cpu, context_binary, context_run on the
stand-in board over a real sshd — and applies the mutations one after the other,
each against the state the previous one left (so each costs only what it re-runs).
For each mutation the test states, by hand, which stages READ the changed thing
(their own part of the key — settings and fingerprint — must change, and nobody
else's) and which stages RE-RUN (the readers plus the stages downstream whose
upstream artefacts changed).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from fixtures.qairt_standin.net_run import make_board
from fixtures.sshd import SshServer, running_sshd
from qnn_ci.engine.cache import digest
from qnn_ci.engine.pipeline import Pipeline, export_settings
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    DiagnosisSpec,
    ExportSpec,
    HtpConfigSpec,
    InputSpec,
    OriginalSpec,
    QuantizationSpec,
    RegressionSpec,
    SdkSpec,
    SimSpec,
    TargetSpec,
    Thresholds,
)
from qnn_ci.engine.stage import STAGE_ORDER, Environment, StageContext
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, build_cnn, write_samples
from tests.sim.conftest import REASON as SIM_REASON

# The classic route's world: the DLC route's own stages never apply to it (their
# invalidation: tests/dlc/test_dlc_cache.py, which mutates the `dlc` setting too).
DLC_ONLY = frozenset({"dlc_convert", "dlc_quantize", "dlc_contract", "dlc_fp16_gate",
                      "dlc_context_binary"})
DLC_MUTATED = frozenset({"dlc"})
ALL = frozenset(STAGE_ORDER) - DLC_ONLY


# -- the project: a generator package with a helper module and a data file ---------

GEN = '''
from pathlib import Path

import numpy as np

from .docimg import SEED, page


def samples(count):
    scale = 1 + len((Path(__file__).parents[1] / "data" / "gain.bin").read_bytes()) / 100
    rng = np.random.default_rng(SEED)
    for _ in range(count):
        yield {"x": (page(rng) * scale).astype(np.float32)}
'''
DOCIMG = '''
import numpy as np

SEED = 3


def page(rng):
    ramp = np.linspace(-1, 1, 3 * 16 * 16).reshape(1, 3, 16, 16)
    return ramp * rng.uniform(0.5, 1.5) + rng.normal(0, 0.05, (1, 3, 16, 16))
'''


def write_project(folder: Path) -> None:
    pkg = folder / "calib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "gen.py").write_text(GEN)
    (pkg / "docimg.py").write_text(DOCIMG)
    (folder / "data").mkdir()
    (folder / "data" / "gain.bin").write_bytes(b"\x01" * 10)


def write_encodings(path: Path, w1_max: float) -> Path:
    """AIMET overrides for the CNN's first weights (`w1`, 8 bits like the export)."""
    path.write_text(json.dumps({
        "version": "0.6.1", "activation_encodings": {},
        "param_encodings": {"w1": [{
            "bitwidth": 8, "dtype": "int", "is_symmetric": "True", "min": -w1_max,
            "max": w1_max, "offset": -128, "scale": w1_max / 127}]}}))
    return path


@dataclass
class World:
    folder: Path
    export: ExportSpec
    env: Environment
    server: SshServer


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def world(sshd: SshServer, tmp_path: Path) -> Iterator[World]:
    folder = tmp_path
    write_project(folder)
    board_dir = make_board(folder / "board")
    (folder / "board-work").mkdir()
    boards = {}
    for name in ("standin", "standin2"):      # two names for the same board
        boards[name] = sshd.board(
            name, qnn_lib_dir=str(board_dir / "lib"),
            net_run=str(board_dir / "bin" / "qnn-net-run"),
            work_root=str(folder / "board-work"), timeout_s=60.0)
    sdk = make_sdk(folder / "sdk", "2.31.0")
    export = ExportSpec(
        name="cnn", model=build_cnn(folder / "cnn.onnx"), manifest=folder / "qnn-ci.yaml",
        line=2, inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(generator="calib.gen:samples", samples=4, held_out=2,
                                    depends=("data/*.bin",)),
        quantization=QuantizationSpec(act_bitwidth=16, weights_bitwidth=8, bias_bitwidth=32,
                                      overrides=write_encodings(folder / "cnn.encodings",
                                                                1.0)),
        target=TargetSpec(soc="QCS6490", lib_target="aarch64-oe-linux-gcc11.2"),
        thresholds=Thresholds(default={"cosine": 0.99}), board="standin",
        sdk=SdkSpec(root=sdk), sim=SimSpec(samples=1))
    # `original:` the model itself: matches_original runs (and gates) in every chain
    export = replace(export, original=OriginalSpec(export.model))
    env = Environment(workdir=folder / "work", esdk_env=make_esdk(folder / "esdk"),
                      boards=boards,
                      environ={"PATH": "/usr/bin:/bin", "QNN_CI_LOCK_DIR": str(folder / "locks")})
    yield World(folder, export, env, sshd)
    sshd.kill_remote()


BOARD_STAGES = frozenset({"so_load", "htp_vs_cpu", "context_binary", "context_run"})


def run_all(world: World, stages: frozenset[str] = ALL
            ) -> tuple[Pipeline, dict[str, StageResult]]:
    names = tuple(s for s in STAGE_ORDER if s in stages)
    p = Pipeline([world.export], world.env, stages=load_stages(names))
    return p, {r.stage: r for r in p.run_export(world.export.name)}


def own_keys(p: Pipeline, export: ExportSpec) -> dict[str, str]:
    """Each stage's own part of its cache key: the settings it declares and its
    fingerprint (the rest of the key is its upstream results' identities)."""
    out = {}
    for name, stage in p.stages.items():
        if not stage.applies(export):
            continue
        upstream = {n: p._results[(export.name, n)] for n in stage.needs
                    if (export.name, n) in p._results}
        ctx = StageContext(export=export, env=p.env,
                           workdir=p.env.export_dir(export.name) / name,
                           upstream=upstream, all_exports=p.exports)
        out[name] = digest({"export": export_settings(export, stage),
                            "fingerprint": stage.fingerprint(ctx)})
    return out


S, C, E, N, U = "static_shapes", "calibration", "encodings", "sim_npu", "sim_numerics"
D, V, K, F, L = "dry_run", "convert", "contract", "fp16_gate", "model_lib"
SO, H, M = "so_load", "htp_vs_cpu", "matches_original"
CB, CR = "context_binary", "context_run"
# regression's key is what it compares (the numbers measured, the baseline entries):
# it is not in the chains (it needs a baselines file); tests/core/test_regression_stage.py
R = "regression"
AFTER_CALIBRATION = frozenset({C, M, N, U, V, K, F, L, SO, H, CB, CR})   # calibration + dependents
AFTER_CONVERT = frozenset({V, K, F, L, SO, H, CB, CR})


@dataclass(frozen=True)
class Mutation:
    what: str
    field: str | None            # the ExportSpec field changed (None: a file it names)
    change: Callable[[World], ExportSpec]
    reads: frozenset[str]        # stages whose own settings/fingerprint see the change
    reruns: frozenset[str]       # stages that must re-run (all others: cached)


def _q(w: World, **kw: Any) -> ExportSpec:
    return replace(w.export, quantization=replace(w.export.quantization, **kw))


def _cal(w: World, **kw: Any) -> ExportSpec:
    return replace(w.export, calibration=replace(w.export.calibration, **kw))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _helper_seed(w: World) -> ExportSpec:
    # a different length too: Python's bytecode cache checks size and mtime (seconds)
    _edit(w.folder / "calib" / "docimg.py", "SEED = 3", "SEED = 12345")
    return w.export


def _data_file(w: World) -> ExportSpec:
    (w.folder / "data" / "gain.bin").write_bytes(b"\x01" * 30)
    return w.export


def _encodings_file(w: World) -> ExportSpec:
    write_encodings(w.folder / "cnn.encodings", 1.5)
    return w.export


def _weights(w: World) -> ExportSpec:
    build_cnn(w.export.model, seed=2)
    return w.export


def _to_input_list(w: World) -> ExportSpec:
    lst = write_samples(w.folder / "list", 5, seed=9)
    return _cal(w, generator=None, depends=(), input_list=lst, samples=None, held_out=2)


def _raw_bytes(w: World) -> ExportSpec:
    write_samples(w.folder / "list", 5, seed=10)      # same list, other .raw bytes
    return w.export


MUTATIONS = [
    Mutation("quantization.act_bitwidth 16 -> 8", "quantization",
             lambda w: _q(w, act_bitwidth=8), frozenset({E, N, D, V, K}),
             frozenset({E, N, U, D}) | AFTER_CONVERT),
    Mutation("encodings file bytes", None, _encodings_file, frozenset({E, N, D, V, K}),
             frozenset({E, N, U, D}) | AFTER_CONVERT),
    Mutation("target.soc QCS6490 -> SM8550", "target",
             lambda w: replace(w.export, target=replace(w.export.target, soc="SM8550")),
             ALL - {S, C, M}, ALL - {S, C, M}),
    # and back: the stand-in board is a QCS6490, its generator builds for it, and the
    # binary then says it is not what the target asks for (context_binary fails)
    Mutation("target.soc SM8550 -> QCS6490", "target",
             lambda w: replace(w.export, target=replace(w.export.target, soc="QCS6490")),
             ALL - {S, C, M}, ALL - {S, C, M}),
    Mutation("thresholds cosine 0.99 -> 0.98", "thresholds",
             lambda w: replace(w.export, thresholds=Thresholds(default={"cosine": 0.98})),
             frozenset({U, H, CR}), frozenset({U, H, CR})),
    Mutation("sim.samples 1 -> 2", "sim",
             lambda w: replace(w.export, sim=SimSpec(samples=2)), frozenset({U}),
             frozenset({U})),
    Mutation("diagnosis.budget_s 600 -> 60", "diagnosis",
             lambda w: replace(w.export, diagnosis=DiagnosisSpec(budget_s=60.0)),
             frozenset({U, H}), frozenset({U, H})),
    Mutation("sdk.timeout_s 3600 -> 3000", "sdk",
             lambda w: replace(w.export, sdk=replace(w.export.sdk, timeout_s=3000.0)),
             frozenset({D, V, L}), frozenset({D, V, L})),
    Mutation("board standin -> standin2", "board",
             lambda w: replace(w.export, board="standin2"), frozenset({L, SO, H, CB, CR}),
             frozenset({L, SO, H, CB, CR})),
    # the same config goes to every tool that takes one: both qnn-net-run runs of the
    # .so, the generator, and the context binary's run
    Mutation("htp_config none -> vtcm_mb 2, O 3", "htp_config",
             lambda w: replace(w.export, htp_config=HtpConfigSpec(vtcm_mb=2, O=3)),
             frozenset({SO, H, CB, CR}), frozenset({SO, H, CB, CR})),
    Mutation("inputs.x.encoding -> other", "inputs",
             lambda w: replace(w.export, inputs={"x": InputSpec("x", INPUT_SHAPE, "float32",
                                                               encoding="other")}),
             frozenset({S, C, M, D, V, K}), frozenset({S, C, M, D}) | AFTER_CONVERT),
    Mutation("calibration.samples 4 -> 3", "calibration", lambda w: _cal(w, samples=3),
             frozenset({C}), AFTER_CALIBRATION),
    Mutation("generator helper module (seed)", None, _helper_seed, frozenset({C}),
             AFTER_CALIBRATION),
    Mutation("calibration.depends data file", None, _data_file, frozenset({C}),
             AFTER_CALIBRATION),
    Mutation("model weights", "model", _weights, frozenset({S, M, E, K}), ALL),
    # The converted model differs, the stand-in converter's output does not: what
    # reads only convert's artefacts (contract, fp16_gate, model_lib, so_load) is
    # reused — a re-run that makes the same files re-runs nothing after it.
    Mutation("opset none -> 18", "opset", lambda w: replace(w.export, opset=18),
             frozenset({S}), frozenset({S, C, M, E, N, U, D, V, H, CR})),
    Mutation("original.cosine 0.999999 -> 0.99999", "original",
             lambda w: replace(w.export, original=OriginalSpec(w.export.model, 0.99999)),
             frozenset({M}), frozenset({M})),
    Mutation("calibration source generator -> input list", "calibration", _to_input_list,
             frozenset({C}), AFTER_CALIBRATION),
    Mutation("input list .raw bytes", None, _raw_bytes, frozenset({C}), AFTER_CALIBRATION),
    Mutation("latency.runs 20 -> 5", "latency",
             lambda w: replace(w.export, latency=replace(w.export.latency, runs=5)),
             frozenset({H, CR}), frozenset({H, CR})),
    # Last, and toggled back: the stand-in library carries no native output types, so
    # so_load fails with native outputs (a board failure is never cached).
    Mutation("native_outputs false -> true", "native_outputs",
             lambda w: replace(w.export, native_outputs=True), frozenset({SO, H, CR}),
             frozenset({SO, H, CR})),
    # htp_vs_cpu and context_run never ran with native outputs (blocked): their stored
    # results, made with native_outputs false, match again and are reused.
    Mutation("native_outputs true -> false", "native_outputs",
             lambda w: replace(w.export, native_outputs=False), frozenset({SO, H, CR}),
             frozenset({SO})),
]
MUTATIONS.append(Mutation(
    "regression.tolerances cosine -> 0.01", "regression",
    lambda w: replace(w.export, regression=RegressionSpec(tolerances={"cosine": 0.01})),
    frozenset({R}), frozenset({R})))
MAY_FAIL = {"native_outputs false -> true": {SO, H, CR},    # H, CR: blocked by so_load
            "target.soc QCS6490 -> SM8550": {CB, CR}}         # CR: blocked by it


def test_every_declared_setting_of_every_stage_is_mutated() -> None:
    """A stage that starts reading a new setting needs a row here."""
    fields = [f.name for f in dataclasses.fields(ExportSpec)
              if f.name not in ("name", "line", "raw", "manifest")]
    mutated = {m.field for m in MUTATIONS}
    stages = load_stages()
    assert set(stages) == ALL | DLC_ONLY
    assert {n for n, s in stages.items() if s.route == "dlc"} == DLC_ONLY
    missing = {name: sorted(set(stage.settings or fields) - mutated
                            - (DLC_MUTATED if name in DLC_ONLY else set()))
               for name, stage in stages.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    # and every stage is the reader of at least one change
    assert set().union(*(m.reads for m in MUTATIONS)) == ALL


# The board stages take seconds per run: their chain applies the changes that matter
# to them (read by them, feeding them, or neither), in the same order.
BOARD_CHAIN = ("target.soc QCS6490 -> SM8550", "target.soc SM8550 -> QCS6490",
               "thresholds cosine 0.99 -> 0.98",
               "sim.samples 1 -> 2", "sdk.timeout_s 3600 -> 3000",
               "board standin -> standin2", "htp_config none -> vtcm_mb 2, O 3",
               "calibration.samples 4 -> 3",
               "opset none -> 18", "latency.runs 20 -> 5", "native_outputs false -> true",
               "native_outputs true -> false")


def check_chain(world: World, stages: frozenset[str], mutations: list[Mutation]) -> None:
    p, first = run_all(world, stages)
    assert {s: r.status for s, r in first.items()} == dict.fromkeys(
        [s for s in STAGE_ORDER if s in stages], Status.PASSED), \
        {s: r.failure_text() for s, r in first.items() if r.status != Status.PASSED}
    p, again = run_all(world, stages)            # touch nothing: everything is reused
    assert [s for s, r in again.items() if not r.cached] == []
    keys = own_keys(p, world.export)
    wrong: dict[str, dict[str, Any]] = {}
    for m in mutations:
        world.export = m.change(world)
        p, res = run_all(world, stages)
        new_keys = own_keys(p, world.export)
        seen = {
            "reads": {s for s in new_keys if new_keys[s] != keys[s]},
            "reruns": {s for s, r in res.items() if not r.cached},
            "failed": {s for s, r in res.items() if r.status != Status.PASSED},
        }
        want = {"reads": set(m.reads & stages), "reruns": set(m.reruns & stages),
                "failed": MAY_FAIL.get(m.what, set()) & stages}
        if seen != want:
            wrong[m.what] = {k: {"missing": sorted(want[k] - seen[k]),
                                 "unexpected": sorted(seen[k] - want[k])}
                             for k in seen if seen[k] != want[k]}
            wrong[m.what]["why"] = {s: res[s].summary for s in seen["failed"]}
        keys = new_keys
    assert wrong == {}, json.dumps(wrong, indent=1, default=str)


@pytest.mark.slow
@pytest.mark.skipif(SIM_REASON is not None, reason=SIM_REASON or "")
def test_each_change_reruns_exactly_its_readers_and_what_they_feed(world: World) -> None:
    """Every mutation, every stage but the board ones."""
    check_chain(world, ALL - BOARD_STAGES - {R}, MUTATIONS)


@pytest.mark.slow
@pytest.mark.skipif(SIM_REASON is not None, reason=SIM_REASON or "")
def test_board_stages_rerun_exactly_when_what_they_read_or_are_fed_changes(
        world: World) -> None:
    by_name = {m.what: m for m in MUTATIONS}
    check_chain(world, ALL - {R}, [by_name[n] for n in BOARD_CHAIN])
