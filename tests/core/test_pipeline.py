"""The engine: order, blocked-by skips, cache keys, crash containment, and
exactly-once across processes."""

from __future__ import annotations

import dataclasses
import multiprocessing
from pathlib import Path
from typing import Any, ClassVar

import pytest

from qnn_ci.engine.pipeline import Pipeline, exit_status
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.errors import UserError


class Counting(Stage):
    """Appends a line to runs.log in the work root each time it really runs."""

    outcome: ClassVar[str] = "pass"

    def run(self, ctx: StageContext) -> StageResult:
        with (ctx.env.workdir / "runs.log").open("a") as fh:
            fh.write(f"{ctx.export.name}::{self.name}\n")
        out = ctx.workdir / "out.txt"
        out.write_text(str(ctx.export.opset))
        if self.outcome == "fail":
            return StageResult(self.name, Status.FAILED, "value out of range")
        if self.outcome == "crash":
            raise ZeroDivisionError("boom")
        if self.outcome == "user":
            raise UserError("bad thing", key="exports.a.x")
        return StageResult(self.name, Status.PASSED, "ok", artefacts={"out": str(out)})


def stage(name: str, needs: tuple[str, ...] = (), outcome: str = "pass",
          unavailable: str | None = None) -> Stage:
    cls = type(name, (Counting,), {"name": name, "needs": needs, "outcome": outcome,
                                   "unavailable": lambda self, e, env: unavailable})
    return cls()


def export(tmp_path: Path, name: str = "a", value: int = 1) -> ExportSpec:
    return ExportSpec(name=name, model=tmp_path / "m.onnx", manifest=tmp_path / "qnn-ci.yaml",
                      line=3, opset=value)


def runs(env: Environment) -> list[str]:
    p = env.workdir / "runs.log"
    return p.read_text().split() if p.exists() else []


def make(tmp_path: Path, stages: list[Stage], exports: list[ExportSpec] | None = None,
         **env_kw: Any) -> Pipeline:
    env = Environment(workdir=tmp_path / "work", **env_kw)
    env.workdir.mkdir(exist_ok=True)
    return Pipeline(exports or [export(tmp_path)], env, stages={s.name: s for s in stages})


def test_failure_blocks_dependents_and_names_the_root(tmp_path: Path) -> None:
    p = make(tmp_path, [stage("first"), stage("second", ("first",), "fail"),
                        stage("third", ("second",)), stage("fourth", ("third",))])
    results = {r.stage: r for r in p.run_export("a")}
    assert results["second"].status == Status.FAILED
    assert results["third"].status == Status.SKIPPED
    assert results["third"].summary == "blocked by a::second"
    assert results["fourth"].summary == "blocked by a::second"
    assert runs(p.env) == ["a::first", "a::second"]
    assert exit_status({"a": list(results.values())}) == 1


def test_unavailable_capability_skips_with_reason_and_propagates(tmp_path: Path) -> None:
    p = make(tmp_path, [stage("convert", unavailable="QNN_SDK_ROOT is not set"),
                        stage("fp16_gate", ("convert",))])
    res = {r.stage: r for r in p.run_export("a")}
    assert res["convert"].summary == "QNN_SDK_ROOT is not set"
    assert res["fp16_gate"].summary == \
        "blocked by a::convert (skipped: QNN_SDK_ROOT is not set)"
    assert runs(p.env) == []


def test_second_run_is_cached_and_a_change_reruns_only_that_export(tmp_path: Path) -> None:
    stages = [stage("first"), stage("second", ("first",))]
    exports = [export(tmp_path, "a", 1), export(tmp_path, "b", 1)]
    p = make(tmp_path, stages, exports)
    for name in ("a", "b"):
        p.run_export(name)
    assert len(runs(p.env)) == 4
    again = make(tmp_path, stages, exports)
    results = again.run_export("a") + again.run_export("b")
    assert all(r.cached for r in results) and len(runs(p.env)) == 4
    changed = make(tmp_path, stages, [export(tmp_path, "a", 2), exports[1]])
    changed.run_export("a")
    changed.run_export("b")
    assert runs(p.env)[4:] == ["a::first", "a::second"]


