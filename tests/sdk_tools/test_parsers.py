"""Pure parsers: the dry-run table, the lib generator's target list, ELF headers."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from qnn_ci.errors import ToolError
from qnn_ci.sdk.dry_run import fill_ops, node_op_types, parse_dry_run
from qnn_ci.sdk.elf import check_library, read_elf_header
from qnn_ci.sdk.model_lib import parse_lib_targets

PREFIX = "2025-03-06 04:55:44,592 - 240 - INFO - "

TABLE = (
    f"{PREFIX}Proceeding with model evaluation...\n"
    "\x1b[91m| Layers | Ops | Inputs | Outputs | Attributes |\x1b[0m\n"
    "|--------|-----|--------|---------|------------|\n"
    "\x1b[91m| /gs/GridSample | GridSample | GridSample unsupported in Converter |  |  |\x1b[0m\n"
    "| /r/Resize | Resize |  |  | coordinate_transformation_mode unsupported value |\n"
    "|  |  | roi wrong type |  |  |\n"
    "| /t/TopK | TopK |  |  | something new we do not know |\n"
)


def test_dry_run_table_rows_are_problems() -> None:
    report = parse_dry_run(TABLE)
    assert report.evaluated and report.table and not report.clean
    got = [(p.layer, p.op, p.column) for p in report.problems]
    assert got == [("/gs/GridSample", "GridSample", "Inputs"),
                   ("/r/Resize", "Resize", "Attributes"),
                   ("/r/Resize", "Resize", "Inputs")]
    assert report.problems[1].text == "coordinate_transformation_mode unsupported value"
    assert report.unrecognised_rows == ["/t/TopK | TopK | something new we do not know"]
    # Exit 0 does not make it pass.
    assert not report.passed(0)


@pytest.mark.parametrize("suffix", ["unsupported in Converter", "unsupported in ONNX schema",
                                    "unsupported version", "unsupported value",
                                    "invalid value", "wrong type"])
def test_every_problem_suffix(suffix: str) -> None:
    text = ("| Layers | Ops | Inputs | Outputs | Attributes |\n"
            f"| n1 | Foo | | | axis {suffix} |\n")
    report = parse_dry_run(text)
    assert [p.text for p in report.problems] == [f"axis {suffix}"]


def test_empty_op_cells_filled_from_the_model() -> None:
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Resize", ["x"], ["a"], name="/up/Resize"),
         helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("TopK", ["b"], ["c"], name="topk")], "g", [], [])
    ops = node_op_types(helper.make_model(graph))
    assert ops == {"/up/Resize": "Resize", "_up_Resize": "Resize", "Relu_1": "Relu",
                   "topk": "TopK"}
    text = ("| Layers | Ops | Inputs | Outputs | Attributes |\n"
            "| _up_Resize |  |  |  | mode=cubic unsupported value |\n"
            "| Relu_1 |  | x wrong type |  |  |\n"
            "| gone |  |  |  | axis=9 invalid value |\n"
            "| topk | TopK | | | k unsupported value |\n")
    report = parse_dry_run(text)
    assert [p.op for p in report.problems] == ["", "", "", "TopK"]
    fill_ops(report, ops)
    assert [p.message() for p in report.problems] == [
        "layer _up_Resize (Resize): Attributes: mode=cubic unsupported value",
        "layer Relu_1 (Relu): Inputs: x wrong type",
        "layer gone (?): Attributes: axis=9 invalid value",
        "layer topk (TopK): Attributes: k unsupported value"]


def test_clean_dry_run() -> None:
    text = (f"{PREFIX}Proceeding with model evaluation...\n"
            f"{PREFIX}Model ops, op attributes, inputs and outputs have been evaluated\n")
    report = parse_dry_run(text)
    assert report.clean and not report.problems and report.passed(0)
    assert not report.passed(1)


HELP = """usage: qnn-model-lib-generator [-h] -c <QNN_MODEL>.cpp [-b <QNN_MODEL>.bin]
                                [-t LIB_TARGETS [LIB_TARGETS ...]] [-l LIB_NAME]

optional arguments:
  -c <QNN_MODEL>.cpp, --cpp <QNN_MODEL>.cpp
                        Filepath for the qnn model .cpp file
  -t LIB_TARGETS [LIB_TARGETS ...], --lib_targets LIB_TARGETS [LIB_TARGETS ...]
                        Specifies the targets to build the models for.
                        Supported targets: aarch64-oe-linux-gcc9.3,
                        aarch64-oe-linux-gcc8.2, aarch64-android,
                        x86_64-linux-clang, aarch64-ubuntu-gcc7.5,
                        aarch64-ubuntu-gcc9.4, aarch64-oe-linux-gcc11.2.
                        Default: [x86_64-linux-clang, aarch64-android]
  -l LIB_NAME, --lib_name LIB_NAME
                        Specifies the name to use for libraries.
"""


def test_lib_targets_from_help() -> None:
    targets = parse_lib_targets(HELP)
    assert sorted(targets.supported) == sorted([
        "aarch64-oe-linux-gcc9.3", "aarch64-oe-linux-gcc8.2", "aarch64-android",
        "x86_64-linux-clang", "aarch64-ubuntu-gcc7.5", "aarch64-ubuntu-gcc9.4",
        "aarch64-oe-linux-gcc11.2"])
    assert targets.defaults == ["x86_64-linux-clang", "aarch64-android"]


def test_lib_targets_wrapped_at_a_hyphen_without_default_line() -> None:
    text = ("  -t LIB_TARGETS\n"
            "                        Supported targets: arm-android aarch64-oe-\n"
            "                        linux-gcc11.2 x86_64-linux-clang.\n"
            "  -l LIB_NAME, --lib_name LIB_NAME\n")
    assert parse_lib_targets(text).supported == [
        "arm-android", "aarch64-oe-linux-gcc11.2", "x86_64-linux-clang"]


def _elf(path: Path, *, machine: int, e_type: int = 3, cls: int = 2, data: int = 1) -> Path:
    fmt = "<HH" if data == 1 else ">HH"
    path.write_bytes(b"\x7fELF" + bytes([cls, data, 1]) + b"\0" * 9
                     + struct.pack(fmt, e_type, machine) + b"\0" * 44)
    return path


def test_elf_header_and_target_check(tmp_path: Path) -> None:
    arm = read_elf_header(_elf(tmp_path / "a.so", machine=183))
    assert (arm.elf_class, arm.endianness, arm.e_type, arm.machine, arm.machine_name) == \
        (2, "little", 3, 183, "AArch64")
    assert check_library(arm, "aarch64-oe-linux-gcc11.2") == []
    x86 = read_elf_header(_elf(tmp_path / "x.so", machine=62))
    problems = check_library(x86, "aarch64-oe-linux-gcc11.2")
    assert len(problems) == 1 and "x86-64" in problems[0] and "183" in problems[0]
    exe = read_elf_header(_elf(tmp_path / "e", machine=183, e_type=2))
    assert any("not a shared object" in p for p in check_library(exe, "aarch64-android"))
    big = read_elf_header(_elf(tmp_path / "b.so", machine=40, data=2, cls=1))
    assert (big.endianness, big.machine, big.bits) == ("big", 40, 32)


def test_not_elf(tmp_path: Path) -> None:
    (tmp_path / "t.so").write_text("#!/bin/sh\n")
    with pytest.raises(ToolError, match="not an ELF file"):
        read_elf_header(tmp_path / "t.so")
    (tmp_path / "short.so").write_bytes(b"\x7fELF\x02")
    with pytest.raises(ToolError, match="truncated"):
        read_elf_header(tmp_path / "short.so")
