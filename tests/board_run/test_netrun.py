"""qnn-net-run driven over a real sshd against the stand-in board."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fixtures.qairt_standin.net_run import set_faults
from qnn_ci.boards.netrun import NetRunResult, run_on_board
from qnn_ci.boards.result_files import ExpectedOutput
from qnn_ci.compare.outputs import sanitize
from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError
from tests.board_run.conftest import (
    HOSTILE,
    OUTPUTS,
    Board,
    StandinBuild,
    write_samples,
)

EXPECTED = [ExpectedOutput(n, sanitize(n), int(np.prod(s))) for n, s in OUTPUTS.items()]


def _run(board: Board, library: Path, input_list: Path, workdir: Path, **kw: object
         ) -> NetRunResult:
    transport = board.open(board.config)
    try:
        return run_on_board(transport, board.config, library=library, input_list=input_list,
                            input_names=["x"], workdir=workdir,
                            **{"library_sdk_version": "2.31.0",
                               "expected_outputs": EXPECTED, **kw})  # type: ignore[arg-type]
    finally:
        transport.close()


def _only_ours_gone(board: Board) -> None:
    """The run's remote folder is gone and nothing else in the work root was touched."""
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]
    assert (board.work_root / "keep-me").read_text() == "not ours"


def _checks(result: NetRunResult) -> list[str]:
    return [f.check for f in result.findings if f.severity == Severity.ERROR]


def test_cpu_and_htp_run_and_come_back(board: Board, library: Path, tmp_path: Path) -> None:
    lst = write_samples(tmp_path / "in", 3)
    result = _run(board, library, lst, tmp_path / "wd")
    assert result.ok, result.findings
    assert result.samples == 3
    assert result.board_version is not None and result.board_version.version == "2.31.0"
    assert result.remote_dir.startswith(str(board.work_root) + "/run-")
    for backend in ("cpu", "htp"):
        out = result.output_dir(backend)
        assert out is not None
        assert sorted(p.name for p in out.iterdir()) == ["Result_0", "Result_1", "Result_2"]
        assert sorted(p.name for p in (out / "Result_2").iterdir()) == \
            ["feat_map_0.raw", "logits.raw"]
    cpu = np.fromfile(tmp_path / "wd/out_cpu/Result_1/logits.raw", np.float32)
    htp = np.fromfile(tmp_path / "wd/out_htp/Result_1/logits.raw", np.float32)
    assert cpu.shape == htp.shape == (10,)
    assert not np.array_equal(cpu, htp)                 # a real quantization error ...
    assert np.abs(cpu - htp).max() < 0.05 * np.abs(cpu).max()   # ... and a small one
    log = (tmp_path / "wd/net_run_htp.log").read_text()
    assert "libQnnHtp.so" in log and "exit status: 0" in log
    _only_ours_gone(board)


def test_hung_net_run_is_killed_by_the_timeout(board: Board, library: Path,
                                               tmp_path: Path) -> None:
    set_faults(board.folder, {"hang": "htp"})
    lst = write_samples(tmp_path / "in", 1)
    # Long enough for the CPU backend on a loaded 2-core runner; only HTP hangs.
    result = _run(board, library, lst, tmp_path / "wd", timeout=8.0)
    assert _checks(result) == ["board.timeout"]
    (finding,) = result.findings
    assert "HTP backend" in finding.message and "within 8 s" in finding.message
    assert result.backends["cpu"].ok and result.backends["htp"].timed_out
    assert board.server.remote_pids() == []             # the whole remote group is gone
    _only_ours_gone(board)


@pytest.mark.parametrize(("fault", "check", "words"), [
    ({"short_output": "htp"}, "board.output_short",
     ["output logits of sample 0", "HTP backend", "20 bytes, expected 40"]),
    ({"nan": {"backend": "htp", "result": 1}}, "board.output_nan",
     ["output logits of sample 1", "1 NaN/Inf value(s) of 10"]),
    ({"missing_result": {"backend": "cpu", "result": 1}}, "board.result_missing",
     ["CPU backend", "no Result_1 for sample 1", "exited 0"]),
])
def test_bad_output_files_are_named(board: Board, library: Path, tmp_path: Path,
                                    fault: dict[str, object], check: str,
                                    words: list[str]) -> None:
    set_faults(board.folder, fault)
    lst = write_samples(tmp_path / "in", 2)
    result = _run(board, library, lst, tmp_path / "wd")
    assert _checks(result) == [check]
    (finding,) = [f for f in result.findings if f.check == check]
    for word in words:
        assert word in finding.message
    _only_ours_gone(board)


def test_bad_output_files_without_expected_shapes(board: Board, library: Path,
                                                  tmp_path: Path) -> None:
    """No expected shapes: a short file is still caught against its siblings."""
    set_faults(board.folder, {"short_output": {"backend": "cpu", "result": 1}})
    lst = write_samples(tmp_path / "in", 3)
    result = _run(board, library, lst, tmp_path / "wd", expected_outputs=None)
    assert _checks(result) == ["board.output_short"]
    assert "sample 1" in result.findings[0].message


def test_disk_full_is_reported_with_the_tool_text(board: Board, library: Path,
                                                  tmp_path: Path) -> None:
    set_faults(board.folder, {"disk_full": "htp"})
    lst = write_samples(tmp_path / "in", 1)
    result = _run(board, library, lst, tmp_path / "wd")
    assert _checks(result) == ["board.disk_full"]
    assert "No space left on device" in result.findings[0].message
    assert result.output_dir("htp") is None
    _only_ours_gone(board)


