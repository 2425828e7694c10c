"""Run one QAIRT SDK tool the way the SDK needs it, and keep its log.

The SDK's ``envsetup.sh`` must be SOURCED in bash (never sh), with
``LD_LIBRARY_PATH`` unset. Tools that cross-compile need the target's eSDK
environment sourced FIRST: sourcing it after ``envsetup.sh`` resets ``PATH``
and the SDK's tools disappear. Sourcing an eSDK script may change the working
directory, so the script ``cd``s back to an absolute work folder afterwards and
every argument is expected to be absolute.

The tool runs in its own process group; a timeout kills the whole group, and so
does any exception that arrives while waiting for it (Ctrl-C, a SIGTERM turned
into an exception, SystemExit): TERM, a 2 s grace, KILL, reaped before the
exception goes on; the log then says "interrupted". The
command and the combined stdout/stderr go to ``<workdir>/<log_name>.log``
(command first) and the log is kept whatever happens.

A run that timed out or was killed by a signal (``ToolRun.transient``) may not
fail the same way twice (a loaded runner, the OOM killer): stages mark such
failures so the engine never reuses them from its cache.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from qnn_ci.errors import ToolError
from qnn_ci.sdk.locate import Sdk
from qnn_ci.transport.procgroup import kill_group
from qnn_ci.util.workfolder import open_new

log = logging.getLogger(__name__)

_KILL_GRACE_S = 2.0
OUTPUT_MARKER = "----- output -----"
_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


class ToolRunError(ToolError):
    """A tool run that failed in a way we can describe; carries the run."""

    def __init__(self, message: str, run: ToolRun) -> None:
        super().__init__(message)
        self.run = run


@dataclass
class ToolRun:
    """One SDK tool process: its command line, exit status, output and log file."""

    argv: list[str]
    exit_code: int | None          # None only if the process could not be reaped
    output: str                    # combined stdout + stderr
    log_path: Path
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def killed_by(self) -> int | None:
        """The signal that ended the tool: a negative status (the shell itself was
        killed) or bash's ``128 + N`` for a tool killed by signal N; else None."""
        code = self.exit_code
        if code is None:
            return None
        number = -code if code < 0 else code - 128 if code > 128 else 0
        return number if number in _SIGNALS else None

    @property
    def transient(self) -> bool:
        """A failure that may not repeat: a timeout or a death by signal."""
        return self.timed_out or self.exit_code is None or self.killed_by is not None

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def tail_lines(self, n: int = 20) -> list[str]:
        """The last ``n`` non-blank output lines."""
        lines = [line.rstrip() for line in self.output.splitlines()]
        return [line for line in lines if line.strip()][-n:]

    def tail(self, n: int = 20) -> str:
        """The last ``n`` non-blank output lines as one text, for failure messages."""
        return "\n".join(self.tail_lines(n))

    def describe(self, n: int = 20) -> str:
        """``command: ...`` / ``last lines:`` / the tail, then the status and log path."""
        status = (f"timed out after {self.duration_s:.0f} s" if self.timed_out
                  else f"exit status {self.exit_code}")
        if not self.timed_out and self.killed_by is not None:
            status += f", killed by {signal.Signals(self.killed_by).name}"
        last = self.tail(n) or "(no output)"
        return (f"command: {self.command}\nlast lines:\n{last}\n"
                f"({status}; full log: {self.log_path})")


def build_script(argv: list[str], *, sdk: Sdk, workdir: Path, need_esdk: bool) -> str:
    """The bash script that sets up the SDK environment and runs ``argv``."""
    lines = ["unset LD_LIBRARY_PATH"]
    if need_esdk:
        if sdk.esdk_env is None:
            raise ValueError("need_esdk=True but the Sdk has no esdk_env")
        lines.append(f"source {shlex.quote(str(sdk.esdk_env))}")
    lines.append(f"source {shlex.quote(str(sdk.envsetup))}")
    lines.append(f"cd {shlex.quote(str(workdir))} || exit 97")
    lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


def _tool_environ(sdk: Sdk, environ: Mapping[str, str] | None) -> dict[str, str]:
    if environ is None:
        environ = sdk.environ if sdk.environ is not None else os.environ
    env = dict(environ)
    env.pop("LD_LIBRARY_PATH", None)
    env["QNN_SDK_ROOT"] = str(sdk.root)
    if sdk.esdk_env is not None:
        env["ESDK_ENV"] = str(sdk.esdk_env)
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    kill_group(proc, _KILL_GRACE_S)


def _interrupted(proc: subprocess.Popen[bytes], fh: BinaryIO, argv: list[str],
                 exc: BaseException, after_s: float) -> None:
    """Kill and reap the tool's whole process group, and say so in its log."""
    what = type(exc).__name__
    log.warning("%s interrupted (%s) after %.1f s: killing its process group %d",
                argv[0] if argv else "tool", what, after_s, proc.pid)
    try:
        _kill_group(proc)
    finally:
        try:
            fh.write(f"\nqnn-ci: interrupted ({what}) after {after_s:.1f} s; killed the "
                     f"tool's process group {proc.pid}\n".encode())
            fh.flush()
        except OSError:
            pass


def run_tool(argv: list[str], *, sdk: Sdk, workdir: Path, log_name: str, timeout: float,
             need_esdk: bool = False, environ: Mapping[str, str] | None = None) -> ToolRun:
    """Run ``argv`` after sourcing the SDK (and the eSDK first when ``need_esdk``).

    ``workdir`` is made absolute and created; the caller's cwd is not touched.
    The environment is ``environ``, else ``sdk.environ``, else this process's,
    always without ``LD_LIBRARY_PATH``.
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{log_name}.log"
    script = build_script(argv, sdk=sdk, workdir=workdir, need_esdk=need_esdk)
    header = (f"command: {shlex.join(argv)}\n"
              f"workdir: {workdir}\n"
              f"shell (bash):\n"
              + "".join(f"  {line}\n" for line in script.splitlines())
              + f"{OUTPUT_MARKER}\n")
    log.info("running %s (log %s)", shlex.join(argv), log_path)
    start = time.monotonic()
    timed_out = False
    with open_new(log_path) as fh:   # a link in its place is replaced, not written through
        fh.write(header.encode())
        fh.flush()
        proc = subprocess.Popen(
            ["bash", "-c", script], cwd=workdir, env=_tool_environ(sdk, environ),
            stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            exit_code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            exit_code = proc.poll()
        except BaseException as exc:    # Ctrl-C, SIGTERM, SystemExit: no orphaned tool
            _interrupted(proc, fh, argv, exc, time.monotonic() - start)
            raise
        duration = time.monotonic() - start
        if timed_out:
            fh.write(f"\nqnn-ci: killed after {timeout:g} s timeout\n".encode())
    text = log_path.read_bytes().decode("utf-8", errors="replace")
    output = text.split(f"{OUTPUT_MARKER}\n", 1)[1] if OUTPUT_MARKER in text else text
    run = ToolRun(argv=list(argv), exit_code=exit_code, output=output, log_path=log_path,
                  duration_s=duration, timed_out=timed_out)
    log.info("%s: %s in %.1f s", argv[0] if argv else "?",
             "timed out" if timed_out else f"exit {exit_code}", duration)
    return run
