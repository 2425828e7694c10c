"""Measure inference latency in a board run's remote folder (``BoardRun``).

One ``qnn-net-run`` of the HTP backend with ``--profiling_level basic --perf_profile
<profile> --num_inferences <runs>`` into ``out_latency``; its
``qnn-profiling-data_0.log`` is read with ``qnn-profile-viewer``:

1. on the host, the SDK's ``bin/x86_64-linux-clang/qnn-profile-viewer`` when an SDK
   is configured (the log is pulled to ``<workdir>/latency/``);
2. else on the board, ``qnn-profile-viewer`` beside the board's ``qnn-net-run``;
3. when neither gives a profile: timed — a second run of ONE inference, and the
   wall-clock difference per extra inference (``latency.method`` "timed").

A latency problem never fails the numeric check: it is a warning.
"""

from __future__ import annotations

import logging
import os
import posixpath
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qnn_ci.boards.latency import Latency, parse_viewer_output, timed
from qnn_ci.boards.netrun_failures import classify
from qnn_ci.errors import ToolError
from qnn_ci.results import Finding, Severity

if TYPE_CHECKING:
    from qnn_ci.boards.netrun import BoardRun
    from qnn_ci.spec import ExportSpec
    from qnn_ci.stage import Environment

log = logging.getLogger(__name__)

VIEWER = "qnn-profile-viewer"
PROFILE_LOG = "qnn-profiling-data_0.log"
OUT = "out_latency"
MAX_VIEWER_OUTPUT = 4_000_000


@dataclass(frozen=True)
class LatencyRequest:
    runs: int = 20
    perf_profile: str = "burst"
    host_viewer: Path | None = None      # the host SDK's qnn-profile-viewer, if any


def _flags(req: LatencyRequest, runs: int, profiling: bool) -> list[str]:
    return ((["--profiling_level", "basic"] if profiling else [])
            + ["--perf_profile", req.perf_profile, "--num_inferences", str(runs)])


def _warn(board: str, text: str) -> Finding:
    return Finding("board.latency", f"board {board}: latency: {text}", Severity.WARNING, board)


def board_viewer(net_run: str) -> str:
    """``qnn-profile-viewer`` beside the board's qnn-net-run (or on its PATH)."""
    folder = posixpath.dirname(net_run)
    return posixpath.join(folder, VIEWER) if folder else VIEWER


