"""The DLC route's command lines: each flag spelled the way the SDK's tool lists it in
``--help`` (the era's spelling from ``qnn_ci.tables``), a setting the tool cannot take
refused in one line naming the manifest key, integer inputs kept unquantized where a
flag can say so (and said so where none can), and a tool's own refusal of a flag
(argparse: ``unrecognized arguments``) named with its key and the other eras' spelling."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from qnn_ci.engine.spec import DlcSpec, ExportSpec, InputSpec, QuantizationSpec
from qnn_ci.errors import UserError
from qnn_ci.sdk.converter_cmd import ConverterHelp, parse_help_flags
from qnn_ci.sdk.dlc_cmd import (
    build_dlc_convert_argv,
    build_dlc_quantize_argv,
    unknown_flag_text,
    unknown_flags,
)


def _help(*flags: str) -> ConverterHelp:
    return ConverterHelp(frozenset(flags), "h", None)


# qairt-converter 2.3x/2.4x (its --help, as QAIRT's docs print it) and an older one.
NEW_CONVERTER = _help("--input_network", "-i", "--source_model_input_shape", "-s",
                      "--source_model_input_datatype", "--source_model_input_layout",
                      "--desired_input_layout", "--preserve_io_datatype",
                      "--quantization_overrides", "--output_path", "-o", "--float_bitwidth")
OLD_CONVERTER = _help("--input_network", "--input_dim", "-d", "--input_dtype", "--input_layout",
                      "--preserve_io", "--quantization_overrides", "--output_path",
                      "--input_encoding")
LONG_QUANTIZER = _help("--input_dlc", "--output_dlc", "--input_list", "--act_bitwidth",
                       "--weights_bitwidth", "--bias_bitwidth", "--float_bitwidth",
                       "--use_per_channel_quantization", "--act_quantizer_calibration",
                       "--param_quantizer_calibration", "--percentile_calibration_value",
                       "--float_fallback", "--preserve_io_datatype")
SHORT_QUANTIZER = _help("--input_dlc", "--output_dlc", "--input_list", "--act_bw",
                        "--weight_bw", "--bias_bw")


def _export(tmp_path: Path, **changes: object) -> ExportSpec:
    export = ExportSpec(name="m", model=tmp_path / "m.onnx", manifest=tmp_path / "qnn-ci.yaml",
                        line=4, inputs={"x": InputSpec("x", (1, 3, 8, 8), "float32"),
                                        "ids": InputSpec("ids", (1, 4), "int64")})
    return replace(export, **changes)  # type: ignore[arg-type]


def _pairs(argv: list[str]) -> str:
    return " ".join(argv[1:])


def test_the_converter_speaks_each_era(tmp_path: Path) -> None:
    enc = tmp_path / "m.encodings"
    enc.write_text("{}")
    export = _export(tmp_path, dlc=DlcSpec({"x": "NCHW"}, preserve_io=True),
                     quantization=QuantizationSpec(overrides=enc))
    new = build_dlc_convert_argv(export, tmp_path / "p.onnx", tmp_path / "m.dlc",
                                 NEW_CONVERTER, tool="qairt-converter")
    text = _pairs(new.argv)
    assert "--source_model_input_shape x 1,3,8,8 --source_model_input_shape ids 1,4" in text
    assert "--source_model_input_datatype ids int64" in text
    assert "--preserve_io_datatype ids" in text and new.preserved == ["ids"]
    assert "--source_model_input_layout x NCHW --desired_input_layout x NCHW" in text
    assert f"--quantization_overrides {enc.resolve()}" in text
    assert text.endswith(f"--output_path {(tmp_path / 'm.dlc').resolve()}")
    assert any("--preserve_io_datatype only" in n for n in new.notes)
    assert "--input_list" not in text                          # the quantizer's job
    old = build_dlc_convert_argv(export, tmp_path / "p.onnx", tmp_path / "m.dlc",
                                 OLD_CONVERTER, tool="qairt-converter")
    text = _pairs(old.argv)
    assert "--input_dim x 1,3,8,8" in text and "--input_dtype ids int64" in text
    assert "--input_layout x NCHW" in text and "--desired_input_layout" not in text
    assert " --preserve_io " in text and old.preserved == [] and not old.notes


def test_the_quantizer_speaks_each_era_and_refuses_what_it_cannot_take(tmp_path: Path) -> None:
    q = QuantizationSpec(per_channel=True, act_calibration="mse", percentile=99.9)
    export = _export(tmp_path, quantization=q)
    cmd = build_dlc_quantize_argv(export, tmp_path / "m.dlc", tmp_path / "m_q.dlc",
                                  tmp_path / "list.txt", LONG_QUANTIZER, tool="qairt-quantizer")
    text = _pairs(cmd.argv)
    assert "--act_bitwidth 16 --weights_bitwidth 8 --bias_bitwidth 32" in text
    assert "--use_per_channel_quantization" in text
    assert "--act_quantizer_calibration mse" in text and "--percentile_calibration_value 99.9" \
        in text
    assert f"--input_list {(tmp_path / 'list.txt').resolve()}" in text
    assert "--preserve_io_datatype ids" in text and cmd.preserved == ["ids"]
    short = build_dlc_quantize_argv(_export(tmp_path), tmp_path / "m.dlc", tmp_path / "q.dlc",
                                    tmp_path / "l.txt", SHORT_QUANTIZER, tool="qairt-quantizer",
                                    kept_by_converter=["ids"])
    assert "--act_bw 16 --weight_bw 8 --bias_bw 32" in _pairs(short.argv)
    assert short.notes and "kept by qairt-converter" in short.notes[0] and not short.warnings
    bare = build_dlc_quantize_argv(_export(tmp_path), tmp_path / "m.dlc", tmp_path / "q.dlc",
                                   tmp_path / "l.txt", SHORT_QUANTIZER, tool="qairt-quantizer")
    assert bare.warnings and "ids cannot be kept unquantized by a flag" in bare.warnings[0]
    with pytest.raises(UserError) as info:
        build_dlc_quantize_argv(export, tmp_path / "m.dlc", tmp_path / "q.dlc",
                                tmp_path / "l.txt", SHORT_QUANTIZER, tool="qairt-quantizer")
    err = info.value
    assert (err.line, err.key) == (4, "quantization.per_channel")
    assert "qairt-quantizer lists none of --use_per_channel_quantization" in err.oneline()
    assert "\n" not in err.oneline()


def test_float_fallback_takes_no_input_list_and_no_help_means_newest(tmp_path: Path) -> None:
    export = _export(tmp_path, quantization=QuantizationSpec(float_fallback=True,
                                                             float_bitwidth=16))
    cmd = build_dlc_quantize_argv(export, tmp_path / "m.dlc", tmp_path / "q.dlc",
                                  tmp_path / "l.txt", None, tool="qairt-quantizer")
    text = _pairs(cmd.argv)
    assert "--float_fallback" in text and "--input_list" not in text
    assert "--float_bitwidth 16" in text and "--act_bitwidth 16" in text
    assert any("calibration samples are not used" in n for n in cmd.notes)


ARGPARSE = """usage: qairt-quantizer [-h] --input_dlc INPUT_DLC [--act_bw {8,16}]
qairt-quantizer: error: unrecognized arguments: --act_bitwidth 16 --weights_bitwidth 8
"""


def test_a_flag_the_era_does_not_know_is_named_with_its_key_and_spelling() -> None:
    flags = unknown_flags(ARGPARSE)
    assert flags == ["--act_bitwidth", "--weights_bitwidth"]
    text = unknown_flag_text("qairt-quantizer", flags, "2.22.6", help_read=False)
    assert "\n" not in text
    assert "qairt-quantizer of SDK 2.22.6 does not know --act_bitwidth (and 1 more)" in text
    assert "quantization.act_bitwidth" in text and "--act_bw" in text
    assert "--help could not be read" in text
    other = unknown_flag_text("qairt-converter", ["--frobnicate"], None, help_read=True)
    assert other.startswith("qairt-converter of this SDK does not know --frobnicate")


def test_help_text_flags_include_the_alias_spellings() -> None:
    text = """usage: qairt-converter [--source_model_input_shape INPUT_NAME INPUT_DIM]
                       --input_network INPUT_NETWORK [--output_path OUTPUT_PATH]

required arguments:
  --input_network INPUT_NETWORK, -i INPUT_NETWORK
                        Path to the source framework model.
optional arguments:
  --source_model_input_shape INPUT_NAME INPUT_DIM, -s INPUT_NAME INPUT_DIM
                        The name and dimension of all the input buffers
  --preserve_io_datatype [PRESERVE_IO_DATATYPE ...]
                        Use this option to preserve IO datatype.
"""
    flags = parse_help_flags(text)
    assert {"--input_network", "-i", "--source_model_input_shape", "-s",
            "--preserve_io_datatype", "--output_path"} <= flags