def test_only_stages_that_read_a_setting_rerun_and_moving_an_export_reruns_nothing(
        tmp_path: Path) -> None:
    reads_opset = stage("first")
    reads_board = stage("second")
    type(reads_board).settings = ("board",)
    p = make(tmp_path, [reads_opset, reads_board])
    p.run_export("a")
    moved = dataclasses.replace(export(tmp_path), line=40, raw={"name": "a", "moved": True})
    make(tmp_path, [reads_opset, reads_board], [moved]).run_export("a")
    assert runs(p.env) == ["a::first", "a::second"]
    make(tmp_path, [reads_opset, reads_board], [export(tmp_path, value=2)]).run_export("a")
    assert runs(p.env) == ["a::first", "a::second", "a::first"]


def test_cached_result_with_deleted_artefact_reruns(tmp_path: Path) -> None:
    stages = [stage("first")]
    p = make(tmp_path, stages)
    out = Path(p.run_export("a")[0].artefacts["out"])
    out.unlink()
    make(tmp_path, stages).run_export("a")
    assert runs(p.env) == ["a::first", "a::first"]


def test_no_cache_reruns_but_a_run_token_runs_once(tmp_path: Path) -> None:
    stages = [stage("first")]
    make(tmp_path, stages).run_export("a")
    make(tmp_path, stages, use_cache=False).run_export("a")
    env_runs = runs(Environment(workdir=tmp_path / "work"))
    assert len(env_runs) == 2
    # Two workers of the same pytest run share a token: the second reuses.
    make(tmp_path, stages, use_cache=False, run_token="t1").run_export("a")
    make(tmp_path, stages, use_cache=False, run_token="t1").run_export("a")
    assert len(runs(Environment(workdir=tmp_path / "work"))) == 3


def test_crash_is_contained_with_a_crash_log_and_never_cached(tmp_path: Path) -> None:
    stages = [stage("first", outcome="crash"), stage("second", ("first",))]
    first, second = make(tmp_path, stages).run_export("a")
    assert first.status == Status.FAILED
    assert "internal error in stage first: ZeroDivisionError: boom" in first.summary
    assert "ZeroDivisionError" in Path(first.artefacts["crash_log"]).read_text()
    assert second.summary == "blocked by a::first"
    again, _ = make(tmp_path, stages).run_export("a")
    assert not again.cached
    assert runs(Environment(workdir=tmp_path / "work")) == ["a::first", "a::first"]


def test_user_error_in_a_stage_is_bad_input(tmp_path: Path) -> None:
    p = make(tmp_path, [stage("first", outcome="user")])
    (r,) = p.run_export("a")
    # Said where: the export's line in its manifest, then the key.
    assert r.status == Status.ERROR
    assert r.summary == f"{tmp_path / 'qnn-ci.yaml'}:3: exports.a.x: bad thing"
    assert exit_status({"a": [r]}) == 2


def _worker(tmp: str, barrier: Any) -> None:
    barrier.wait()
    make(Path(tmp), [stage("first"), stage("second", ("first",))]).run_export("a")


def test_exactly_once_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), barrier)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert sorted(runs(Environment(workdir=tmp_path / "work"))) == ["a::first", "a::second"]


@pytest.mark.parametrize("outcome", ["pass", "fail"])
def test_result_round_trips_through_the_store(tmp_path: Path, outcome: str) -> None:
    stages = [stage("first", outcome=outcome)]
    a = make(tmp_path, stages).run_export("a")[0]
    b = make(tmp_path, stages).run_export("a")[0]
    assert b.cached and (a.status, a.summary) == (b.status, b.summary)