def _host_view(req: LatencyRequest, run: BoardRun, remote_log: str
               ) -> tuple[str | None, str]:
    """(viewer output or None, where it ran)."""
    viewer = req.host_viewer
    if viewer is None or not viewer.is_file():
        return None, ""
    local = run.workdir / "latency" / PROFILE_LOG
    local.parent.mkdir(parents=True, exist_ok=True)
    run.transport.get(remote_log, local)
    env = dict(os.environ)
    if len(viewer.parents) > 2:          # <sdk>/bin/<host>/ -> <sdk>/lib/<host>
        libs = str(viewer.parents[2] / "lib" / viewer.parent.name)
        env["LD_LIBRARY_PATH"] = libs + (f":{env['LD_LIBRARY_PATH']}"
                                         if env.get("LD_LIBRARY_PATH") else "")
    try:
        done = subprocess.run([str(viewer), "--input_log", str(local)], capture_output=True,
                              timeout=run.short_timeout, check=False, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("host %s failed: %s", viewer, exc)
        return None, "host"
    if done.returncode != 0:
        log.info("host %s exited %s", viewer, done.returncode)
        return None, "host"
    return done.stdout[:MAX_VIEWER_OUTPUT].decode("utf-8", "replace"), "host"


def _board_view(run: BoardRun, remote_log: str) -> str | None:
    res = run.transport.run([board_viewer(run.board.net_run), "--input_log", remote_log],
                            timeout=run.short_timeout, env=run.env(), cwd=run.remote_dir)
    if res.exit_code != 0 or res.timed_out:
        log.info("board %s: %s exited %s", run.board.name, VIEWER, res.exit_code)
        return None
    return res.stdout[:MAX_VIEWER_OUTPUT]


def measure_latency(run: BoardRun, req: LatencyRequest, *, native: bool = False
                    ) -> tuple[Latency | None, list[Finding]]:
    """Latency of the HTP backend in ``run`` (prepared, HTP already run once), with
    the output files the comparison asked for (``native``)."""
    name = run.board.name
    (run.workdir / "latency" / "profile.txt").unlink(missing_ok=True)   # a former run's
    out_dir = posixpath.join(run.remote_dir, OUT)
    argv = run.net_run_argv("htp", native, output_dir=out_dir) + _flags(req, req.runs, True)
    res = run.transport.run(argv, timeout=run.timeout, env=run.env(), cwd=run.remote_dir)
    _write(run.workdir / "net_run_latency.log", argv, res.exit_code, res.stdout, res.stderr)
    failure = classify(res, backend="htp", board=name, net_run=run.board.net_run,
                       timeout=run.timeout)
    if failure is not None:
        return None, [_warn(name, f"the profiling run failed: {failure.message}")]
    text: str | None = None
    where = ""
    remote_log = posixpath.join(out_dir, PROFILE_LOG)
    found = run.transport.run(["find", OUT, "-name", PROFILE_LOG], timeout=run.short_timeout,
                              cwd=run.remote_dir)
    if PROFILE_LOG in found.stdout:
        try:
            text, where = _host_view(req, run, remote_log)
            if text is None or parse_viewer_output(text, runs=req.runs) is None:
                text, where = _board_view(run, remote_log), "board"
        except (ToolError, OSError) as exc:
            log.info("board %s: profile not read: %s", name, exc)
    latency = parse_viewer_output(text, runs=req.runs, perf_profile=req.perf_profile) \
        if text else None
    if text:
        (run.workdir / "latency").mkdir(parents=True, exist_ok=True)
        (run.workdir / "latency" / "profile.txt").write_text(text, encoding="utf-8")
    if latency is not None:
        log.info("board %s: latency from the profile (%s viewer)", name, where)
        return latency, []
    why = ("no profiling log was written" if PROFILE_LOG not in found.stdout else
           f"{VIEWER} gave no readable profile (on the {where or 'board'})")
    single = run.transport.run(
        run.net_run_argv("htp", native, output_dir=posixpath.join(run.remote_dir, OUT + "_1"))
        + _flags(req, 1, True), timeout=run.timeout, env=run.env(), cwd=run.remote_dir)
    if single.exit_code != 0 or single.timed_out:
        return None, [_warn(name, f"{why}, and the timed single run failed")]
    latency = timed(res.duration_s, single.duration_s, req.runs, perf_profile=req.perf_profile)
    if latency is None:
        return None, [_warn(name, f"{why}, and the runs could not be timed")]
    return latency, [Finding("board.latency", f"board {name}: latency timed by wall-clock: "
                             f"{why}", Severity.INFO, name)]


def _write(path: Path, argv: list[str], code: int | None, out: str, err: str) -> None:
    path.write_text(f"$ {' '.join(argv)}\nexit status: {code}\n--- stdout\n{out}\n"
                    f"--- stderr\n{err}\n", encoding="utf-8")


def request_for(export: ExportSpec, env: Environment) -> LatencyRequest | None:
    """What ``export.latency`` asks for (None: disabled), with the host SDK's
    viewer when an SDK is configured."""
    from qnn_ci.sdk.locate import HOST_TOOLS_DIR, sdk_root_for

    spec = export.latency
    if not spec.enabled:
        return None
    root = sdk_root_for(export, env)
    viewer = root / HOST_TOOLS_DIR / VIEWER if root is not None else None
    return LatencyRequest(runs=spec.runs, perf_profile=spec.perf_profile, host_viewer=viewer)
