"""Hostile manifests: whatever the bytes, `qnn-ci run` prints one line naming the
file, line and key and exits 2, and the pytest plugin reports one failing
manifest item -- never a traceback, a hang or a memory blow-up."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from qnn_ci.cli import main
from qnn_ci.errors import UserError
from qnn_ci.manifest import yaml_lines
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.manifest.yaml_lines import MAX_DEPTH, MAX_NODES, load_yaml_with_lines
from tests.core.graphs import scale_model, two_input_model

pytest_plugins = ["pytester"]


def laughs(levels: int) -> str:
    """An alias "billion laughs": each level lists the previous one 10 times."""
    out = ["x-l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        out.append(f"x-l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]")
    out.append(f"exports: [{{name: a, model: m.onnx, inputs: {{x: {{value: *l{levels - 1}}}}}}}]")
    return "\n".join(out) + "\n"


def export(extra: str = "", *, model: str = "m.onnx", name: str = "a") -> str:
    return f"exports:\n  - name: {name}\n    model: {model}\n{extra}"


LONG = "x" * 300

# id, manifest bytes, line, key (None: no key), words in the message
CASES: list[tuple[str, bytes | str, int, str | None, str]] = [
    ("utf16", b"\xff\xfe", 1, None, "not UTF-8 text"),
    ("latin1", export("    target: {soc: \xe9}\n").encode("latin-1"), 4, None,
     "not UTF-8 text: byte 0xe9"),
    ("deep-list", "exports: " + "[" * 1500 + "]" * 1500 + "\n", 1, None,
     f"nested more than {MAX_DEPTH} levels"),
    ("deep-map", export("    inputs: " + "{a: " * 1500 + "1" + "}" * 1500 + "\n"), 4, None,
     f"nested more than {MAX_DEPTH} levels"),
    ("deep-via-aliases", "".join(
        f"x-{i}: &a{i} " + "[" * 40 + (f"*a{i - 1}" if i else "1") + "]" * 40 + "\n"
        for i in range(3)) + export(), 2, None, "levels deep once aliases are expanded"),
    ("recursive-alias", "exports: &a [*a]\n", 1, None, "alias *a"),
    ("recursive-merge", "x-a: &a\n  b: 1\n  <<: *a\n" + export(), 3, None, "alias *a"),
    ("undefined-alias", export("    target: *nothing\n"), 4, None, "undefined alias"),
    ("complex-key", "? [a, b]\n: 1\n", 1, None, "keys are names"),
    ("map-tag-on-list", "exports: !!map\n  - a\n", 1, None, "tag !!map"),
    ("set-tag", export("    inputs: !!set {x}\n"), 4, None, "tag !!set"),
    ("python-tag", export("    board: !!python/name:os.system\n"), 4, None,
     "tag !!python/name:os.system"),
    ("local-tag", export("    board: !vault secret\n"), 4, None, "tag !vault"),
    ("int-key", export("    inputs: {1: {shape: [1, 128]}}\n"), 4, None,
     "key '1' must be a string"),
    ("bool-key", export("    inputs:\n      on: {shape: [1, 4]}\n"), 5, None,
     "key 'on' must be a string"),
    ("null-key", export("    inputs: {~: {shape: [1, 4]}}\n"), 4, None, "must be a string"),
    ("line-break-in-key", export('    inputs: {"a\\rb": {shape: [1, 4]}}\n'), 4,
     "exports[0].inputs.'a\\rb'", "has no input 'a\\rb'"),
    ("duplicate-key", export("    model: m.onnx\n"), 4, None,
     "duplicate key 'model' (first at line 3)"),
    ("bad-int-tag", export("    opset: !!int seventeen\n"), 4, None, "is not an integer"),
    ("bad-binary-int", export("    opset: 0b_\n"), 4, None, "'0b_' is not an integer"),
    ("bad-float", export("    thresholds: {snr: !!float abc}\n"), 4, None, "is not a number"),
    ("bad-bool-tag", export("    native_outputs: !!bool maybe\n"), 4, None,
     "is not a boolean"),
    ("long-int", export("    opset: " + "1" * 5000 + "\n"), 4, None, "too many digits"),
    ("merge-scalar", "x-a: 1\n" + export("    <<: 1\n"), 5, None, "`<<` merges a mapping"),
    ("control-char", export("    board: a\x07b\n"), 4, None, "#x0007 is not allowed"),
    ("tilde-user", export(model='"~nosuchuser_qnn_ci/m.onnx"'), 3, "exports[0].model",
     "write the full path"),
    ("nul-in-path", export(model='"m\\0.onnx"'), 3, "exports[0].model", "null byte"),
    ("pkg-main", export(model="pkg:__main__/x.onnx"), 3, "exports[0].model",
     "cannot locate Python package '__main__'"),
    ("pkg-missing", export(model="pkg:no_such_pkg_qnn_ci/x.onnx"), 3, "exports[0].model",
     "exports[0].model: Python package 'no_such_pkg_qnn_ci' is not installed here (pip "
     "install it where qnn-ci runs -- in the GitHub Action, with its install: input"),
    ("generator-main", export('    calibration: {generator: "__main__:f"}\n'), 4,
     "exports[0].calibration.generator", "cannot look up module '__main__'"),
    ("long-generator", export(f'    calibration: {{generator: "{LONG}:f"}}\n'), 4,
     "exports[0].calibration.generator", "cannot look up module"),
    ("int64-overflow", export("    inputs: {ids: {value: 99999999999999999999}}\n",
                              model="two.onnx"), 4, "exports[0].inputs.ids.value",
     "does not fit int64"),
    ("int64-inf", export("    inputs: {ids: {value: .inf}}\n", model="two.onnx"), 4,
     "exports[0].inputs.ids.value", "inf is not finite"),
    ("int64-fraction", export("    inputs: {ids: {value: [1, 2.5]}}\n", model="two.onnx"), 4,
     "exports[0].inputs.ids.value", "2.5 is not a whole number"),
    ("float32-overflow", export("    inputs: {x: {value: 1.0e+39}}\n"), 4,
     "exports[0].inputs.x.value", "does not fit float32"),
    ("long-model-path", export(model=f"{LONG}.onnx"), 3, "exports[0].model",
     "fix the path"),
    ("long-input-list", export(f"    calibration: {{input_list: {LONG}.txt}}\n"), 4,
     "exports[0].calibration.input_list", "fix the path"),
    ("long-export-name", export(name="a" * 300), 2, "exports[0].name",
     "300 characters, more than 100"),
    ("nan-cosine", export("    thresholds: {cosine: .nan}\n"), 4,
     "exports[0].thresholds.cosine", "NaN"),
    ("nan-per-output", export("    thresholds: {outputs: {y: {snr: .NaN}}}\n"), 4,
     "exports[0].thresholds.outputs.y.snr", "NaN"),
    ("nan-in-defaults", "defaults:\n  thresholds: {max_abs: .nan}\n" + export(), 2,
     "defaults.thresholds.max_abs", "NaN"),
    ("infinite-timeout", export("    sdk: {timeout: .inf}\n"), 4, "exports[0].sdk.timeout",
     "is infinite"),
    ("float-samples", export("    calibration: {samples: 4.0}\n"), 4,
     "exports[0].calibration.samples", "expected integer, got float"),
    ("huge-dim", export("    inputs: {x: {shape: [1, 99999999999999999999]}}\n"), 4,
     "exports[0].inputs.x.shape[1]", "maximum"),
    ("too-many-exports", "exports:\n" + "".join(
        f"  - {{name: e{i}, model: m.onnx}}\n" for i in range(1001)), 1, "exports",
     "1001 entries, more than the 1000"),
    ("laughs-8", laughs(8), 5, None, f"more than {MAX_NODES:,} values once aliases"),
    ("laughs-9", laughs(9), 5, None, f"more than {MAX_NODES:,} values once aliases"),
    ("too-big", "# " + "x" * (1 << 20) + "\n" + export(), 0, None, "more than the 1.0 MiB"),
]


@pytest.fixture(params=yaml_lines._LOADERS, ids=lambda c: c.__name__)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each YAML parser the loader can use: libyaml's (when PyYAML has it) and the
    pure-Python fallback."""
    monkeypatch.setattr(yaml_lines, "_LOADERS", [request.param])


