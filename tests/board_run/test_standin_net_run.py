"""The stand-in qnn-net-run itself: console texts, input-list forms, output layout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fixtures.qairt_standin.net_run import make_board, set_faults
from qnn_ci.boards.netrun import run_on_board
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.local import LocalTransport
from tests.board_run.conftest import StandinBuild, write_samples


def _net_run(board: Path, *args: str, cwd: Path, ld: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if ld:
        env["LD_LIBRARY_PATH"] = f"/nonexistent:{board / 'lib'}"
    return subprocess.run([str(board / "bin" / "qnn-net-run"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def standin(tmp_path: Path) -> Path:
    return make_board(tmp_path / "board")


def test_failure_texts(standin: Path, library: Path, tmp_path: Path) -> None:
    lst = write_samples(tmp_path / "in", 1)
    htp = str(standin / "lib" / "libQnnHtp.so")
    r = _net_run(standin, "--model", str(library), "--backend", htp, "--input_list", str(lst),
                 cwd=tmp_path, ld=False)
    assert r.returncode != 0 and r.stdout.startswith("qnn-net-run pid:")
    assert "Unable to load backend. dlerror(): libQnnHtpV68Stub.so" in r.stderr
    assert f"Could not load backend : {htp}!" in r.stderr
    r = _net_run(standin, "--model", str(lst), "--backend", htp, "--input_list", str(lst),
                 cwd=tmp_path)
    assert r.returncode != 0 and f"Could not load model : {lst}!" in r.stderr
    r = _net_run(standin, "--model", str(library), "--backend", htp, "--input_list",
                 str(tmp_path / "nope.txt"), cwd=tmp_path)
    assert r.returncode != 0 and "Could not readInputLists" in r.stderr
    r = _net_run(standin, "--version", cwd=tmp_path)
    assert r.returncode == 0 and "QNN SDK v2.31.0" in r.stdout


def test_plain_paths_header_line_and_default_output_dir(standin: Path, library: Path,
                                                        tmp_path: Path) -> None:
    write_samples(tmp_path / "in", 2)
    lst = tmp_path / "plain.txt"
    lst.write_text("#feat_map_0 logits\nin/x_0.raw\nin/x_1.raw\n")   # relative to cwd
    r = _net_run(standin, "--model", str(library), "--backend",
                 str(standin / "lib" / "libQnnCpu.so"), "--input_list", str(lst),
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(tmp_path / "output").as_posix()
                   for p in (tmp_path / "output").rglob("*.raw"))
    assert files == ["Result_0/feat_map_0.raw", "Result_0/logits.raw",
                     "Result_1/feat_map_0.raw", "Result_1/logits.raw"]
    assert (tmp_path / "output/Result_1/logits.raw").stat().st_size == 40


def test_native_outputs_over_the_local_transport(library: Path, built: StandinBuild,
                                                 tmp_path: Path) -> None:
    """The runner is the board (LocalTransport): HTP native files are the 16-bit
    quantized values, CPU native files float32."""
    folder = make_board(tmp_path / "board")
    set_faults(folder, None)
    board = BoardConfig(name="local", transport="local", qnn_lib_dir=str(folder / "lib"),
                        net_run=str(folder / "bin" / "qnn-net-run"),
                        work_root=str(tmp_path / "work"), timeout_s=60)
    transport = LocalTransport(board)
    lst = write_samples(tmp_path / "in", 1)
    result = run_on_board(transport, board, library=library, input_list=lst,
                          input_names=["x"], native=True, workdir=tmp_path / "wd",
                          library_sdk_version=built.sdk_version)
    assert result.ok, result.findings
    htp = tmp_path / "wd/out_htp/Result_0"
    cpu = tmp_path / "wd/out_cpu/Result_0"
    assert sorted(p.name for p in htp.iterdir()) == ["feat_map_0_native.raw",
                                                     "logits_native.raw"]
    assert (htp / "logits_native.raw").stat().st_size == 10 * 2         # uint16
    assert (cpu / "logits_native.raw").stat().st_size == 10 * 4         # float32
    q = np.fromfile(htp / "feat_map_0_native.raw", np.uint16)
    assert q.size == 4 * 16 * 16 and q.max() > 1000                     # real 16-bit codes
    assert not list((tmp_path / "work").iterdir())


def test_board_time_is_opt_in_and_spent_asleep(library: Path, tmp_path: Path) -> None:
    """make_board(inference_s=...) gives each inference a slot that long on the wall
    clock, the stand-in's own work inside it and the rest asleep (as a real board's
    time is the device's, not the host's)."""
    import resource
    import time

    board = make_board(tmp_path / "slow", inference_s=0.8)
    write_samples(tmp_path / "in", 3)
    lst = tmp_path / "list.txt"
    lst.write_text("in/x_0.raw\nin/x_1.raw\nin/x_2.raw\n")
    args = ("--model", str(library), "--backend", str(board / "lib" / "libQnnCpu.so"),
            "--input_list", str(lst))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    r = _net_run(board, *args, cwd=tmp_path)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    assert wall >= 3 * 0.8
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.6 * wall                       # mostly asleep, not busy
    fast = make_board(tmp_path / "fast")
    assert not (fast / "timing.json").exists()    # off by default
