"""Measure inference latency in a board run's remote folder (``BoardRun``).

One ``qnn-net-run`` of the HTP backend with ``--profiling_level basic --perf_profile
<profile> --num_inferences <runs>`` into ``out_latency``; its
``qnn-profiling-data_0.log`` is read with ``qnn-profile-viewer --input_log <log>``:

1. on the host, the SDK's ``bin/x86_64-linux-clang/qnn-profile-viewer`` when an SDK
   is configured (the log is pulled to ``<workdir>/latency/``);
2. else (or when the host's gives nothing readable) on the board,
   ``qnn-profile-viewer`` beside the board's ``qnn-net-run``;
3. when the text holds only the summary (average / min / max), the same viewer is
   asked once more with ``--output <x>.csv``: an event stream with one row per
   inference gives the true median and p90; otherwise the summary stands;
4. when no viewer gives a profile: timed — a second run of ONE inference, and the
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
from typing import TYPE_CHECKING, Protocol

from qnn_ci.boards.latency import Latency, parse_viewer_output, timed
from qnn_ci.boards.netrun_failures import classify
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import ToolError, UserError
from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig
from qnn_ci.util.safe_read import read_text

if TYPE_CHECKING:
    from qnn_ci.engine.spec import ExportSpec
    from qnn_ci.engine.stage import Environment

log = logging.getLogger(__name__)


class BoardRun(Protocol):
    """What a latency measurement needs of a board run's remote folder (the run is
    ``qnn_ci.boards.netrun.BoardRun``, which calls in here)."""

    board: BoardConfig
    transport: Transport
    workdir: Path
    remote_dir: str
    timeout: float
    short_timeout: float

    def env(self) -> dict[str, str]: ...

    def net_run_argv(self, backend: str, native: bool, debug: bool = False, *,
                     output_dir: str | None = None) -> list[str]: ...

VIEWER = "qnn-profile-viewer"
PROFILE_LOG = "qnn-profiling-data_0.log"
OUT = "out_latency"
MAX_VIEWER_OUTPUT = 4_000_000
CSV_OUTPUT = "profile.csv"          # the viewer's --output (event stream)


@dataclass(frozen=True)
class LatencyRequest:
    """What a latency measurement asks for: runs, perf profile, the host's profile viewer."""

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


def _viewer_env(viewer: Path) -> dict[str, str]:
    env = dict(os.environ)
    if len(viewer.parents) > 2:          # <sdk>/bin/<host>/ -> <sdk>/lib/<host>
        libs = str(viewer.parents[2] / "lib" / viewer.parent.name)
        env["LD_LIBRARY_PATH"] = libs + (f":{env['LD_LIBRARY_PATH']}"
                                         if env.get("LD_LIBRARY_PATH") else "")
    return env


def _read_csv(path: Path) -> str | None:
    """The CSV the viewer wrote with ``--output``, None when there is none to read."""
    try:
        return read_text(path, cap=MAX_VIEWER_OUTPUT, what="qnn-profile-viewer CSV output")
    except UserError as exc:
        log.info("viewer CSV not read: %s", exc)
        return None


class _Viewer:
    """``qnn-profile-viewer`` on the host (the SDK's) or on the board."""

    def __init__(self, run: BoardRun, remote_log: str, host: Path | None) -> None:
        self.run, self.remote_log, self.host = run, remote_log, host
        self.local_dir = run.workdir / "latency"
        self.where = "host" if host is not None else "board"

    def _host(self, output: Path | None) -> str | None:
        assert self.host is not None
        local = self.local_dir / PROFILE_LOG
        if not local.is_file():
            self.run.transport.get(self.remote_log, local)
        argv = [str(self.host), "--input_log", str(local)]
        argv += ["--output", str(output)] if output is not None else []
        try:
            done = subprocess.run(argv, capture_output=True, timeout=self.run.short_timeout,
                                  check=False, env=_viewer_env(self.host))
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("host %s failed: %s", self.host, exc)
            return None
        if done.returncode != 0:
            log.info("host %s exited %s", self.host, done.returncode)
            return None
        return done.stdout[:MAX_VIEWER_OUTPUT].decode("utf-8", "replace")

    def _board(self, output: str | None) -> str | None:
        run = self.run
        argv = [board_viewer(run.board.net_run), "--input_log", self.remote_log]
        argv += ["--output", output] if output is not None else []
        res = run.transport.run(argv, timeout=run.short_timeout, env=run.env(),
                                cwd=run.remote_dir)
        if res.exit_code != 0 or res.timed_out:
            log.info("board %s: %s exited %s", run.board.name, VIEWER, res.exit_code)
            return None
        return res.stdout[:MAX_VIEWER_OUTPUT]

    def text(self) -> str | None:
        """What the viewer prints for the log."""
        return self._host(None) if self.host is not None else self._board(None)

    def csv(self) -> str | None:
        """The viewer's ``--output <x>.csv`` event stream, if it writes one."""
        local = self.local_dir / CSV_OUTPUT
        local.unlink(missing_ok=True)
        if self.host is not None:
            if self._host(local) is None:
                return None
        else:
            remote = posixpath.join(self.run.remote_dir, OUT, CSV_OUTPUT)
            if self._board(remote) is None:
                return None
            self.run.transport.get(remote, local)
        return _read_csv(local)