@pytest.fixture
def script_main(monkeypatch: pytest.MonkeyPatch) -> None:
    """`__main__` as under the `qnn-ci` console script, where it has no spec (under
    pytest it is pytest's), so `pkg:__main__/...` and `__main__:f` meet the real
    ValueError of importlib.util.find_spec."""
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)


def setup(folder: Path, text: bytes | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    scale_model(folder / "m.onnx")
    two_input_model(folder / "two.onnx")
    p = folder / "qnn-ci.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.mark.parametrize(("text", "line", "key", "words"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.usefixtures("script_main", "loader")
def test_cli_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             text: bytes | str, line: int, key: str | None, words: str) -> None:
    p = setup(tmp_path, text)
    started = time.monotonic()
    status = main(["run", str(p), "--workdir", str(tmp_path / "w"), "--stage", "static_shapes"])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    where = f"{p.resolve()}:{line}: " if line else f"{p.resolve()}: "
    assert where in lines[0], lines[0]
    if key:
        assert f"{where}{key}: " in lines[0], lines[0]
    assert words in lines[0], lines[0]
    assert took < 5, f"took {took:.1f} s"   # refused, not computed


@pytest.mark.usefixtures("script_main")
def test_plugin_reports_each_hostile_manifest_as_one_failing_item(
        pytester: pytest.Pytester) -> None:
    picked = [c for c in CASES if c[0] != "too-big"]
    for case_id, text, *_ in picked:
        setup(pytester.path / case_id, text)
    res = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-rf")
    out = res.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    res.assert_outcomes(failed=len(picked))
    for case_id, _text, line, key, words in picked:
        where = f"{case_id}/qnn-ci.yaml:{line}: " + (f"{key}: " if key else "")
        assert any(where in x and words in x for x in res.outlines), (case_id, out[-3000:])