def test_load_failures_and_execution_failures_are_told_apart(
        board: Board, library: Path, built: StandinBuild, tmp_path: Path) -> None:
    lst = write_samples(tmp_path / "in", 2)
    # backend library not where the board declaration says
    missing = board.with_config(qnn_lib_dir=str(board.folder / "nolib"))
    result = _run(missing, library, lst, tmp_path / "wd1", backends=("cpu",))
    assert _checks(result) == ["board.load_backend"]
    assert f"Could not load backend : {board.folder}/nolib/libQnnCpu.so!" in \
        result.findings[-1].message
    # a library built for x86-64: the model does not load
    result = _run(board, built.library_x86, lst, tmp_path / "wd2", backends=("htp",))
    assert _checks(result) == ["board.load_model"]
    assert "Could not load model" in result.findings[0].message
    # loads, but an input of the wrong size makes the graph fail
    bad = write_samples(tmp_path / "bad", 2, sizes={1: 17})
    result = _run(board, library, bad, tmp_path / "wd3", backends=("cpu",))
    assert _checks(result) == ["board.execution"]
    assert "Failed to execute graphIdx: 0" in result.findings[0].message
    # the tool itself is missing
    result = _run(board.with_config(net_run=str(board.folder / "bin" / "nope")), library,
                  lst, tmp_path / "wd4", backends=("cpu",))
    assert _checks(result) == ["board.net_run_missing"]
    _only_ours_gone(board)


def test_hostile_names_in_inputs_and_work_root(board: Board, library: Path,
                                               tmp_path: Path) -> None:
    work_root = tmp_path / HOSTILE / "root; ls"
    work_root.mkdir(parents=True)
    (work_root / "keep-me").write_text("not ours")
    hostile = board.with_config(work_root=str(work_root))
    # an input list is space-separated, so its paths cannot hold spaces; everything
    # else a shell would act on is fair game
    nasty = "in$(touch${IFS}pwned);`touch${IFS}pwned2`'q'\"d\"&&x"
    lst = write_samples(tmp_path / nasty, 2, stem=f"x{nasty}")
    assert "$(touch" in lst.read_text()
    result = _run(hostile, library, lst, tmp_path / "wd")
    assert result.ok, result.findings
    assert result.remote_dir.startswith(str(work_root) + "/run-")
    assert sorted(p.name for p in work_root.iterdir()) == ["keep-me"]
    for where in (tmp_path, board.folder, Path.cwd(), Path.home()):
        assert not list(where.glob("pwned*")), where
    assert not list(tmp_path.rglob("pwned*"))


def test_an_input_path_with_spaces_is_a_user_error(board: Board, library: Path,
                                                   tmp_path: Path) -> None:
    lst = write_samples(tmp_path / "in put", 1)
    with pytest.raises(UserError, match=r"input_list.txt:1: path '.*in put/x_0.raw' contains "
                                        r"a space.*folder without whitespace"):
        _run(board, library, lst, tmp_path / "wd")
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]


def test_full_remote_disk_during_upload_is_named(board: Board, library: Path,
                                                 full_disk: Path, tmp_path: Path) -> None:
    (full_disk / "filler.bin").write_bytes(b"\0" * 96 * 1024)    # 4 KiB left of 100
    on_full = board.with_config(work_root=str(full_disk))
    lst = write_samples(tmp_path / "in", 1)
    result = _run(on_full, library, lst, tmp_path / "wd")
    assert _checks(result) == ["board.disk_full"]
    message = result.findings[0].message
    assert message.startswith("no space left on device on board standin ("
                              f"{result.remote_dir}: ")
    assert f"bytes free, {library.stat().st_size} needed to put {library.name})" in message
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler.bin"]   # run folder gone


@pytest.mark.parametrize(("switches", "files"), [
    ({"graph_folder": True}, ["Result_{n}/cnn/feat_map_0.raw", "Result_{n}/cnn/logits.raw"]),
    ({"slash_subfolders": True}, ["Result_{n}/feat/map_0.raw", "Result_{n}/logits.raw"]),
    ({"graph_folder": True, "slash_subfolders": True},
     ["Result_{n}/cnn/feat/map_0.raw", "Result_{n}/cnn/logits.raw"]),
])
def test_unconfirmed_output_layouts_are_pulled_and_checked(
        board: Board, library: Path, tmp_path: Path, switches: dict[str, object],
        files: list[str]) -> None:
    """A <graph>/ level above Result_N (it lands below Result_N locally) and
    sub-folders from a `/` in a tensor name: pulled, found and checked."""
    set_faults(board.folder, switches)
    lst = write_samples(tmp_path / "in", 2)
    result = _run(board, library, lst, tmp_path / "wd")
    assert result.ok, result.findings
    for backend in ("cpu", "htp"):
        out = result.output_dir(backend)
        assert out is not None
        got = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.raw"))
        assert got == sorted(f.format(n=n) for n in range(2) for f in files)
    _only_ours_gone(board)


def test_checks_see_into_unconfirmed_layouts(board: Board, library: Path,
                                             tmp_path: Path) -> None:
    """With both layouts at once: a missing Result_N is still seen, and a short file
    is named by its real path below the graph folder."""
    set_faults(board.folder, {"graph_folder": True, "slash_subfolders": True,
                              "short_output": {"backend": "htp", "result": 1},
                              "missing_result": {"backend": "cpu", "result": 0}})
    lst = write_samples(tmp_path / "in", 2)
    result = _run(board, library, lst, tmp_path / "wd")
    assert _checks(result) == ["board.result_missing", "board.output_short"]
    assert "CPU backend on board standin: qnn-net-run wrote no Result_0" in \
        result.findings[0].message
    assert "output logits of sample 1 (HTP backend on board standin): " \
        "Result_1/cnn/logits.raw has 20 bytes, expected 40" in result.findings[1].message
