"""Latency on the board: qnn-net-run --profiling_level basic over a real sshd to the
stand-in board, the log read by qnn-profile-viewer (host SDK or board), the timed
fallback; and the viewer texts of the public examples parsed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_sdk
from fixtures.qairt_standin.net_run import make_board, set_faults
from qnn_ci.boards import latency as lt
from qnn_ci.boards.latency import median_p90, parse_viewer_output, timed
from qnn_ci.boards.latency_run import LatencyRequest, request_for
from qnn_ci.boards.netrun import NetRunResult, run_on_board
from qnn_ci.engine.results import Severity, Status
from qnn_ci.engine.spec import ExportSpec, LatencySpec
from qnn_ci.engine.stage import Environment
from qnn_ci.stages.htp_vs_cpu import HtpVsCpuStage
from tests.board_run.conftest import Board, StandinBuild, write_samples
from tests.board_run.test_stages import _ctx, _env, _export, _upstream

# Excerpts typed from public outputs of the real tools (docs/board-runs.md, "Latency",
# lists every source). qnn-profile-viewer text, current layout (Graph lines, Execute
# Stats (Average)/(Min)/(Max)); numbers as in the public tutorial paste (a QNN tutorial
# in Chinese crediting blog.csdn.net/weixin_51031772/article/details/141331531); its
# Min/Max sections are ours (the paste cut them).
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

# The 2.8 viewer's layout: per-inference "Execute Stat <k>" blocks from the backend
# (tristanqiu8/qnn_test_flow, detailed_output_sample/output/detailed_output.txt,
# qnn-profile-viewer v2.8.0; blocks 2 and 3 are ours).
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

# The event-stream columns of onnxruntime's QNN EP profiling CSV
# (onnxruntime/core/providers/qnn/builder/qnn_backend_manager.cc: "UNKNOWN" timestamp,
# EXECUTE root rows, units US / CYCLES / COUNT).
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
    assert "average and max" in lat.statistic and lat.source == lt.SUMMARY and not lat.exact
    assert lat.properties()["latency.perf_profile"] == "burst"


def test_per_inference_blocks_give_median_and_p90() -> None:
    lat = parse_viewer_output(PER_INFERENCE_TEXT, runs=3)
    assert lat is not None
    assert (lat.median_ms, lat.p90_ms, lat.runs) == (3.051, 4.0, 3)
    assert lat.statistic == "median and p90 of 3 profiled inference(s) (viewer text)"
    assert lat.source == lt.PER_INFERENCE_TEXT and lat.exact


def test_csv_event_stream_gives_the_execute_rows() -> None:
    lat = parse_viewer_output("some banner\n" + CSV_TEXT, runs=2)
    assert lat is not None and (lat.median_ms, lat.p90_ms, lat.runs) == (3.2, 3.3, 2)
    assert lat.source == lt.PER_INFERENCE_CSV


# A real run's HTP lines as public scripts grep them (cycles beside microseconds,
# "execute excluding wait", two graphs): only NetRun times count, per graph summed.
TWO_GRAPHS_TEXT = """\
Input Log File Location: out/qnn-profiling-data_0.log
Execute Stats (Average):
------------------------
Total Inference Time:
---------------------
Graph 0 (encoder):
    NetRun:  1500 us
    Backend (Accelerator (execute) time (cycles)): 9000000 cycles
    Backend (Accelerator (execute excluding wait) time): 1200 us
Graph 1 (decoder):
    NetRun:  2.5 ms
    Backend (QNN (execute) time): 2490 us

Execute Stats (Max):
--------------------
Total Inference Time:
---------------------
Graph 0 (encoder):
    NetRun:  2000 us
Graph 1 (decoder):
    NetRun:  3000 US