@pytest.mark.usefixtures("loader")
def test_laughs_refused_fast_and_small(tmp_path: Path) -> None:
    setup(tmp_path, "")
    for levels in (8, 9, 12):
        (tmp_path / "qnn-ci.yaml").write_text(laughs(levels))
        started = time.monotonic()
        with pytest.raises(UserError, match="once aliases are expanded"):
            load_manifest(tmp_path / "qnn-ci.yaml")
        assert time.monotonic() - started < 2


@pytest.mark.usefixtures("loader")
def test_utf8_bom_is_read(tmp_path: Path) -> None:
    p = setup(tmp_path, b"\xef\xbb\xbf" + export("    target: {soc: QCS6490}\n").encode())
    m = load_manifest(p)
    assert [e.name for e in m.exports] == ["a"] and m.exports[0].target.soc == "QCS6490"
    assert m.exports[0].line == 2


MERGED = """\
x-common: &common
  model: m.onnx
  inputs: {x: {shape: [1, 4]}}
  thresholds: {cosine: 0.9}
exports:
  - <<: *common
    name: a
  - <<: *common
    name: b
    thresholds: {cosine: 0.5}
  - &c
    name: c
    model: two.onnx
    target: {soc: QCS6490}
  - <<: [*c, *common]
    name: d
"""


