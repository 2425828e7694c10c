"""Fuzz the content-addressed store of work shared across exports: an entry folder
with a hostile ``meta.json`` (any bytes, any JSON, names escaping the folder, sizes
that lie, folders where files belong) must read as "not there" (recomputed) or as
an entry whose every listed file is a regular file inside it; reusing it (the
calibration samples, the QDQ model) gives a result or falls back to computing,
never another exception and never a file written outside the stage folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.calibration.make_samples import reuse as reuse_samples
from qnn_ci.engine.results import Status
from qnn_ci.engine.shared_results import META, claim, safe_name
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.sim.shared_quantize import FLOAT, LOG, QDQ, _reuse

NAMES = st.sampled_from(["raw/x_0.raw", "raw/x_1.raw", "../escape.raw", "/etc/passwd",
                         "raw//x.raw", "raw/./x_0.raw", "", "raw", QDQ, FLOAT, LOG, "a\0b",
                         "raw/x_0.raw/deeper", "é.raw"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 70), st.floats(),
                    st.text(max_size=8), NAMES)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(NAMES, st.text(max_size=6)),
                                                  inner, max_size=4)), max_leaves=20)
ROW = st.dictionaries(st.sampled_from(["x", "y", "../x"]),
                      st.sampled_from(["x_0.raw", "x_1.raw", "../../escape.raw", "nope.raw",
                                       "/abs.raw"]), max_size=2)
META_DOC = st.fixed_dictionaries({
    "files": st.one_of(st.dictionaries(NAMES, st.one_of(st.integers(0, 20), SCALARS),
                                       max_size=5), JSON),
    "meta": st.one_of(JSON, st.fixed_dictionaries({
        "lists": st.one_of(JSON, st.dictionaries(
            st.sampled_from(["input_list", "held_out_list", "other"]),
            st.lists(ROW, max_size=3), max_size=2)),
        "result": st.one_of(JSON, st.fixed_dictionaries({
            "stage": st.sampled_from(["calibration", "sim_npu", 3]),
            "status": st.sampled_from(["passed", "failed", "bogus"]),
            "data": st.one_of(JSON, st.fixed_dictionaries(
                {"inputs": st.dictionaries(st.sampled_from(["x", "y"]), JSON, max_size=2)})),
            "summary": SCALARS}))})),
    "export": SCALARS}).map(lambda d: {**d, "meta": d["meta"] if isinstance(d["meta"], dict)
                                       else {"x": d["meta"]}})
# A sound entry for calibration and quantization, then one part swapped for junk.
SOUND = {"files": {}, "export": "a", "meta": {
    "lists": {"input_list": [{"x": "x_0.raw"}], "held_out_list": [{"x": "x_1.raw"}]},
    "result": {"stage": "calibration", "status": "passed", "summary": "2 samples",
               "data": {"inputs": {"x": {"dtype": "float32", "shape": [1]}}},
               "findings": [], "properties": {}},
    "constants_folded": 0, "samples": 1, "opset": 21, "findings": [], "overrides": None}}
PARTS = st.sampled_from([None, "lists", "result", "findings", "overrides", "samples",
                         "constants_folded"])
NEAR_SOUND = st.tuples(PARTS, JSON, st.lists(ROW, max_size=2)).map(
    lambda t: {**SOUND, "meta": {**SOUND["meta"], **({t[0]: t[1]} if t[0] else {}),
                                 **({"lists": {"input_list": t[2]}} if t[2] else {})}})
SOUND_FILES = {"raw/x_0.raw": b"\0" * 4, "raw/x_1.raw": b"\1" * 4, QDQ: b"q", FLOAT: b"f",
               LOG: b""}
ENTRY = st.one_of(st.tuples(
    NEAR_SOUND.map(lambda d: json.dumps(d).encode()),
    st.dictionaries(st.sampled_from(list(SOUND_FILES)), st.just(None), max_size=1).map(
        lambda gone: {k: v for k, v in SOUND_FILES.items() if k not in gone}),
    st.just(False), st.booleans()), st.tuples(
    st.one_of(META_DOC.map(lambda d: json.dumps(d).encode()), st.binary(max_size=60),
              JSON.map(lambda d: json.dumps(d).encode())),
    st.dictionaries(st.sampled_from(["raw/x_0.raw", "raw/x_1.raw", QDQ, FLOAT, LOG, "raw"]),
                    st.one_of(st.binary(max_size=20), st.just(None)), max_size=5),
    st.booleans(),   # meta.json is a folder
    st.booleans()))  # "files" lists the laid-out files with their true sizes


def _lay_out(folder: Path, meta: bytes, files: dict[str, bytes | None], meta_dir: bool,
            honest: bool) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        path = folder / name
        if path.parent.is_file() or path.exists():
            continue                                  # "raw" already a file, or laid out
        path.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
    if honest:
        try:
            doc = json.loads(meta)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            doc["files"] = {n: (folder / n).stat().st_size for n in files
                            if (folder / n).is_file()}
            meta = json.dumps(doc).encode()
    if meta_dir:
        (folder / META).mkdir()
    else:
        (folder / META).write_bytes(meta)


_ROOT: dict[str, Path] = {}
_HITS: dict[str, int] = {}


@given(entry=ENTRY)
def test_a_hostile_entry_reads_as_missing_or_as_a_sound_entry(tmp_path_factory: Any,
                                                             entry: Any) -> None:
    root = _ROOT.setdefault("root", tmp_path_factory.mktemp("shared"))
    shutil.rmtree(root / "work", ignore_errors=True)
    env = Environment(workdir=root / "work")
    key = "k" * 64
    for stage in ("calibration", "sim_quantize"):
        _lay_out(env.workdir / ".shared" / stage / key, *entry)
    outside = root / "escape.raw"
    export = ExportSpec("e", root / "m.onnx", root / "qnn-ci.yaml", 1)
    with claim(env, "calibration", key, "e") as c:
        if c.hit:
            assert all(safe_name(n) and (c.folder / n).is_file() for n in c.files)
            workdir = env.workdir / "e" / "calibration"
            workdir.mkdir(parents=True)
            ctx = StageContext(export, env, workdir, upstream={})
            res = reuse_samples(ctx, c)
            _HITS["calibration"] = _HITS.get("calibration", 0) + (res is not None)
            if res is not None:
                assert res.status == Status.PASSED and "input_list" in res.artefacts
                text = Path(res.artefacts["input_list"]).read_text()
                assert ".." not in text
    with claim(env, "sim_quantize", key, "e") as c:
        if c.hit:
            dst = env.workdir / "e" / "sim_npu" / "m.qdq.onnx"
            res = _reuse(c, dst, dst.with_name("quantize.log"), 0.0)
            if res is not None:
                assert dst.is_file() and res.shared_from is not None
    assert not outside.exists()
