"""Latency on the board: qnn-net-run --profiling_level basic over a real sshd to the
stand-in board, the log read by qnn-profile-viewer (host SDK or board), the timed
fallback; and the viewer texts of the public examples parsed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_sdk
from fixtures.qairt_standin.net_run import make_board, set_faults
from qnn_ci.boards.latency import median_p90, parse_viewer_output, timed
from qnn_ci.boards.latency_run import LatencyRequest, request_for
from qnn_ci.boards.netrun import NetRunResult, run_on_board
from qnn_ci.results import Severity, Status
from qnn_ci.spec import ExportSpec, LatencySpec
from qnn_ci.stage import Environment
from qnn_ci.stages.htp_vs_cpu import HtpVsCpuStage
from tests.board_run.conftest import Board, StandinBuild, write_samples
from tests.board_run.test_stages import _ctx, _env, _export, _upstream

# qnn-profile-viewer output with basic profiling, modern layout (Graph lines, Execute
# Stats (Average)/(Min)/(Max)); numbers as in the public paste cited in docs/board-runs.md.
SUMMARY_TEXT = """\
Qnn Init/Prepare/Finalize/De-Init/Execute/Lib-Load Statistics:
------------------------------------------------------------
Init Stats:
-----------
    NetRun:  331158 us

Finalize Stats:
---------------
Graph 0 (model):
    NetRun:  256372 us
    Backend (RPC (finalize) time): 4922 us

De-Init Stats:
--------------
    NetRun:  15810 us

Execute Stats (Overall):
------------------------
    NetRun IPS (includes IO and misc. time): 214.8888 inf/sec

Execute Stats (Average):
------------------------
Total Inference Time:
---------------------
Graph 0 (model):
    NetRun:  2952 us
    Backend (Number of HVX threads used): 4 count
    Backend (RPC (execute) time): 2920 us
    Backend (QNN (execute) time): 2949 us

Execute Stats (Min):
--------------------
Total Inference Time:
---------------------
Graph 0 (model):
    NetRun:  2801 us

Execute Stats (Max):
--------------------
Total Inference Time:
---------------------
Graph 0 (model):
    NetRun:  3410 us
"""

# The 2.8 viewer's layout: per-inference "Execute Stat <k>" blocks from the backend.
PER_INFERENCE_TEXT = """\
qnn-profile-viewer v2.8.0.230223123141_52150

Init Stats:
-----------
    NetRun:  98436 us

Printing All Data Received From Back End

Execute Stats:\x20

Execute Stat 1

Number of HVX threads used : 4  count
RPC (execute) time : 2688  us
Accelerator (execute) time : 554  us
QNN (execute) time : 3051  us

Execute Stat 2

RPC (execute) time : 2600  us
QNN (execute) time : 2000  us

Execute Stat 3