"""


def test_the_csv_with_quoted_identifiers_and_extra_columns_reads() -> None:
    """Quoted identifiers and an extra ``ONNX Source Ops`` column (onnxruntime's
    newer header); cycles and counts never count as times; no EXECUTE rows, so the
    ``QNN (execute) time`` rows are the inferences."""
    text = ("\ufeffMsg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,"
            "Event Identifier,ONNX Source Ops\n"
            '0,ROOT,4,COUNT,HW,ROOT,"Number of HVX threads used",\n'
            '1,ROOT,100000,CYCLES,HW,ROOT,"Accelerator (execute) time (cycles)",\n'
            '2,BACKEND,2000,US,BACKEND,ROOT,"QNN (execute) time",\n'
            '3,BACKEND,4000,us,BACKEND,ROOT,"QNN (execute) time",\n'
            '4,BACKEND,3000,US,BACKEND,ROOT,"QNN (execute) time","/conv"\n')
    lat = parse_viewer_output(text, runs=3)
    assert lat is not None and lat.source == lt.PER_INFERENCE_CSV and lat.exact
    assert (lat.median_ms, lat.p90_ms, lat.runs) == (3.0, 4.0, 3)


def test_several_graphs_are_summed_and_units_converted() -> None:
    lat = parse_viewer_output(TWO_GRAPHS_TEXT, runs=10)
    assert lat is not None and lat.source == lt.SUMMARY and not lat.exact
    assert (lat.median_ms, lat.p90_ms) == (4.0, 5.0)


def test_only_the_overall_ips_gives_its_inverse() -> None:
    text = ("Execute Stats (Overall):\n------------------------\n"
            "    NetRun IPS (includes IO and misc. time): 250.0000 inf/sec\n")
    lat = parse_viewer_output(text, runs=7)
    assert lat is not None and lat.source == lt.OVERALL_IPS
    assert (lat.median_ms, lat.p90_ms, lat.runs) == (4.0, 4.0, 7)
    assert "IPS" in lat.statistic and lat.properties()["latency.source"] == lt.OVERALL_IPS


def test_per_inference_blocks_win_over_a_summary_and_read_ms() -> None:
    text = SUMMARY_TEXT + "\nExecute Stats: \n\nExecute Stat 1\nQNN (execute) time : 1.5  ms\n" \
        "\nExecute Stat 2\n    Backend (QNN (execute) time): 2500 usec\n"
    lat = parse_viewer_output(text, runs=20)
    assert lat is not None and lat.source == lt.PER_INFERENCE_TEXT
    assert (lat.median_ms, lat.p90_ms, lat.runs) == (2.0, 2.5, 2)


@pytest.mark.parametrize("text", ["", "Execute Stats (Average):\n", "NetRun: 12 us\n",
                                  "Execute Stats (Average):\n    NetRun:  nan us\n",
                                  "Execute Stats (Average):\n    NetRun:  12 cycles\n",
                                  "Execute Stats (Average):\n    NetRun:  12 usb\n",
                                  "Execute Stats (Overall):\n  NetRun IPS: 0 inf/sec\n",
                                  "Msg Timestamp,Message\n1,2\n", "Execute Stat 1\n",
                                  "Execute Stat 1\nAccelerator (execute) time (cycles) : 9"
                                  "  cycles\n"])
def test_text_without_a_latency_is_none(text: str) -> None:
    assert parse_viewer_output(text, runs=5) is None


def test_a_huge_viewer_output_is_capped_and_does_not_hang() -> None:
    import time

    blocks = "".join(f"Execute Stat {k}\nQNN (execute) time : {1000 + k % 97}  us\n"
                     for k in range(150_000))
    started = time.monotonic()
    lat = parse_viewer_output(blocks, runs=5)
    assert time.monotonic() - started < 10      # "does not explode", not a timing
    assert len(blocks) > lt.MAX_TEXT
    assert lat is not None and 0 < lat.runs < 150_000    # cut at MAX_TEXT characters


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
    # the text is the summary; the viewer's CSV gave every inference
    assert lat.runs == 5 and lat.source == lt.PER_INFERENCE_CSV
    assert lat.statistic == "median and p90 of 5 profiled inference(s) (viewer CSV events)"
    assert 0 < lat.median_ms <= lat.p90_ms
    log = (tmp_path / "wd/net_run_latency.log").read_text()
    assert "--profiling_level basic --perf_profile burst --num_inferences 5" in log
    assert "Execute Stats (Average):" in (tmp_path / "wd/latency/profile.txt").read_text()
    csv_rows = (tmp_path / "wd/latency/profile.csv").read_text().splitlines()
    assert sum(",EXECUTE," in row for row in csv_rows) == 5
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
    assert result.latency.source == lt.PER_INFERENCE_CSV and result.latency.runs == 3
    assert (tmp_path / "wd/latency/qnn-profiling-data_0.log").is_file()   # pulled
    assert (tmp_path / "wd/latency/profile.csv").is_file()                # written here


def test_a_former_runs_pulled_log_is_never_read_again(sshd_server: object, board: Board,
                                                      library: Path, tmp_path: Path) -> None:
    """Same work folder, a second (slower) run: the host viewer reads the new log."""
    folder = make_board(tmp_path / "bare-board", profile_viewer=False)
    bare = board.with_config(net_run=str(folder / "bin/qnn-net-run"),
                             qnn_lib_dir=str(folder / "lib"))
    viewer = make_sdk(tmp_path / "sdk") / "bin/x86_64-linux-clang/qnn-profile-viewer"
    req = LatencyRequest(runs=3, host_viewer=viewer)
    fast = _run(bare, library, tmp_path, req)
    slow = _run(bare.with_config(env={"QNNCI_NETRUN_INFERENCE_S": "0.25"}), library,
                tmp_path, req)
    assert fast.latency is not None and slow.latency is not None
    assert slow.latency.median_ms > 100.0 > fast.latency.median_ms


def test_a_host_viewer_without_csv_keeps_the_summary(sshd_server: object, board: Board,
                                                     library: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QNNCI_PROFILE_VIEWER_CSV", "0")
    folder = make_board(tmp_path / "bare-board", profile_viewer=False)
    bare = board.with_config(net_run=str(folder / "bin/qnn-net-run"),
                             qnn_lib_dir=str(folder / "lib"))
    viewer = make_sdk(tmp_path / "sdk") / "bin/x86_64-linux-clang/qnn-profile-viewer"
    result = _run(bare, library, tmp_path, LatencyRequest(runs=4, host_viewer=viewer))
    lat = result.latency
    assert lat is not None and lat.source == lt.SUMMARY and lat.runs == 4
    assert "average and max" in lat.statistic and lat.median_ms <= lat.p90_ms


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
    summary = board.with_config(env={"QNNCI_PROFILE_VIEWER_CSV": "0"})
    result = _run(summary, library, tmp_path / "b", LatencyRequest(runs=3))
    assert result.latency is not None and result.latency.method == "profile"
    assert "average and max" in result.latency.statistic
    assert result.latency.source == lt.SUMMARY
    assert not (tmp_path / "b/wd/latency/profile.csv").exists()


def test_the_2_8_viewer_layout_gives_every_inference(board: Board, library: Path,
                                                      tmp_path: Path) -> None:
    old = board.with_config(env={"QNNCI_PROFILE_VIEWER_STYLE": "v2.8",
                                 "QNNCI_PROFILE_VIEWER_CSV": "0"})
    result = _run(old, library, tmp_path, LatencyRequest(runs=6))
    lat = result.latency
    assert lat is not None and lat.source == lt.PER_INFERENCE_TEXT and lat.runs == 6
    assert "Execute Stat 6" in (tmp_path / "wd/latency/profile.txt").read_text()


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
    assert props["latency.source"] == lt.PER_INFERENCE_CSV
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