def _read_profile(run: BoardRun, req: LatencyRequest, remote_log: str
                  ) -> tuple[Latency | None, str, str]:
    """(latency, the viewer text kept as profile.txt, where the viewer ran) — the
    host SDK's viewer first, then the board's; when the text holds only the summary,
    the viewer's CSV output is asked for per-inference times."""
    hosts: list[Path | None] = []
    if req.host_viewer is not None and req.host_viewer.is_file():
        hosts.append(req.host_viewer)
    hosts.append(None)
    text, where, latency = "", "", None
    for host in hosts:
        viewer = _Viewer(run, remote_log, host)
        try:
            got = viewer.text()
            found = parse_viewer_output(got, runs=req.runs, perf_profile=req.perf_profile) \
                if got else None
            if got and not text:
                text, where = got, viewer.where
            if found is None:
                continue
            text, where, latency = got or "", viewer.where, found
            break
        except (ToolError, OSError) as exc:
            log.info("board %s: profile not read on the %s: %s", run.board.name,
                     viewer.where, exc)
    if latency is not None and not latency.exact:
        latency = _exact_from_csv(run, req, remote_log, where) or latency
    return latency, text, where


def _exact_from_csv(run: BoardRun, req: LatencyRequest, remote_log: str, where: str
                    ) -> Latency | None:
    """Per-inference times from the viewer's CSV output (same viewer), if any."""
    viewer = _Viewer(run, remote_log, req.host_viewer if where == "host" else None)
    try:
        csv_text = viewer.csv()
    except (ToolError, OSError) as exc:
        log.info("board %s: no CSV from the %s viewer: %s", run.board.name, where, exc)
        return None
    exact = parse_viewer_output(csv_text, runs=req.runs, perf_profile=req.perf_profile) \
        if csv_text else None
    return exact if exact is not None and exact.exact else None


def measure_latency(run: BoardRun, req: LatencyRequest, *, native: bool = False
                    ) -> tuple[Latency | None, list[Finding]]:
    """Latency of the HTP backend in ``run`` (prepared, HTP already run once), with
    the output files the comparison asked for (``native``)."""
    name = run.board.name
    folder = run.workdir / "latency"
    for stale in (PROFILE_LOG, "profile.txt", CSV_OUTPUT):      # a former run's
        (folder / stale).unlink(missing_ok=True)
    out_dir = posixpath.join(run.remote_dir, OUT)
    argv = run.net_run_argv("htp", native, output_dir=out_dir) + _flags(req, req.runs, True)
    res = run.transport.run(argv, timeout=run.timeout, env=run.env(), cwd=run.remote_dir)
    _write(run.workdir / "net_run_latency.log", argv, res.exit_code, res.stdout, res.stderr)
    failure = classify(res, backend="htp", board=name, net_run=run.board.net_run,
                       timeout=run.timeout)
    if failure is not None:
        return None, [_warn(name, f"the profiling run failed: {failure.message}")]
    latency, text, where = None, "", ""
    remote_log = posixpath.join(out_dir, PROFILE_LOG)
    found = run.transport.run(["find", OUT, "-name", PROFILE_LOG], timeout=run.short_timeout,
                              cwd=run.remote_dir)
    if PROFILE_LOG in found.stdout:
        folder.mkdir(parents=True, exist_ok=True)
        latency, text, where = _read_profile(run, req, remote_log)
    if text:
        (folder / "profile.txt").write_text(text, encoding="utf-8")
    if latency is not None:
        log.info("board %s: latency from the profile (%s viewer, %s)", name, where,
                 latency.source)
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
