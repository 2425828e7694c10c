"""The cached path at start-up speed: model signatures and passed schema checks are
remembered on disk (``<workdir>/.memo``) keyed by content, so a re-run imports
neither onnx, numpy nor jsonschema -- and a changed model or manifest is never
answered from the memo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.model import signature as model_signature_module
from qnn_ci.model.onnx_io import model_signature
from qnn_ci.model.signature import signature
from qnn_ci.model.tensors import ModelSignature
from qnn_ci.util.memo import MEMO_DIR, Memo, memo_key
from tests.core.graphs import scale_model, two_input_model

REAL = ("cls_model", "det_model", "rec_model", "silero_model", "silero_sequence_model")


@pytest.fixture(autouse=True)
def _fresh_process_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the disk memo, not what another test left in this worker's
    in-process memo."""
    monkeypatch.setattr(model_signature_module, "_SEEN", {})


def _manifest(folder: Path, body: str) -> Path:
    path = folder / "qnn-ci.yaml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.mark.parametrize("fixture", REAL)
def test_memoised_signature_equals_the_full_reader_on_real_models(
        fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    model: Path = request.getfixturevalue(fixture)
    want = model_signature(model)
    first = signature(model, tmp_path)                       # computed, then stored
    assert first == want
    assert ModelSignature.from_json(json.loads(json.dumps(want.to_json()))) == want
    entries = list((tmp_path / "signature").rglob("*.json"))
    assert len(entries) == 1
    from qnn_ci.model import signature as ms
    ms._SEEN.clear()                                          # a new process: disk only
    assert signature(model, tmp_path) == want


@pytest.mark.parametrize("build", [
    lambda p: scale_model(p, dims=["N", 4]),
    lambda p: scale_model(p, dims=[1, 3, "H", 0], in_name="in:0", out_name="o/1"),
    lambda p: two_input_model(p),
])
def test_memoised_signature_equals_the_full_reader_on_tiny_graphs(build, tmp_path: Path
                                                                  ) -> None:
    model = build(tmp_path / "m.onnx")
    from qnn_ci.model import signature as ms
    signature(model, tmp_path / "memo")
    ms._SEEN.clear()
    assert signature(model, tmp_path / "memo") == model_signature(model)


def test_a_changed_model_is_read_again_not_answered_from_the_memo(tmp_path: Path) -> None:
    model = scale_model(tmp_path / "m.onnx", in_name="x")
    memo = tmp_path / "memo"
    assert list(signature(model, memo).inputs) == ["x"]
    scale_model(model, in_name="renamed")            # same path, new content
    os.utime(model, ns=(1, 1))                       # even with an old mtime
    from qnn_ci.model import signature as ms
    ms._SEEN.clear()
    assert list(signature(model, memo).inputs) == ["renamed"]


@pytest.mark.parametrize("junk", [b"", b"{", b"[]", b'{"key": "x", "value": 1}',
                                  b"\xff\xfe", b"9" * 5000])
def test_a_damaged_memo_entry_is_a_miss(junk: bytes, tmp_path: Path) -> None:
    model = scale_model(tmp_path / "m.onnx")
    memo = tmp_path / "memo"
    want = signature(model, memo)
    [entry] = (memo / "signature").rglob("*.json")
    entry.write_bytes(junk)
    from qnn_ci.model import signature as ms
    ms._SEEN.clear()
    assert signature(model, memo) == want
    assert Memo(memo).get("signature", entry.stem) == want.to_json()   # rewritten


def test_a_forged_signature_under_another_key_is_not_used(tmp_path: Path) -> None:
    model = scale_model(tmp_path / "m.onnx", in_name="x")
    memo = tmp_path / "memo"
    signature(model, memo)
    [entry] = (memo / "signature").rglob("*.json")
    forged = {"inputs": [["forged", None, "float32"]], "outputs": [], "external_data": []}
    entry.write_text(json.dumps({"key": memo_key("other"), "value": forged}))
    from qnn_ci.model import signature as ms
    ms._SEEN.clear()
    assert list(signature(model, memo).inputs) == ["x"]


def test_hostile_model_errors_are_the_full_readers_and_not_memoised(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    memo = tmp_path / "memo"
    with pytest.raises(UserError, match="cannot read ONNX model"):
        signature(bad, memo)
    assert not (memo / "signature").exists()
    with pytest.raises(UserError, match="model not found"):
        signature(tmp_path / "missing.onnx", memo)
    fifo = tmp_path / "fifo.onnx"
    os.mkfifo(fifo)
    with pytest.raises(UserError):                   # refused, not a hang on the hash
        signature(fifo, memo)


def test_memo_store_ignores_what_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    memo = Memo(blocker / "below")                    # a file where a folder should be
    key = memo_key("k")
    memo.put("signature", key, {"a": 1})
    assert memo.get("signature", key) is None
    assert Memo(None).get("signature", key) is None
    assert Memo(tmp_path).get("signature", "../../etc") is None
    Memo(tmp_path).put("signature", key, [1, 2])
    assert Memo(tmp_path).get("signature", key) == [1, 2]


def test_the_schema_check_is_remembered_only_for_the_exact_document(
        cls_model: Path, tmp_path: Path) -> None:
    memo = tmp_path / "memo"
    path = _manifest(tmp_path, f"""
        exports:
          - name: a
            model: {cls_model}
            sdk: {{timeout: 30}}
    """)
    load_manifest(path, memo_dir=memo)
    assert len(list((memo / "schema").rglob("*.json"))) == 1
    load_manifest(path, memo_dir=memo)                # a hit: no new entry
    assert len(list((memo / "schema").rglob("*.json"))) == 1
    # 30 -> "30": valid YAML, a different document; the schema still refuses it.
    path.write_text(path.read_text().replace("timeout: 30", "timeout: '30'"))
    with pytest.raises(UserError, match=r"sdk\.timeout"):
        load_manifest(path, memo_dir=memo)
    path.write_text(path.read_text().replace("sdk:", "sdkk:"))
    with pytest.raises(UserError, match="unknown key 'sdkk'"):
        load_manifest(path, memo_dir=memo)


def test_a_typed_value_is_not_confused_with_its_twin(cls_model: Path, tmp_path: Path) -> None:
    """samples: 4 passes; samples: 4.0 must not ride on 4's memo entry."""
    memo = tmp_path / "memo"
    text = f"exports:\n  - name: a\n    model: {cls_model}\n    sim: {{samples: 4}}\n"
    path = tmp_path / "qnn-ci.yaml"
    path.write_text(text)
    load_manifest(path, memo_dir=memo)
    path.write_text(text.replace("samples: 4}", "samples: 4.0}"))
    with pytest.raises(UserError, match=r"sim\.samples"):
        load_manifest(path, memo_dir=memo)


def test_a_cached_rerun_imports_no_onnx_numpy_or_jsonschema(cls_model: Path,
                                                             tmp_path: Path) -> None:
    path = _manifest(tmp_path, f"""
        exports:
          - name: a
            model: {cls_model}
    """)
    workdir = tmp_path / "work"
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from qnn_ci.runner.session import Options, open_pipeline
        opened = open_pipeline(Path({str(path)!r}), Options(workdir=Path({str(workdir)!r})))
        assert list(opened.manifest.exports[0].inputs), "signature read"
        print(sorted(m for m in ("numpy", "onnx", "jsonschema", "onnxruntime")
                     if m in sys.modules))
    """)
    def run() -> str:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert "onnx" in run()                            # first run: reads the model
    assert (workdir / MEMO_DIR).is_dir()
    assert run() == "[]"                              # re-run: from the memo


def test_every_dataclass_has_a_docstring() -> None:
    """A dataclass without one makes Python build its ``__doc__`` from
    ``inspect.signature`` at import (~0.5 ms a class, dozens on the cached path)."""
    import ast

    root = Path(__file__).resolve().parents[2] / "qnn_ci"
    missing = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    "dataclass" in ast.unparse(d) for d in node.decorator_list) \
                    and ast.get_docstring(node) is None:
                missing.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}")
    assert not missing, missing


# What only running a stage needs: making calibration samples, running an SDK tool,
# reading an ELF file, reaching a board. A cached run computes keys and reads results.
RUN_ONLY = ("qnn_ci.calibration.make_samples", "qnn_ci.calibration.sources",
            "qnn_ci.calibration.validate", "qnn_ci.engine.shared_results", "qnn_ci.sdk.toolrun",
            "qnn_ci.sdk.elf", "qnn_ci.transport.base", "qnn_ci.boards.storage",
            "qnn_ci.transport.config")


def test_a_cached_run_imports_nothing_only_running_a_stage_needs(tmp_path: Path) -> None:
    model = scale_model(tmp_path / "m.onnx")
    (tmp_path / "gens.py").write_text(textwrap.dedent("""
        import numpy as np

        def samples(count):
            for i in range(count):
                yield {"x": np.full((1, 4), i + 1, np.float32)}
    """))
    _manifest(tmp_path, f"""
        defaults:
          inputs: {{x: {{shape: [1, 4]}}}}
          calibration: {{generator: 'gens:samples', samples: 3, held_out: 0}}
        exports:
          - name: a
            model: {model}
            board: rb3
    """)
    code = textwrap.dedent(f"""
        import sys
        from qnn_ci.cli import main
        code = main(["run", "--workdir", {str(tmp_path / "work")!r}])
        print(code, sorted(m for m in {RUN_ONLY!r} if m in sys.modules))
    """)

    def run() -> str:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, cwd=tmp_path).stdout.strip().splitlines()[-1]
    first = run()       # the first run makes the samples
    assert first.startswith("0 ") and "qnn_ci.calibration.make_samples" in first
    assert run() == "0 []"
