"""A closed output pipe ends a command quietly: nothing on stderr, exit status
141 (128 + SIGPIPE, as git does) — through real pipes, with real commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.cli import EXIT_PIPE

QNN_CI = [sys.executable, "-m", "qnn_ci"]


def _closed_before_start(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run with stdout = a pipe whose reader is already gone: the first write fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*QNN_CI, *args], stdout=write, stderr=subprocess.PIPE,
                              timeout=60, check=False)
    finally:
        os.close(write)


def test_a_reader_gone_before_the_first_write() -> None:
    """19 kB of schema: the write inside print() fails."""
    proc = _closed_before_start("schema")
    assert proc.stderr == b""
    assert proc.returncode == EXIT_PIPE == 141


def test_a_reader_gone_before_the_exit_time_flush(tmp_path: Path) -> None:
    """A short report stays in Python's buffer until the end: that flush fails."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
                                                "g", [x], [y]))
    onnx.save(model, str(tmp_path / "tiny.onnx"))
    proc = _closed_before_start("shapes", str(tmp_path / "tiny.onnx"))
    assert proc.stderr == b""
    assert proc.returncode == EXIT_PIPE


@pytest.mark.parametrize(("args", "status"), [((), 2), (("--version",), 0)],
                         ids=["usage", "version"])
def test_argparse_output_to_a_closed_pipe_keeps_its_status(args: tuple[str, ...],
                                                           status: int) -> None:
    """argparse drops a failed write itself; the command ends as it would have."""
    proc = _closed_before_start(*args)
    assert proc.stderr == b""
    assert proc.returncode == status


def test_head_closing_the_pipe_mid_output(cls_model: Path) -> None:
    """`qnn-ci shapes MODEL --json | head -c 10`: 140 kB, more than a pipe holds, so
    the command is still writing when the reader closes."""
    proc = subprocess.Popen([*QNN_CI, "shapes", str(cls_model), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == EXIT_PIPE
    assert first.startswith(b"{") and err == b""


def test_a_shell_pipeline_with_pipefail(tmp_path: Path, cls_model: Path) -> None:
    """The same as a user types it; stderr captured to a file."""
    err = tmp_path / "err.txt"
    cmd = (f"set -o pipefail; {' '.join(QNN_CI)} shapes '{cls_model}' --json 2>'{err}' "
           "| head -c 10 >/dev/null")
    proc = subprocess.run(["bash", "-c", cmd], timeout=60, check=False)
    assert proc.returncode == EXIT_PIPE
    assert err.read_text() == ""


def test_output_read_to_the_end_is_unchanged() -> None:
    proc = subprocess.run([*QNN_CI, "schema"], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stderr == b""
    assert proc.stdout.startswith(b"{") and len(proc.stdout) > 10_000


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(tmp_path: Path) -> None:
    """Only OUR reader going away is quiet: stdout here is a regular file."""
    out = tmp_path / "out.txt"
    code = ("import sys\n"
            "from qnn_ci.cli import main, COMMANDS\n"
            "COMMANDS['schema'] = ('broken_pipe_cmd', 'x')\n"
            "sys.exit(main(['schema']))\n")
    (tmp_path / "broken_pipe_cmd.py").write_text(
        "def add_arguments(parser):\n    pass\n"
        "def run(args):\n    raise BrokenPipeError(32, 'Broken pipe')\n")
    with out.open("wb") as fh:
        proc = subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=subprocess.PIPE,
                              cwd=tmp_path, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(tmp_path), *sys.path])})
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == "qnn-ci schema: error: Broken pipe"