@pytest.mark.usefixtures("loader")
def test_merge_keys_work_and_keep_lines(tmp_path: Path) -> None:
    m = load_manifest(setup(tmp_path, MERGED))
    a, b, c, d = m.exports
    assert a.model.name == b.model.name == "m.onnx" and a.inputs["x"].shape == (1, 4)
    assert a.thresholds.default["cosine"] == 0.9 and b.thresholds.default["cosine"] == 0.5
    # Earlier merges win over later ones; keys written in the mapping win over both.
    assert d.name == "d" and d.model.name == "two.onnx" and d.target.soc == "QCS6490"
    assert d.thresholds.default["cosine"] == 0.9
    assert (a.line, b.line, c.line, d.line) == (6, 8, 11, 15)
    # A merged key keeps the line it is written on.
    assert m.lines[("exports", 0, "model")] == 2 and m.lines[("exports", 1, "thresholds")] == 10
    assert m.lines[("exports", 3, "model")] == 13 and m.lines[("exports", 3, "name")] == 16


def test_merged_error_points_at_the_anchor_and_names_the_export(tmp_path: Path) -> None:
    p = setup(tmp_path, MERGED.replace("inputs: {x:", "inputs: {q:"))
    with pytest.raises(UserError) as info:
        load_manifest(p)
    assert info.value.line == 3 and "(export 'a')" in str(info.value)
    assert "has no input 'q'" in str(info.value)


def test_duplicate_keys_still_refused_next_to_merges(tmp_path: Path) -> None:
    p = setup(tmp_path, MERGED.replace("    name: d\n", "    name: d\n    name: e\n"))
    with pytest.raises(UserError, match=r"duplicate key 'name' \(first at line 16\)") as info:
        load_manifest(p)
    assert info.value.line == 17


def test_a_few_anchors_for_defaults_keep_working(tmp_path: Path) -> None:
    p = setup(tmp_path, """\
defaults: &defaults
  target: {soc: QCS6490}
  thresholds: &th {cosine: 0.98, outputs: {y: {max_abs: 0.5}}}
exports:
  - {name: a, model: m.onnx, thresholds: *th}
  - name: b
    model: m.onnx
    <<: *defaults
    quantization: {act_bitwidth: 16}
""")
    a, b = load_manifest(p).exports
    assert a.thresholds.for_output("y") == {"cosine": 0.98, "max_abs": 0.5}
    assert b.target.soc == "QCS6490" and b.quantization.act_bitwidth == 16


def test_dates_and_equals_read_as_text(tmp_path: Path) -> None:
    p = setup(tmp_path, export("    target: {soc: QCS6490, lib_target: 2024-01-01}\n"
                               "    board: =\n"))
    e = load_manifest(p).exports[0]
    assert e.target.lib_target == "2024-01-01" and e.board == "="


def test_longest_export_name_fits_its_work_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    name = "n" * 100
    p = setup(tmp_path, export("    inputs: {x: {shape: [1, 4]}}\n", name=name))
    work = tmp_path / "w"
    status = main(["run", str(p), "--workdir", str(work), "--stage", "static_shapes"])
    assert status == 0, capsys.readouterr().err
    assert (work / name / "static_shapes").is_dir()


@pytest.mark.parametrize(("data", "line"), [
    (b"a: 1\n" * 3, 2), (b"[" * 70 + b"]" * 70, 1), (b"x: 1\n\x00", 2), (b"&a [*a]", 1),
    (b"a: !!binary aGk=", 1), (b"a:\n  - 1\n  - \xc3", 3)])
@pytest.mark.usefixtures("loader")
def test_yaml_loader_refuses_with_file_and_line(tmp_path: Path, data: bytes, line: int) -> None:
    p = tmp_path / "f.yaml"
    p.write_bytes(data)
    with pytest.raises(UserError) as info:
        load_yaml_with_lines(p)
    assert str(p) in str(info.value) and info.value.line == line


def test_manifest_module_imports_no_heavy_modules() -> None:
    """`import qnn_ci.plugin` stays light: the manifest module imports jsonschema,
    onnx and numpy only when it loads a manifest."""
    code = ("import sys, qnn_ci.manifest.loader; "
            "print(sorted({'jsonschema', 'onnx', 'numpy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
