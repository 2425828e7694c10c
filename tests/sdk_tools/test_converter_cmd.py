"""Converter command building from the flags an SDK's --help lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_ci.engine.spec import InputSpec, QuantizationSpec, TargetSpec
from qnn_ci.errors import UserError
from qnn_ci.sdk.converter_cmd import build_convert_argv, parse_help_flags
from tests.sdk_tools.conftest import converter_help_text

NEW = parse_help_flags(converter_help_text("new"))
OLD = parse_help_flags(converter_help_text("old"))


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_help_flags_per_era() -> None:
    assert {"--act_bitwidth", "--act_bw", "--input_network", "-i", "-d", "--input_dim",
            "--dry_run", "--out_name", "--out_node", "-h", "--help"} <= NEW
    assert "--act_bw" in OLD and "--act_bitwidth" not in OLD
    # Flags only mentioned in prose are not flags.
    assert "--not_a_flag" not in NEW and "-x" not in NEW
    assert "--act_bitwidth" not in OLD


def test_help_flags_from_usage_and_indented_options() -> None:
    text = ("usage: qnn-onnx-converter [-h] [--input_network INPUT_NETWORK]\n"
            "                          [--foo_bar FOO] [--one ONE | --two TWO]\n\n"
            "optional arguments:\n"
            "  --baz BAZ, -z BAZ     does things, like --qux\n"
            "                        --also_prose keeps going\n")
    assert parse_help_flags(text) == {"-h", "--input_network", "--foo_bar", "--one", "--two",
                                      "--baz", "-z"}


def test_w8a16_bias32_defaults_long_spelling(export_factory, tmp_path: Path) -> None:
    export = export_factory(inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32")})
    argv = build_convert_argv(export, Path("model.onnx"), tmp_path / "list.txt",
                              tmp_path / "out" / "m.cpp", NEW)
    assert argv[0] == "qnn-onnx-converter"
    assert _pairs(argv, "--act_bitwidth") == ["16"]
    assert _pairs(argv, "--weights_bitwidth") == ["8"]
    assert _pairs(argv, "--bias_bitwidth") == ["32"]
    assert "--act_bw" not in argv
    i = argv.index("--input_dim")
    assert argv[i + 1:i + 3] == ["x", "1,3,8,8"]
    assert _pairs(argv, "--input_list") == [str(tmp_path / "list.txt")]
    # Every path absolute, even one given relative.
    assert Path(_pairs(argv, "--input_network")[0]).is_absolute()
    assert _pairs(argv, "--output_path") == [str(tmp_path / "out" / "m.cpp")]


def test_old_era_uses_short_spellings(export_factory, tmp_path: Path) -> None:
    q = QuantizationSpec(act_bitwidth=8, float_bitwidth=32)
    export = export_factory(quantization=q)
    argv = build_convert_argv(export, tmp_path / "m.onnx", tmp_path / "l.txt",
                              tmp_path / "m.cpp", OLD)
    assert _pairs(argv, "--act_bw") == ["8"]
    assert _pairs(argv, "--weight_bw") == ["8"]
    assert _pairs(argv, "--bias_bw") == ["32"]
    assert _pairs(argv, "--float_bw") == ["32"]
    assert not any(a.endswith("bitwidth") for a in argv)


def test_overrides_go_with_input_list(export_factory, tmp_path: Path) -> None:
    enc = tmp_path / "m.encodings"
    enc.write_text("{}")
    export = export_factory(quantization=QuantizationSpec(overrides=enc))
    argv = build_convert_argv(export, tmp_path / "m.onnx", tmp_path / "l.txt",
                              tmp_path / "m.cpp", NEW)
    assert _pairs(argv, "--quantization_overrides") == [str(enc)]
    assert _pairs(argv, "--input_list") == [str(tmp_path / "l.txt")]
    with pytest.raises(UserError, match=r"calibration.*together with --input_list"):
        build_convert_argv(export, tmp_path / "m.onnx", None, tmp_path / "m.cpp", NEW)


def test_missing_overrides_file_named(export_factory, tmp_path: Path) -> None:
    export = export_factory(quantization=QuantizationSpec(overrides=tmp_path / "nope.enc"))
    with pytest.raises(UserError, match=r"quantization\.overrides.*nope\.enc"):
        build_convert_argv(export, tmp_path / "m.onnx", tmp_path / "l.txt",
                           tmp_path / "m.cpp", NEW)


def test_integer_inputs_kept_unquantized(export_factory, tmp_path: Path) -> None:
    export = export_factory(inputs={
        "ids": InputSpec("ids", (1, 16), "int64"),
        "mask": InputSpec("mask", (1, 16), "float32", encoding="other"),
        "img": InputSpec("img", (1, 3, 4, 4), "float32"),
        "rgb": InputSpec("rgb", (1, 4, 4, 3), "int32", encoding="rgb"),
    })
    graph = [{"name": "tok", "dtype": "int32", "shape": [1, 8]}]
    argv = build_convert_argv(export, tmp_path / "m.onnx", tmp_path / "l.txt",
                              tmp_path / "m.cpp", NEW, graph_inputs=graph)
    encs = [argv[i + 1:i + 3] for i, a in enumerate(argv) if a == "--input_encoding"]
    assert ["ids", "other"] in encs and ["mask", "other"] in encs
    assert ["tok", "other"] in encs and ["rgb", "rgb"] in encs
    assert not any(e[0] == "img" for e in encs)
    dims = [argv[i + 1:i + 3] for i, a in enumerate(argv) if a == "--input_dim"]
    assert dims[0] == ["tok", "1,8"] and ["ids", "1,16"] in dims


def test_quantizer_options(export_factory, tmp_path: Path) -> None:
    q = QuantizationSpec(per_channel=True, act_calibration="percentile",
                         param_calibration="mse", percentile=99.99)
    argv = build_convert_argv(export_factory(quantization=q), tmp_path / "m.onnx",
                              tmp_path / "l.txt", tmp_path / "m.cpp", NEW)
    assert "--use_per_channel_quantization" in argv
    assert _pairs(argv, "--act_quantizer_calibration") == ["percentile"]
    assert _pairs(argv, "--param_quantizer_calibration") == ["mse"]
    assert _pairs(argv, "--percentile_calibration_value") == ["99.99"]


def test_float_fallback_refused_without_fp16(export_factory, tmp_path: Path) -> None:
    q = QuantizationSpec(float_fallback=True)
    export = export_factory(quantization=q, target=TargetSpec(soc="QCS6490"))
    with pytest.raises(UserError) as exc:
        build_convert_argv(export, tmp_path / "m.onnx", tmp_path / "l.txt",
                           tmp_path / "m.cpp", NEW)
    text = exc.value.oneline()
    assert "quantization.float_fallback" in text and "v68" in text and "FP16" in text
    assert "134" in text and "\n" not in text
    # A SoC whose HTP has FP16 gets the flags.
    ok = export_factory(quantization=QuantizationSpec(float_fallback=True, float_bitwidth=16),
                        target=TargetSpec(soc="SM8550"))
    argv = build_convert_argv(ok, tmp_path / "m.onnx", tmp_path / "l.txt",
                              tmp_path / "m.cpp", NEW)
    assert "--float_fallback" in argv and _pairs(argv, "--float_bitwidth") == ["16"]


def test_flag_the_sdk_does_not_list(export_factory, tmp_path: Path) -> None:
    flags = OLD - {"--use_per_channel_quantization"}
    export = export_factory(quantization=QuantizationSpec(per_channel=True))
    with pytest.raises(UserError) as exc:
        build_convert_argv(export, tmp_path / "m.onnx", tmp_path / "l.txt",
                           tmp_path / "m.cpp", flags)
    assert "--use_per_channel_quantization" in str(exc.value)
    assert "quantization.per_channel" in str(exc.value)


def test_dry_run_argv(export_factory, tmp_path: Path) -> None:
    export = export_factory(inputs={"x": InputSpec("x", (1, 3, 8, 8))})
    argv = build_convert_argv(export, tmp_path / "m.onnx", None, tmp_path / "p.cpp", OLD,
                              dry_run=True)
    assert argv[-1] == "--dry_run"
    assert "--input_list" not in argv and "--act_bw" not in argv
    assert _pairs(argv, "--input_dim") == ["x"]