QNN (execute) time : 4000  us
"""

CSV_TEXT = """\
Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,EXECUTE,3100,US,BACKEND,ROOT,NULL
0,BACKEND,2800,US,BACKEND,SUB-EVENT,Accelerator (execute) time
0,EXECUTE,3300,US,BACKEND,ROOT,NULL
0,BACKEND,2700,US,BACKEND,SUB-EVENT,Accelerator (execute) time
"""


def test_the_summary_layout_gives_average_and_max() -> None:
    lat = parse_viewer_output(SUMMARY_TEXT, runs=20, perf_profile="burst")
    assert lat is not None
    assert (lat.median_ms, lat.p90_ms, lat.runs, lat.method) == (2.952, 3.41, 20, "profile")
    assert "average and max" in lat.statistic
    assert lat.properties()["latency.perf_profile"] == "burst"


def test_per_inference_blocks_give_median_and_p90() -> None:
    lat = parse_viewer_output(PER_INFERENCE_TEXT, runs=3)
    assert lat is not None
    assert (lat.median_ms, lat.p90_ms, lat.runs) == (3.051, 4.0, 3)
    assert lat.statistic == "median and p90 of 3 profiled inference(s)"


def test_csv_event_stream_gives_the_execute_rows() -> None:
    lat = parse_viewer_output("some banner\n" + CSV_TEXT, runs=2)
    assert lat is not None and (lat.median_ms, lat.p90_ms, lat.runs) == (3.2, 3.3, 2)


@pytest.mark.parametrize("text", ["", "Execute Stats (Average):\n", "NetRun: 12 us\n",
                                  "Execute Stats (Average):\n    NetRun:  nan us\n",
                                  "Msg Timestamp,Message\n1,2\n", "Execute Stat 1\n"])
def test_text_without_a_latency_is_none(text: str) -> None:
    assert parse_viewer_output(text, runs=5) is None


def test_median_p90_and_timed_arithmetic() -> None:
    assert median_p90([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]) == (5.5, 9.0)
    assert median_p90([7.0]) == (7.0, 7.0)
    lat = timed(2.0, 0.5, 4)
    assert lat is not None and lat.median_ms == pytest.approx(500.0) and lat.method == "timed"
    assert timed(float("nan"), 0.1, 3) is None


def _run(board: Board, library: Path, tmp_path: Path, req: LatencyRequest | None,
         samples: int = 2) -> NetRunResult:
    lst = write_samples(tmp_path / "in", samples)
    transport = board.open(board.config)
    try:
        return run_on_board(transport, board.config, library=library, input_list=lst,
                            input_names=["x"], workdir=tmp_path / "wd", backends=("htp",),
                            library_sdk_version="2.31.0", latency=req)
    finally:
        transport.close()


def _latency_notes(result: NetRunResult) -> list[str]:
    return [f.message for f in result.findings if f.check == "board.latency"]


def test_profile_is_read_with_the_viewer_on_the_board(board: Board, library: Path,
                                                      tmp_path: Path) -> None:
    result = _run(board, library, tmp_path, LatencyRequest(runs=5, perf_profile="burst"))
    assert result.ok, result.findings
    lat = result.latency
    assert lat is not None and lat.method == "profile", _latency_notes(result)
    assert lat.runs == 5 and lat.statistic == "median and p90 of 5 profiled inference(s)"
    assert 0 < lat.median_ms <= lat.p90_ms
    log = (tmp_path / "wd/net_run_latency.log").read_text()
    assert "--profiling_level basic --perf_profile burst --num_inferences 5" in log
    assert "Execute Stats (Average):" in (tmp_path / "wd/latency/profile.txt").read_text()
    assert result.to_dict()["latency"]["latency.method"] == "profile"
    assert sorted(p.name for p in board.work_root.iterdir()) == ["keep-me"]


def test_profile_is_read_with_the_host_sdk_viewer(sshd_server: object, board: Board,
                                                  library: Path, tmp_path: Path) -> None:
    folder = make_board(tmp_path / "bare-board", profile_viewer=False)
    bare = board.with_config(net_run=str(folder / "bin/qnn-net-run"),
                             qnn_lib_dir=str(folder / "lib"))
    sdk = make_sdk(tmp_path / "sdk")
    viewer = sdk / "bin/x86_64-linux-clang/qnn-profile-viewer"
    result = _run(bare, library, tmp_path, LatencyRequest(runs=3, host_viewer=viewer))
    assert result.latency is not None and result.latency.method == "profile"
    assert (tmp_path / "wd/latency/qnn-profiling-data_0.log").is_file()   # pulled


def test_without_a_viewer_the_runs_are_timed_and_it_says_so(board: Board, library: Path,
                                                            tmp_path: Path) -> None:
    folder = make_board(tmp_path / "bare-board", profile_viewer=False)
    bare = board.with_config(net_run=str(folder / "bin/qnn-net-run"),
                             qnn_lib_dir=str(folder / "lib"))
    result = _run(bare, library, tmp_path, LatencyRequest(runs=4, perf_profile="balanced"))
    assert result.ok, result.findings
    lat = result.latency
    assert lat is not None and lat.method == "timed" and lat.runs == 4
    assert lat.perf_profile == "balanced" and "wall-clock" in lat.statistic
    (note,) = [f for f in result.findings if f.check == "board.latency"]
    assert note.severity == Severity.INFO
    assert "qnn-profile-viewer gave no readable profile (on the board)" in note.message


def test_no_profiling_log_falls_back_to_timing(board: Board, library: Path,
                                               tmp_path: Path) -> None:
    set_faults(board.folder, {"no_profile": "htp"})
    result = _run(board, library, tmp_path, LatencyRequest(runs=3))
    assert result.latency is not None and result.latency.method == "timed"
    assert any("no profiling log was written" in m for m in _latency_notes(result))


def test_a_broken_viewer_falls_back_and_a_summary_viewer_is_read(board: Board, library: Path,
                                                                  tmp_path: Path) -> None:
    broken = board.with_config(env={"QNNCI_PROFILE_VIEWER_STYLE": "broken"})
    result = _run(broken, library, tmp_path / "a", LatencyRequest(runs=3))
    assert result.latency is not None and result.latency.method == "timed"
    summary = board.with_config(env={"QNNCI_PROFILE_VIEWER_STYLE": "summary"})
    result = _run(summary, library, tmp_path / "b", LatencyRequest(runs=3))
    assert result.latency is not None and result.latency.method == "profile"
    assert "average and max" in result.latency.statistic


@pytest.mark.parametrize("viewer", [True, False], ids=["profile", "timed"])
def test_a_slower_board_gives_a_higher_median(board: Board, library: Path, tmp_path: Path,
                                              viewer: bool) -> None:
    folder = make_board(tmp_path / "b", profile_viewer=viewer)
    base = board.with_config(net_run=str(folder / "bin/qnn-net-run"),
                             qnn_lib_dir=str(folder / "lib"))
    fast = _run(base, library, tmp_path / "fast", LatencyRequest(runs=4))
    slow = _run(base.with_config(env={"QNNCI_NETRUN_INFERENCE_S": "0.25"}), library,
                tmp_path / "slow", LatencyRequest(runs=4))
    method = "profile" if viewer else "timed"
    assert fast.latency is not None and slow.latency is not None
    assert fast.latency.method == slow.latency.method == method
    # every inference sleeps to the end of its 250 ms slot: a lower bound, not a timing
    assert slow.latency.median_ms > 100.0
    assert slow.latency.median_ms > fast.latency.median_ms


def test_a_failing_profiling_run_is_a_warning_not_a_failure(board: Board, library: Path,
                                                            tmp_path: Path) -> None:
    req = LatencyRequest(runs=3, perf_profile="warp_speed")    # the tool refuses it
    result = _run(board, library, tmp_path, req)
    assert result.ok and result.latency is None
    (note,) = _latency_notes(result)
    assert "the profiling run failed" in note


def test_request_follows_the_manifest_and_the_sdk(tmp_path: Path) -> None:
    export = ExportSpec(name="m", model=tmp_path / "m.onnx", manifest=tmp_path / "q.yaml",
                        line=1, latency=LatencySpec(runs=7, perf_profile="high_performance"))
    env = Environment(workdir=tmp_path, sdk_root=tmp_path / "sdk")
    req = request_for(export, env)
    assert req == LatencyRequest(7, "high_performance",
                                 tmp_path / "sdk/bin/x86_64-linux-clang/qnn-profile-viewer")
    off = replace(export, latency=LatencySpec(enabled=False))
    assert request_for(off, env) is None


def test_htp_vs_cpu_reports_latency_properties(built: StandinBuild, board: Board,
                                               tmp_path: Path) -> None:
    from qnn_ci.stages.so_load import SoLoadStage

    export = replace(_export(built, tmp_path), latency=LatencySpec(runs=3))
    env, up = _env(board, tmp_path), _upstream(built)
    so = SoLoadStage().run(_ctx(export, env, "so_load", up))
    res = HtpVsCpuStage().run(_ctx(export, env, "htp_vs_cpu", up | {"so_load": so}))
    assert res.status == Status.PASSED, res.failure_text()
    props = res.properties
    assert props["latency.method"] == "profile" and props["latency.runs"] == 3
    assert props["latency.perf_profile"] == "burst"
    assert 0 < props["latency.median_ms"] <= props["latency.p90_ms"]
    assert "latency median" in res.summary
    assert "Execute Stats (Average):" in Path(res.artefacts["latency_profile"]).read_text()
    off = replace(export, latency=LatencySpec(enabled=False))
    res = HtpVsCpuStage().run(_ctx(off, env, "htp_vs_cpu", up | {"so_load": so}))
    assert res.status == Status.PASSED and not any(k.startswith("latency.") for k in
                                                   res.properties)


def test_the_tutorial_paste_with_its_markdown_damage_still_reads() -> None:
    """The public paste's headings lost their line breaks ("--- Total Inference
    Time:"), and its Overall section (after the Average one) has ``NetRun IPS``."""
    text = ("Execute Stats (Average):\n\n--- Total Inference Time:\n\n--- Graph 0 (model):\n"
            "    NetRun:  2952 us\n    Backend (QNN (execute) time): 2949 us\n\n"
            "Execute Stats (Overall):\n\n---\n    NetRun IPS:  214.8888 inf/sec\n")
    lat = parse_viewer_output(text, runs=10)
    assert lat is not None and (lat.median_ms, lat.p90_ms) == (2.952, 2.952)
