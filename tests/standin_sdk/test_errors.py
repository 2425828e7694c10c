"""Dry runs and exit codes of the stand-in converter."""

from __future__ import annotations

import re
from pathlib import Path

from fixtures.qairt_standin import make_sdk
from tests.standin_sdk.conftest import convert

TABLE_HEADER = re.compile(r"\|\s*Layers\s*\|\s*Ops\s*\|\s*Inputs\s*\|\s*Outputs\s*\|"
                          r"\s*Attributes\s*\|")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_dry_run_lists_unsupported_ops_and_exits_zero(sdk: Path, models: dict[str, Path],
                                                      tmp_path: Path) -> None:
    run = convert(sdk, "-i", models["unsupported"], "-o", tmp_path / "u.cpp", "--dry_run")
    assert run.code == 0
    assert "Proceeding with model evaluation..." in run.text
    assert TABLE_HEADER.search(run.text)
    rows = [ln for ln in run.text.splitlines() if ln.startswith("| hardmax/0 ")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1].endswith(" unsupported in Converter") and "Hardmax" in cells[1]
    assert "\x1b[" not in run.text
    assert not (tmp_path / "u.cpp").exists()


def test_dry_run_table_can_be_coloured(tmp_path: Path, models: dict[str, Path]) -> None:
    sdk = make_sdk(tmp_path / "sdk", dry_run_ansi=True)
    run = convert(sdk, "-i", models["unsupported"], "--dry_run")
    assert run.code == 0
    assert ANSI.search(run.text)
    plain = ANSI.sub("", run.text)
    assert TABLE_HEADER.search(plain) and "Hardmax unsupported in Converter" in plain


def test_clean_dry_run_on_the_real_classifier(sdk: Path, cls_model: Path) -> None:
    run = convert(sdk, "-i", cls_model, "-d", "x", "1,3,48,192", "--dry_run")
    assert run.code == 0
    assert "Model ops, op attributes, inputs and outputs have been evaluated" in run.text
    assert not TABLE_HEADER.search(run.text)


def test_unsupported_op_in_a_full_conversion_exits_255(sdk: Path, models: dict[str, Path],
                                                       tmp_path: Path) -> None:
    run = convert(sdk, "-i", models["unsupported"], "-o", tmp_path / "u.cpp")
    assert run.code == 255
    assert re.search(r" - ERROR - Node hardmax/0: 'No translation registered for op type "
                     r"onnx_hardmax\.'", run.text)
    assert not (tmp_path / "u.cpp").exists()


def test_unreadable_model_exits_1_with_traceback(sdk: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    run = convert(sdk, "-i", bad, "-o", tmp_path / "bad.cpp")
    assert run.code == 1
    assert re.search(r" - ERROR - Encountered Error: ", run.text)
    assert "Traceback (most recent call last):" in run.text


def test_bad_input_dim_name_exits_1(sdk: Path, models: dict[str, Path], tmp_path: Path) -> None:
    run = convert(sdk, "-i", models["tiny"], "-d", "nope", "1,3,8,8", "-o", tmp_path / "m.cpp")
    assert run.code == 1
    assert "Encountered Error:" in run.text and "nope" in run.text


def test_dynamic_input_without_dims_is_an_error(sdk: Path, models: dict[str, Path],
                                                tmp_path: Path) -> None:
    run = convert(sdk, "-i", models["tiny"], "-o", tmp_path / "m.cpp")
    assert run.code == 1
    assert "Encountered Error:" in run.text and "--input_dim" in run.text


def test_argparse_errors_exit_2(sdk: Path, models: dict[str, Path], tmp_path: Path) -> None:
    run = convert(sdk, "-i", models["tiny"], "--act_bitwidth", "12")
    assert run.code == 2 and "invalid choice" in run.stderr
    run = convert(sdk, "-i", models["tiny"], "--copyright_file", tmp_path / "c.md")
    assert run.code == 2 and ".txt" in run.stderr
