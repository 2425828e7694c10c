"""Run a model library on a board with ``qnn-net-run``: the CPU backend is the
reference, the HTP backend the target, both on identical inputs.

One run = one fresh remote folder under ``board.work_root`` (unique per runner
host, pid and time). The library, the input ``.raw`` files and an input list
rewritten for the remote paths are pushed there; qnn-net-run runs once per
backend into ``out_<backend>``; ``Result_N/*.raw`` come back to
``<workdir>/out_<backend>``; then that folder, and only that folder, is removed —
also when something failed. Every remote command has a timeout.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from qnn_ci.boards.latency import Latency
from qnn_ci.boards.latency_run import LatencyRequest, measure_latency
from qnn_ci.boards.netrun_failures import classify
from qnn_ci.boards.result_files import ExpectedOutput, check_result_files
from qnn_ci.boards.versions import BoardVersion, read_board_version, version_findings
from qnn_ci.calibration.input_list import parse_input_list, resolve_line
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import ToolError, UserError
from qnn_ci.transport.base import CommandResult, DiskFullError, Transport, TransportError
from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

BACKEND_LIBS: dict[str, str] = {"cpu": "libQnnCpu.so", "htp": "libQnnHtp.so",
                                "gpu": "libQnnGpu.so"}
SHORT_COMMAND_S = 60.0          # ceiling for mkdir / grep / find style commands
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RESULT = re.compile(r"Result_\d+\Z")


@dataclass
class BackendOutcome:
    """One backend's qnn-net-run on the board: exit status, time, pulled outputs and log."""

    backend: str                    # "cpu" | "htp"
    ok: bool
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output_dir: Path | None         # local copy of out_<backend> (None: nothing pulled)
    log: Path | None                # the tool's console output
    failure: str | None = None      # check id when it failed
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "exit_code": self.exit_code,
                "timed_out": self.timed_out, "duration_s": round(self.duration_s, 3),
                "output_dir": str(self.output_dir) if self.output_dir else None,
                "log": str(self.log) if self.log else None, "failure": self.failure,
                "message": self.message}


@dataclass
class NetRunResult:
    """A board run of a model library: each backend's outcome, versions, latency, findings."""

    board: str
    remote_dir: str
    samples: int
    backends: dict[str, BackendOutcome] = field(default_factory=dict)
    board_version: BoardVersion | None = None
    library_sdk_version: str | None = None
    findings: list[Finding] = field(default_factory=list)
    latency: Latency | None = None

    @property
    def ok(self) -> bool:
        return not any(f.severity == Severity.ERROR for f in self.findings)

    @property
    def reachable(self) -> bool:
        return not any(f.check == "board.unreachable" for f in self.findings)

    def output_dir(self, backend: str) -> Path | None:
        outcome = self.backends.get(backend)
        return outcome.output_dir if outcome else None

    def to_dict(self) -> dict[str, Any]:
        return {"board": self.board, "remote_dir": self.remote_dir, "samples": self.samples,
                "backends": {k: v.to_dict() for k, v in self.backends.items()},
                "board_qnn_version": self.board_version.version if self.board_version else None,
                "board_version_source": self.board_version.source if self.board_version else None,
                "library_sdk_version": self.library_sdk_version,
                "latency": self.latency.properties() if self.latency else None,
                "findings": [f.to_dict() for f in self.findings]}


def run_id() -> str:
    """Unique per run: runner host, pid, time, and a random tail."""
    host = _SAFE.sub("-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def select_samples(input_list: Path, input_names: list[str],
                   max_samples: int | None = None) -> tuple[str | None, list[dict[str, Path]]]:
    """(optional `#` header line, samples as {graph input: existing local file})."""
    parsed = parse_input_list(input_list)
    lines = parsed.lines[:max_samples] if max_samples else parsed.lines
    if not lines:
        raise UserError("the input list has no samples", file=input_list)
    samples = []
    for line in lines:
        sample = resolve_line(line, input_names, source=input_list)
        unknown = sorted(set(sample) - set(input_names))
        if unknown:
            raise UserError(f"names input {unknown[0]!r}; the model's inputs are "
                            f"{', '.join(input_names)}", file=input_list, line=line.lineno)
        missing = [n for n in input_names if n not in sample]
        if missing:
            raise UserError(f"gives no file for input {missing[0]!r}", file=input_list,
                            line=line.lineno)
        resolved = {}
        for name, path in sample.items():
            p = path if path.is_absolute() else input_list.parent / path
            if not p.is_file():
                raise UserError(f"input file {p} does not exist", file=input_list,
                                line=line.lineno)
            resolved[name] = p
        samples.append(resolved)
    return parsed.header, samples


