"""The two routes in the engine and the manifest: ``route:`` read and refused in one
line, each route's stages planned (the other's ``applies()`` false), and a stage whose
needs differ by route (``Stage.needs_for``) planned, blocked and keyed by the needs of
its export's route."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import STAGE_ORDER, Environment, Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.stages.registry import load_stages, load_stages_for
from tests.core.graphs import scale_model

DLC_STAGES = ["dlc_convert", "dlc_quantize", "dlc_contract", "dlc_fp16_gate",
              "dlc_context_binary"]
CLASSIC_STAGES = ["dry_run", "convert", "contract", "fp16_gate", "model_lib", "so_load",
                  "htp_vs_cpu", "context_binary"]


def _export(tmp_path: Path, route: str = "classic", name: str = "a") -> ExportSpec:
    return ExportSpec(name=name, model=tmp_path / "m.onnx", manifest=tmp_path / "qnn-ci.yaml",
                      line=3, route=route)


def test_each_route_plans_its_own_stages_in_pipeline_order(tmp_path: Path) -> None:
    stages = load_stages()
    p = Pipeline([_export(tmp_path, "classic"), _export(tmp_path, "dlc", "b")],
                 Environment(workdir=tmp_path / "w"), stages=stages)
    classic, dlc = p.stage_names(p.exports["a"]), p.stage_names(p.exports["b"])
    assert not set(DLC_STAGES) & set(classic) and set(CLASSIC_STAGES) <= set(classic)
    assert not set(CLASSIC_STAGES) & set(dlc)
    assert [s for s in dlc if s.startswith("dlc_")] == DLC_STAGES
    assert dlc[-2:] == ["context_run", "regression"]
    assert [s for s in STAGE_ORDER if s in dlc] == dlc
    for name in DLC_STAGES:
        assert stages[name].marker == "qnn_sdk" and stages[name].route == "dlc"
    assert stages["context_run"].needs_for(p.exports["b"]) == (
        "dlc_context_binary", "calibration", "static_shapes", "dlc_quantize")
    assert "htp_vs_cpu" in stages["context_run"].needs_for(p.exports["a"])


def test_a_run_of_some_stages_loads_the_needs_of_its_exports_route(tmp_path: Path) -> None:
    dlc = load_stages_for({"context_run"}, [_export(tmp_path, "dlc")])
    assert {"dlc_context_binary", "dlc_quantize", "dlc_convert", "dlc_fp16_gate"} <= set(dlc)
    assert not {"htp_vs_cpu", "convert", "so_load"} & set(dlc)
    classic = load_stages_for({"context_run"}, [_export(tmp_path)])
    assert {"htp_vs_cpu", "context_binary", "convert"} <= set(classic)
    assert not {n for n in classic if n.startswith("dlc_")}
    assert {"htp_vs_cpu", "dlc_context_binary"} <= set(load_stages_for({"context_run"}))


class _Rec(Stage):
    log: ClassVar[list[str]] = []
    fail: ClassVar[bool] = False

    def run(self, ctx: StageContext) -> StageResult:
        self.log.append(f"{ctx.export.name}::{self.name}:{sorted(ctx.upstream)}")
        out = ctx.workdir / "out.txt"
        out.write_text(self.name)
        if self.fail:
            return StageResult(self.name, Status.FAILED, "broken")
        return StageResult(self.name, Status.PASSED, "ok", artefacts={"out": str(out)})


class _ByRoute(_Rec):
    name = "last"
    needs = ("left",)

    def needs_for(self, export: ExportSpec, env: Environment | None = None
                  ) -> tuple[str, ...]:
        return ("right",) if export.route == "dlc" else self.needs


def test_needs_for_decides_upstream_blocked_by_and_the_cache_key(tmp_path: Path) -> None:
    log: list[str] = []
    left = type("left", (_Rec,), {"name": "left", "log": log, "fail": True})()
    right = type("right", (_Rec,), {"name": "right", "log": log})()
    last = type("last", (_ByRoute,), {"log": log})()
    env = Environment(workdir=tmp_path / "w")
    exports = [_export(tmp_path, "classic", "c"), _export(tmp_path, "dlc", "d")]
    p = Pipeline(exports, env, stages={s.name: s for s in (left, right, last)})
    assert p.result("c", "last").summary == "blocked by c::left"     # its own route's need
    assert p.result("d", "last").status == Status.PASSED
    assert "d::last:['right']" in log and "d::left" not in " ".join(log)
    # keyed by the route's upstream: the same result again from the cache
    again = Pipeline(exports, env, stages={s.name: s for s in (left, right, last)})
    assert again.result("d", "last").cached


def _manifest(tmp_path: Path, body: str) -> Path:
    scale_model(tmp_path / "m.onnx")
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(body).lstrip())
    return p


def test_route_is_read_from_the_export_or_defaults_classic_when_unset(tmp_path: Path) -> None:
    m = load_manifest(_manifest(tmp_path, """
        defaults:
          route: dlc
          dlc: {input_layout: {x: NCHW}, preserve_io: true}
        exports:
          - {name: a, model: m.onnx}
          - {name: b, model: m.onnx, route: classic}
        """))
    a, b = m.exports
    assert (a.route, b.route) == ("dlc", "classic")
    assert a.dlc.input_layout == {"x": "NCHW"} and a.dlc.preserve_io
    plain = load_manifest(_manifest(tmp_path, "exports:\n  - {name: a, model: m.onnx}\n"))
    assert plain.exports[0].route == "classic" and not plain.exports[0].dlc.preserve_io


@pytest.mark.parametrize("body,line,key,words", [
    ("exports:\n  - name: a\n    model: m.onnx\n    route: dcl\n", 4, "exports[0].route",
     "'dcl' is not one of ['classic', 'dlc'] (did you mean 'dlc'?)"),
    ("defaults:\n  route: clasic\nexports:\n  - {name: a, model: m.onnx}\n", 2,
     "defaults.route", "(did you mean 'classic'?)"),
    ("exports:\n  - name: a\n    model: m.onnx\n    dlc: {input_layout: {xx: NCHW}}\n", 4,
     "exports[0].dlc.input_layout.xx", "has no input 'xx' (did you mean 'x'?)"),
    ("exports:\n  - name: a\n    model: m.onnx\n    dlc: {preserve: true}\n", 4,
     "exports[0].dlc.preserve", "(did you mean 'preserve_io'?)"),
])
def test_a_wrong_route_or_dlc_key_is_one_line_with_file_line_key(
        tmp_path: Path, body: str, line: int, key: str, words: str) -> None:
    with pytest.raises(UserError) as info:
        load_manifest(_manifest(tmp_path, body))
    err = info.value
    text = err.oneline()
    assert "\n" not in text and words in text, text
    assert (err.line, err.key) == (line, key), text


def test_the_route_is_not_in_any_stage_cache_key() -> None:
    for stage in load_stages().values():
        assert stage.settings is not None and "route" not in stage.settings, stage.name
