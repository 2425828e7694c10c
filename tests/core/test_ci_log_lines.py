"""Summary lines in a CI log: when stdout is not a terminal (a pipe, a file) nothing
is cut, so the command a hint says to run is there whole; on a terminal a line is
cut to its width only when it carries no action (a command, a path, a setting)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.report.summary import Row, carries_action, terminal_table, terminal_width
from tests.core.graphs import FLOATS_GEN, scale_model

EXPORT = "a_rather_long_export_name_as_teams_name_them_in_ci"
UPDATE = f"`qnn-ci baseline update qnn-ci.yaml --export {EXPORT}` (after a run)"


def _project(folder: Path) -> dict[str, str]:
    scale_model(folder / "m.onnx", dims=["N", 8])
    (folder / "gens.py").write_text(FLOATS_GEN)
    (folder / "qnn-ci.yaml").write_text(textwrap.dedent(f"""
        defaults:
          target: {{soc: QCS6490, lib_target: aarch64-oe-linux-gcc11.2}}
          inputs: {{x: {{shape: [1, 8]}}}}
          calibration: {{generator: "gens:floats", samples: 6, held_out: 1}}
        exports:
          - name: {EXPORT}
            model: m.onnx
        """).lstrip())
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "PYTEST_ADDOPTS")}
    return env | {"QNN_SDK_ROOT": str(make_sdk(folder / "sdk", "2.31.0")),
                  "ESDK_ENV": str(make_esdk(folder / "esdk")),
                  "COLUMNS": "80"}     # what a CI runner may say; a pipe is no terminal


def test_qnn_ci_run_into_a_pipe_cuts_no_line(tmp_path: Path) -> None:
    env = _project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "qnn_ci", "run", "--workdir", str(tmp_path / "w"),
         "--stage", "model_lib", "--stage", "regression"],
        cwd=tmp_path, env=env, capture_output=True, text=True,   # stdout: a pipe
        timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    regression = [line for line in done.stdout.splitlines() if " regression " in line]
    assert len(regression) == 1, done.stdout
    assert regression[0].endswith(f"create it with {UPDATE}"), regression[0]
    assert "…" not in done.stdout
    lib = next(line for line in done.stdout.splitlines() if " model_lib " in line)
    assert lib.endswith("(AArch64)"), lib            # long, no action: whole in a log too


def test_pytest_summary_into_a_pipe_cuts_no_line(tmp_path: Path) -> None:
    env = _project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-m", "qnn and not qnn_board", "-q", "--qnn-workdir", str(tmp_path / "w"),
         "-k", "static_shapes or calibration or dry_run or convert or model_lib "
               "or regression or sim_npu or sim_numerics", "qnn-ci.yaml"],
        cwd=tmp_path, env=env, capture_output=True, text=True,   # stdout: a pipe
        timeout=300, check=False)
    summary = done.stdout.split("qnn-ci summary", 1)[-1]
    regression = [line for line in summary.splitlines() if " regression " in line]
    assert len(regression) == 1, done.stdout + done.stderr
    assert regression[0].endswith(f"create it with {UPDATE}"), regression[0]
    assert "…" not in summary


def _row(stage: str, summary: str) -> Row:
    return Row(Path("qnn-ci.yaml"), "e", 3, StageResult(stage, Status.SKIPPED, summary))


def test_on_a_terminal_only_lines_without_an_action_are_cut() -> None:
    plain = "x" * 30 + " words and words " * 10
    table = terminal_table([_row("sim_npu", plain), _row("regression", "create it with "
                            + UPDATE), _row("convert", "set QNN_SDK_ROOT " + "y" * 120),
                            _row("dry_run", "see " + "d/" * 70 + "log.txt")], width=100)
    lines = table.splitlines()
    assert len(lines[1]) == 100 and lines[1].endswith("…")
    assert lines[2].endswith(UPDATE) and "QNN_SDK_ROOT " + "y" * 120 in lines[3]
    assert lines[4].endswith("log.txt")
    assert terminal_table([_row("sim_npu", plain)]).splitlines()[1].endswith(plain)



def test_a_long_stage_name_keeps_the_notes_and_findings_in_one_column() -> None:
    from qnn_ci.engine.results import Finding

    failed = StageResult("dlc_context_binary", Status.FAILED, "VTCM overflow",
                         [Finding("context.vtcm_overflow", "needs 36 MiB, 2 MiB allowed")])
    table = terminal_table([_row("sim_npu", "prepared"),
                            Row(Path("qnn-ci.yaml"), "e", 3, failed)]).splitlines()
    starts = {line.index("prepared") if "prepared" in line else line.index("VTCM")
              for line in table[1:3]}
    assert len(starts) == 1, table                     # both notes start in one column
    assert table[3].index("- needs 36 MiB") == starts.pop() - 1, table

@pytest.mark.parametrize(("text", "action"), [
    ("create it with `qnn-ci baseline update m.yaml`", True),
    ("give --dim x=1,3", True), ("set target.soc in the manifest", True),
    ("no model at /tmp/m.onnx", True), ("export QNN_SDK_ROOT first", True),
    ("QCS6490 simulator vs fp32 CPU on 1 held-out sample(s): worst cosine 1.000000", False),
    ("static: 2 tensors, 0 filled from onnxruntime, equivalent", False),
])
def test_what_carries_an_action(text: str, action: bool) -> None:
    assert carries_action(text) is action


def test_width_is_none_when_not_a_terminal() -> None:
    assert terminal_width(False) is None
    assert (terminal_width(True) or 0) >= 100