class BoardRun:
    """One run's remote folder on a board; a context manager that always removes it."""

    def __init__(self, transport: Transport, board: BoardConfig, *, workdir: Path,
                 timeout: float | None = None) -> None:
        self.transport = transport
        self.board = board
        self.workdir = Path(workdir)
        self.timeout = float(timeout if timeout is not None else board.timeout_s)
        self.remote_dir = posixpath.join(board.work_root, f"run-{run_id()}")
        self.short_timeout = min(self.timeout, SHORT_COMMAND_S)
        self.library_remote = ""
        self.context_remote = ""        # a context binary to run (--retrieve_context)
        self.config_remote = ""         # the HTP backend-extension wrapper (--config_file)
        self.list_remote = ""
        self.samples = 0
        self._created = False

    # -- setup ---------------------------------------------------------------------
    def create(self) -> None:
        """Create the remote folder (once)."""
        if not self._created:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.transport.mkdir(self.remote_dir)
            self._created = True

    def push_library(self, library: Path) -> str:
        """Push the model library; its remote path."""
        self.create()
        lib_name = "libmodel.so" if _SAFE.search(library.name) else library.name
        self.library_remote = posixpath.join(self.remote_dir, lib_name)
        self.transport.put(library, self.library_remote)
        return self.library_remote

    def push_context(self, binary: Path) -> str:
        """Push a context binary: the runs load it (``--retrieve_context``), not a library."""
        self.create()
        name = "context.bin" if _SAFE.search(binary.name) else binary.name
        self.context_remote = posixpath.join(self.remote_dir, name)
        self.transport.put(binary, self.context_remote)
        return self.context_remote

    def push_htp_config(self, write: Callable[[Path, str], Path]) -> str:
        """Write the HTP config for this run's remote folder and push it: ``write(folder,
        remote inner path)`` writes the inner file and the wrapper into ``folder`` and
        returns the wrapper. The HTP runs then pass ``--config_file``."""
        self.create()
        local = self.workdir / "htp_config"
        local.mkdir(parents=True, exist_ok=True)
        inner_remote = posixpath.join(self.remote_dir, "htp_config.json")
        wrapper = write(local, inner_remote)
        for path in sorted(local.iterdir()):
            self.transport.put(path, posixpath.join(self.remote_dir, path.name))
        self.config_remote = posixpath.join(self.remote_dir, wrapper.name)
        return self.config_remote

    def prepare(self, library: Path | None, samples: list[dict[str, Path]],
                input_names: list[str], header: str | None = None) -> None:
        """Create the remote folder and push the library (unless a context binary is
        run), inputs and input list."""
        self.create()
        inputs_dir = posixpath.join(self.remote_dir, "inputs")
        self.transport.mkdir(inputs_dir)
        if library is not None:
            self.push_library(library)
        # Plain paths in graph-input order: no name (sanitised or not) to get wrong.
        # Absolute paths unless the work root holds whitespace, which the
        # space-separated list cannot carry: then relative to the run folder (cwd).
        absolute = not re.search(r"\s", self.remote_dir)
        lines = [header] if header else []
        for n, sample in enumerate(samples):
            entries = []
            for k, name in enumerate(input_names):
                rel = f"inputs/s{n}_i{k}.raw"
                self.transport.put(sample[name], posixpath.join(self.remote_dir, rel))
                entries.append(posixpath.join(self.remote_dir, rel) if absolute else rel)
            lines.append(" ".join(entries))
        local_list = self.workdir / "remote_input_list.txt"
        local_list.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.list_remote = posixpath.join(self.remote_dir, "input_list.txt")
        self.transport.put(local_list, self.list_remote)
        self.samples = len(samples)

    def env(self) -> dict[str, str]:
        env = dict(self.board.env)
        extra = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = self.board.qnn_lib_dir + (f":{extra}" if extra else "")
        return env

    # -- running -------------------------------------------------------------------
    def net_run_argv(self, backend: str, native: bool, debug: bool = False, *,
                     output_dir: str | None = None) -> list[str]:
        lib = BACKEND_LIBS.get(backend)
        if lib is None:
            raise UserError(f"unknown backend {backend!r}; use one of "
                            f"{', '.join(BACKEND_LIBS)}")
        model = (["--retrieve_context", self.context_remote] if self.context_remote
                 else ["--model", self.library_remote])
        argv = [self.board.net_run, *model,
                "--backend", posixpath.join(self.board.qnn_lib_dir, lib),
                "--input_list", self.list_remote,
                "--output_dir",
                output_dir or posixpath.join(self.remote_dir, f"out_{backend}")]
        if self.config_remote and backend == "htp":
            argv += ["--config_file", self.config_remote]
        return argv + (["--use_native_output_files"] if native else []) \
            + (["--debug"] if debug else [])

    def run_backend(self, backend: str, *, native: bool = False,
                    debug: bool = False) -> BackendOutcome:
        """One qnn-net-run; ``debug`` adds ``--debug`` (every layer's output is written
        beside the graph outputs, pulled the same way)."""
        argv = self.net_run_argv(backend, native, debug)
        log.info("board %s: %s", self.board.name, " ".join(argv))
        res = self.transport.run(argv, timeout=self.timeout, env=self.env(),
                                 cwd=self.remote_dir)
        log_path = self.workdir / f"net_run_{backend}.log"
        write_command_log(log_path, res)
        failure = classify(res, backend=backend, board=self.board.name,
                           net_run=self.board.net_run, timeout=self.timeout)
        outcome = BackendOutcome(backend, failure is None, res.exit_code, res.timed_out,
                                 res.duration_s, None, log_path)
        if failure is not None:
            outcome.failure, outcome.message = failure.check, failure.message
            return outcome
        outcome.output_dir = self.pull(backend)
        return outcome

    def pull(self, backend: str) -> Path:
        """Copy ``out_<backend>/**/Result_*/**.raw`` into ``<workdir>/out_<backend>``.

        Files sit in ``Result_N/`` (sub-folders below it kept, as made by a ``/`` in a
        tensor name) or, with several graphs, below a ``<graph name>/`` folder above
        ``Result_N``; that level is moved below ``Result_N`` here
        (``Result_N/<graph>/<tensor>.raw``), the layout ``qnn_ci.compare`` reads."""
        local = self.workdir / f"out_{backend}"
        if local.exists():
            shutil.rmtree(local)
        local.mkdir(parents=True)
        top = f"out_{backend}"
        res = self.transport.run(["find", top, "-type", "f", "-name", "*.raw"],
                                 timeout=self.short_timeout, cwd=self.remote_dir)
        for line in res.stdout.splitlines():
            rel = line.strip()
            if rel.startswith("./"):
                rel = rel[2:]
            target = local_result_path(rel, top)
            if target is None:
                continue
            dest = local.joinpath(*target)
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.transport.get(posixpath.join(self.remote_dir, rel), dest)
        return local

    # -- cleanup -------------------------------------------------------------------
    def cleanup(self) -> Finding | None:
        if not self._created:
            return None
        try:
            self.transport.remove_tree(self.remote_dir)
        except (TransportError, OSError) as exc:
            return Finding("board.cleanup", f"board {self.board.name}: could not remove "
                           f"{self.remote_dir}: {exc}", Severity.WARNING, self.board.name)
        self._created = False
        return None

    def __enter__(self) -> BoardRun:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.cleanup()
        except Exception:   # never hide the original error behind a cleanup one
            log.warning("board %s: cleanup of %s failed", self.board.name, self.remote_dir,
                        exc_info=True)


