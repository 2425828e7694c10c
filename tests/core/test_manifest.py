"""The manifest: defaults and overrides, path resolution, and one clear line
(file, line, key, what to do) for every kind of bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from qnn_ci.cli import main
from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest, schema
from tests.core.graphs import scale_model, two_input_model


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(text).lstrip())
    return p


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return scale_model(tmp_path / "m.onnx")


def error_of(path: Path) -> UserError:
    with pytest.raises(UserError) as info:
        load_manifest(path)
    return info.value


def test_defaults_merge_and_resolve(tmp_path: Path, model: Path) -> None:
    (tmp_path / "cal.txt").write_text("")
    p = write(tmp_path, """
        defaults:
          target: {soc: QCS6490, lib_target: aarch64-oe-linux-gcc11.2}
          quantization: {per_channel: true}
          thresholds: {cosine: 0.995, outputs: {y: {max_abs: 0.5}}}
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
            calibration: {input_list: cal.txt}
            quantization: {act_bitwidth: 8}
          - name: b
            model: m.onnx
            target: {soc: SM8550}
            thresholds: {cosine: 0.9}
        """)
    m = load_manifest(p)
    a, b = m.exports
    assert a.model == model.resolve()
    assert a.calibration.input_list == (tmp_path / "cal.txt").resolve()
    assert a.quantization.act_bitwidth == 8 and a.quantization.per_channel
    assert a.quantization.weights_bitwidth == 8 and a.quantization.bias_bitwidth == 32
    assert a.target.soc == "QCS6490" and b.target.soc == "SM8550"
    assert b.target.lib_target == "aarch64-oe-linux-gcc11.2"
    assert a.thresholds.for_output("y") == {"cosine": 0.995, "max_abs": 0.5}
    assert b.thresholds.for_output("y") == {"cosine": 0.9, "max_abs": 0.5}
    assert a.inputs["x"].shape == (1, 4) and a.inputs["x"].dtype == "float32"
    assert a.line == 6 and b.line == 11


def test_pkg_paths_name_files_in_installed_packages(tmp_path: Path, cls_model: Path) -> None:
    p = write(tmp_path, """
        exports:
          - name: cls
            model: pkg:rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx
        """)
    assert load_manifest(p).exports[0].model == cls_model.resolve()
    p = write(tmp_path, """
        exports:
          - name: cls
            model: pkg:no_such_package_here/m.onnx
        """)
    err = error_of(p)
    assert "'no_such_package_here' is not installed" in str(err) and err.line == 3


@pytest.mark.parametrize(("body", "line", "key", "words"), [
    ("""
     exports:
       - name: a
         model: m.onnx
         calibrashun: {}
     """, 4, "exports[0].calibrashun", "did you mean 'calibration'"),
    ("""
     exports:
       - name: a
         model: m.onnx
         quantization: {act_bitwidth: "16"}
     """, 4, "exports[0].quantization.act_bitwidth", "expected integer, got str"),
    ("""
     exports:
       - name: a
         model: missing.onnx
     """, 3, "exports[0].model", "model not found"),
    ("""
     exports:
       - name: a
         model: m.onnx
       - name: a
         model: m.onnx
     """, 4, "exports[1].name", "duplicate export name 'a' (first at line 2)"),
    ("""
     defaults:
       target: {soc: QCS6409}
     exports:
       - name: a
         model: m.onnx
     """, 2, "defaults.target.soc", "unknown SoC 'QCS6409' (did you mean QCS6490?)"),
    ("""
     exports:
       - name: a
         model: m.onnx
         calibration: {from: c}
       - name: b
         model: m.onnx
         calibration: {from: a}
       - name: c
         model: m.onnx
         calibration: {from: b}
     """, 4, "exports[0].calibration.from", "cycle in calibration `from:` chain: a -> c -> b -> a"),
    ("""
     exports:
       - name: a
         model: m.onnx
         calibration: {from: nope}
     """, 4, "exports[0].calibration.from", "no export named 'nope'"),
    ("""
     exports:
       - name: a
         model: m.onnx
         inputs: {x: {shape: [1, 4, 4]}}
     """, 4, "exports[0].inputs.x.shape", "rank 3 but model input 'x' has rank 2"),
    ("""
     exports:
       - name: a
         model: m.onnx
         inputs: {xx: {shape: [1, 4]}}
     """, 4, "exports[0].inputs.xx", "has no input 'xx' (did you mean 'x'?)"),
    ("""
     exports:
       - name: a
         model: m.onnx
         inputs: {x: {dtype: int64}}
     """, 4, "exports[0].inputs.x.dtype", "disagrees with the model's float32"),
    ("""
     exports:
       - name: a
         model: m.onnx
         calibration: {input_list: cal.txt, generator: "m:f"}
     """, 4, "exports[0].calibration", "one calibration source, not input_list and generator"),
    ("""
     exports:
       - name: a
         model: m.onnx
         calibration: {input_list: nothere.txt}
     """, 4, "exports[0].calibration.input_list", "input list not found"),
    ("""
     exports:
       - name: a
         model: m.onnx
         name: b
     """, 4, None, "duplicate key 'name' (first at line 2)"),
    ("""
     exports:
       - name: a
         model: [m.onnx
     """, 4, None, "invalid YAML"),
    ("""
     exports: []
     """, 1, "exports", "should be non-empty"),
    ("""
     exports:
       - name: a
         model: m.onnx
         calibration: {generator: samples}
     """, 4, "exports[0].calibration.generator", "write package.module:function"),
    ("""
     exports:
       - name: a b
         model: m.onnx
     """, 2, "exports[0].name", "export name 'a b' may use letters"),
    ("""
     exports:
       - name: a
         model: m.onnx
         calibration: {generator: "nomodule_here:f"}
     """, 4, "exports[0].calibration.generator", "no module 'nomodule_here' in the manifest's"),
    ("""
     exports:
       - name: a
         model: m.onnx
         thresholds: {outputs: {yy: {cosine: 0.9}}}
     """, 4, "exports[0].thresholds.outputs.yy", "has no output 'yy' (did you mean 'y'?)"),
    ("""
     exports:
       - name: a
         model: m.onnx
         inputs:
           x: {shape: [1, 5]}
     """, 5, "exports[0].inputs.x.shape", "dim 1 is 5 but model input 'x' fixes it at 4"),
    ("""
     exports:
       - name: a
         model: m.onnx
         inputs: {x: {encoding: otherr}}
     """, 4, "exports[0].inputs.x.encoding", "'otherr' is not one of"),
    ("""
     defaults:
       inputs: {xx: {shape: [1, 4]}}
     exports:
       - name: a
         model: m.onnx
     """, 2, "defaults.inputs.xx", "(export 'a') has no input 'xx'"),
    ("""
     exports:
       - name: a
         model: m.onnx
       - name: b
         model: m.onnx
         calibration: {from: {export: a, outputs: {z: x}}}
     """, 6, "exports[1].calibration.from.outputs.z", "export 'a' (m.onnx) has no output 'z'"),
    ("""
     exports:
       - name: a
         model: m.onnx
       - name: b
         model: m.onnx
         calibration: {from: a}
     """, 6, "exports[1].calibration.from", "input(s) x of m.onnx get no upstream output"),
])
def test_bad_manifests_name_file_line_and_key(tmp_path: Path, model: Path, body: str,
                                              line: int, key: str | None, words: str) -> None:
    (tmp_path / "cal.txt").write_text("")
    err = error_of(write(tmp_path, body))
    text = err.oneline()
    assert words in text, text
    assert err.file == str((tmp_path / "qnn-ci.yaml").resolve()) or err.file == str(
        tmp_path / "qnn-ci.yaml")
    assert err.line == line, text
    assert err.key == key, text
    assert "\n" not in text


def test_cli_reports_bad_manifest_in_one_line_with_status_2(
        tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, """
        exports:
          - name: a
            model: m.onnx
            targett: {}
        """)
    assert main(["run", str(p), "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert f"{p.resolve()}:4: exports[0].targett: unknown key 'targett' (did you mean " \
           "'target'?)" in err[0]


def test_integer_inputs_get_their_dtype_from_the_model(tmp_path: Path) -> None:
    two_input_model(tmp_path / "two.onnx")
    p = write(tmp_path, """
        exports:
          - name: two
            model: two.onnx
            inputs: {ids: {encoding: other}}
        """)
    e = load_manifest(p).exports[0]
    assert e.inputs["ids"].dtype == "int64" and e.inputs["ids"].encoding == "other"
    assert e.inputs["x"].dtype == "float32"


def test_published_schema_is_valid_draft_2020_12() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema())
    assert main(["schema"]) == 0


def test_published_schema_embeds_the_board_registry_schema() -> None:
    from qnn_ci.manifest.boards_file import BOARDS_SCHEMA

    assert schema()["properties"]["boards"] == BOARDS_SCHEMA


def test_board_errors_name_the_key(tmp_path: Path, model: Path) -> None:
    p = write(tmp_path, """
        boards:
          rb3: {transport: ssh, hots: 10.0.0.2, key_file: m.onnx}
        exports:
          - name: a
            model: m.onnx
            board: rb3
        """)
    err = error_of(p)
    assert err.line == 2 and "unknown key 'hots' (did you mean 'host'?)" in str(err)
    p = write(tmp_path, """
        boards:
          rb3: {transport: ssh, host: 10.0.0.2, key_file: m.onnx}
        exports:
          - name: a
            model: m.onnx
            board: rb4
        """)
    err = error_of(p)
    assert err.key == "exports[0].board" and "'rb4' is not declared" in str(err)
    assert "did you mean 'rb3'" in str(err)


def test_fixed_input_values_are_checked_against_the_shape(tmp_path: Path, model: Path) -> None:
    p = write(tmp_path, """
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 4], value: [1, 2, 3]}}
        """)
    err = error_of(p)
    assert err.key == "exports[0].inputs.x.value" and "does not fit input 'x'" in str(err)
    p = write(tmp_path, """
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 4], value: 0.5}}
        """)
    assert load_manifest(p).exports[0].inputs["x"].value == 0.5


def test_the_readme_manifest_example_follows_the_schema() -> None:
    """The README's example manifest is what users copy: it must stay valid."""
    import jsonschema
    import yaml

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("```yaml\nversion: 1\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load("version: 1\n" + block)
    jsonschema.Draft202012Validator(schema()).validate(data)
    assert [e["name"] for e in data["exports"]] == ["text_encoder", "decoder"]
