"""Relocation of stored results: folders become tokens and back, at path boundaries
only; relocatable text artefacts are rewritten for the new location."""

from __future__ import annotations

import json
from pathlib import Path

from qnn_ci.engine.cache import ResultStore
from qnn_ci.engine.relocate import PROJECT, WORKDIR, Roots, detokenize, tokenize
from qnn_ci.engine.results import StageResult, Status


def test_tokens_at_path_boundaries_only() -> None:
    roots = Roots("/ci/a/.qnn-ci", "/ci/a")
    value = {"m": "/ci/a/models/x.onnx", "w": "/ci/a/.qnn-ci/e/cal/list.txt",
             "other": "/ci/ab/x", "msg": "see /ci/a/.qnn-ci/e/log (in /ci/a)", "n": 3}
    t = tokenize(value, roots)
    assert t == {"m": f"{PROJECT}/models/x.onnx", "w": f"{WORKDIR}/e/cal/list.txt",
                 "other": "/ci/ab/x", "msg": f"see {WORKDIR}/e/log (in {PROJECT})", "n": 3}
    assert detokenize(t, roots) == value
    moved = Roots("/ci/b/.qnn-ci", "/ci/b")
    assert detokenize(t, moved)["m"] == "/ci/b/models/x.onnx"


def test_store_relocates_result_and_input_list(tmp_path: Path) -> None:
    old = Roots.of(tmp_path / "one" / "work", tmp_path / "one")
    stage = tmp_path / "one" / "work" / "e" / "calibration"
    stage.mkdir(parents=True)
    raw = stage / "x0.raw"
    raw.write_bytes(b"\0" * 16)
    listing = stage / "input_list.txt"
    listing.write_text(f"x:={raw}\n")
    result = StageResult("calibration", Status.PASSED, f"1 sample in {stage}",
                         artefacts={"input_list": str(listing)},
                         data={"model": str(tmp_path / "one" / "m.onnx")})
    ResultStore().save(stage, "k", result, roots=old)
    stored = json.loads((stage / "result.json").read_text())
    assert str(tmp_path) not in json.dumps(stored["result"])
    # the work folder restored at another path, next to another clone
    (tmp_path / "one").rename(tmp_path / "two")
    new = Roots.of(tmp_path / "two" / "work", tmp_path / "two")
    stage2 = tmp_path / "two" / "work" / "e" / "calibration"
    got = ResultStore().load(stage2, "k", roots=new)
    assert got is not None and got.cached
    assert got.artefacts["input_list"] == str(stage2 / "input_list.txt")
    assert got.data["model"] == str(tmp_path / "two" / "m.onnx")
    assert (stage2 / "input_list.txt").read_text() == f"x:={stage2 / 'x0.raw'}\n"


def test_result_saved_without_roots_still_loads(tmp_path: Path) -> None:
    result = StageResult("s", Status.PASSED, "ok")
    ResultStore().save(tmp_path, "k", result)
    got = ResultStore().load(tmp_path, "k", roots=Roots.of(tmp_path, None))
    assert got is not None and got.summary == "ok"