def run_on_board(transport: Transport, board: BoardConfig, *, library: Path | None,
                 input_list: Path, input_names: list[str],
                 backends: tuple[str, ...] = ("cpu", "htp"), native: bool = False,
                 workdir: Path, timeout: float | None = None,
                 max_samples: int | None = None, library_sdk_version: str | None = None,
                 expected_outputs: list[ExpectedOutput] | None = None,
                 debug: bool = False, latency: LatencyRequest | None = None,
                 context: Path | None = None,
                 htp_config: Callable[[Path, str], Path] | None = None) -> NetRunResult:
    """Push, run every backend, pull, check the result files, clean up. With
    ``debug`` every backend runs with ``--debug`` (per-layer outputs; pass
    ``expected_outputs`` so only the graph outputs are checked). With ``latency``,
    once the HTP backend ran clean, its latency is measured
    (``qnn_ci.boards.latency_run``; problems there are warnings). With ``context``
    the runs load that context binary (``--retrieve_context``) instead of
    ``library``; with ``htp_config`` (see ``BoardRun.push_htp_config``) the HTP runs
    pass ``--config_file``.

    Raises UserError for a bad local input list; a board problem (unreachable,
    load failure, timeout, bad output) is a Finding in the result."""
    header, samples = select_samples(input_list, input_names, max_samples)
    run = BoardRun(transport, board, workdir=workdir, timeout=timeout)
    result = NetRunResult(board.name, run.remote_dir, len(samples),
                          library_sdk_version=library_sdk_version)
    try:
        run.prepare(library, samples, input_names, header)
        if context is not None:
            run.push_context(context)
        if htp_config is not None:
            run.push_htp_config(htp_config)
        result.board_version = read_board_version(transport, board,
                                                  timeout=run.short_timeout)
        result.findings += version_findings(board, result.board_version, library_sdk_version)
        for backend in backends:
            outcome = run.run_backend(backend, native=native, debug=debug)
            result.backends[backend] = outcome
            if not outcome.ok:
                result.findings.append(Finding(outcome.failure or "board.execution",
                                               outcome.message, subject=backend))
                continue
            assert outcome.output_dir is not None
            result.findings += check_result_files(
                outcome.output_dir, samples=len(samples), backend=backend, board=board.name,
                expected=expected_outputs, native=native)
        htp = result.backends.get("htp")
        if latency is not None and htp is not None and htp.ok:
            result.latency, found = measure_latency(run, latency, native=native)
            result.findings += found
    except TransportError as exc:
        text = str(exc)
        if not text.startswith(f"board {board.name}"):
            text = f"board {board.name} unreachable: {text}"
        result.findings.append(Finding("board.unreachable", text, subject=board.name))
    except ToolError as exc:          # the board refused a file operation (space, rights)
        text = str(exc)
        full = isinstance(exc, DiskFullError) or "no space left on device" in text.lower()
        check = "board.disk_full" if full else "board.transfer"
        result.findings.append(Finding(check, text, subject=board.name))
    finally:
        try:
            cleanup = run.cleanup()
        except Exception as exc:   # the board went away: the run's failure says so
            cleanup = Finding("board.cleanup", f"board {board.name}: could not remove "
                              f"{run.remote_dir}: {exc}", Severity.WARNING, board.name)
        if cleanup is not None:
            result.findings.append(cleanup)
    return result


def local_result_path(rel: str, top: str) -> tuple[str, ...] | None:
    """Where a remote output file (``top/...``, relative to the run folder) goes below
    the local output folder, or None when it is not an output file:
    ``top/Result_N/<path>`` -> ``Result_N/<path>``;
    ``top/<graph>/Result_N/<path>`` -> ``Result_N/<graph>/<path>``."""
    parts = rel.split("/")
    if parts[0] != top or any(p in ("", ".", "..") for p in parts):
        return None
    result = next((i for i, p in enumerate(parts) if i in (1, 2) and _RESULT.match(p)), None)
    if result is None or len(parts) <= result + 1:
        return None
    return (parts[result], *parts[1:result], *parts[result + 1:])


def write_command_log(path: Path, res: CommandResult) -> None:
    path.write_text(
        f"$ {' '.join(res.argv)}\nexit status: {res.exit_code}"
        f"{' (timed out)' if res.timed_out else ''}\n--- stdout\n{res.stdout}\n"
        f"--- stderr\n{res.stderr}\n", encoding="utf-8")

