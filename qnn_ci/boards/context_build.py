"""Build a context binary ON the board from a model library.

``qnn-context-binary-generator --model <lib>.so --backend <qnn_lib_dir>/libQnnHtp.so
--binary_file <name> --output_dir <run folder>/ctx [--config_file <wrapper>]`` in a
fresh remote run folder (``qnn_ci.boards.netrun.BoardRun``: unique, on the work
root's tmpfs, always removed), with the board's own QNN libraries; the
``<name>.bin`` comes back to ``<workdir>/<name>.bin``. A failure is classified by
``qnn_ci.sdk.context_failures``.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.boards.netrun import BACKEND_LIBS, BoardRun, write_command_log
from qnn_ci.boards.versions import BoardVersion, read_board_version
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.sdk.context_failures import classify_generator
from qnn_ci.tables import SocInfo
from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

GENERATOR = "qnn-context-binary-generator"


def board_generator(net_run: str) -> str:
    """``qnn-context-binary-generator`` beside the board's qnn-net-run (or on its PATH)."""
    folder = posixpath.dirname(net_run)
    return posixpath.join(folder, GENERATOR) if folder else GENERATOR


@dataclass
class ContextBuild:
    """One generator run on a board: the binary pulled back (None when it failed)."""

    board: str
    binary: Path | None = None
    log: Path | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    board_version: BoardVersion | None = None
    argv: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.binary is not None and not any(
            f.severity == Severity.ERROR for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"board": self.board, "binary": str(self.binary) if self.binary else None,
                "log": str(self.log) if self.log else None, "exit_code": self.exit_code,
                "timed_out": self.timed_out, "duration_s": round(self.duration_s, 3),
                "board_qnn_version": self.board_version.version if self.board_version
                else None, "argv": self.argv,
                "findings": [f.to_dict() for f in self.findings]}


def build_context(transport: Transport, board: BoardConfig, *, library: Path,
                  binary_name: str, workdir: Path, soc: SocInfo | None,
                  fp16_tensors: Sequence[str] = (), vtcm_mb: int | None = None,
                  htp_config: Callable[[Path, str], Path] | None = None,
                  timeout: float | None = None) -> ContextBuild:
    """Push ``library`` (and the HTP config), run the generator, pull ``<name>.bin``.
    Transport errors propagate (the stage turns them into board findings)."""
    out = ContextBuild(board.name)
    with BoardRun(transport, board, workdir=workdir, timeout=timeout) as run:
        remote_lib = run.push_library(library)
        wrapper = run.push_htp_config(htp_config) if htp_config is not None else ""
        out.board_version = read_board_version(transport, board, timeout=run.short_timeout)
        out_dir = posixpath.join(run.remote_dir, "ctx")
        transport.mkdir(out_dir)
        generator = board_generator(board.net_run)
        argv = [generator, "--model", remote_lib,
                "--backend", posixpath.join(board.qnn_lib_dir, BACKEND_LIBS["htp"]),
                "--binary_file", binary_name, "--output_dir", out_dir]
        if wrapper:
            argv += ["--config_file", wrapper]
        out.argv = argv
        log.info("board %s: %s", board.name, " ".join(argv))
        res = transport.run(argv, timeout=run.timeout, env=run.env(), cwd=run.remote_dir)
        out.exit_code, out.timed_out, out.duration_s = res.exit_code, res.timed_out, \
            res.duration_s
        out.log = workdir / "context_binary.log"
        write_command_log(out.log, res)
        failure = classify_generator(res, board=board.name, generator=generator, soc=soc,
                                     fp16_tensors=fp16_tensors, vtcm_mb=vtcm_mb,
                                     timeout=run.timeout)
        if failure is not None:
            out.findings.append(failure)
            return out
        remote_bin = posixpath.join(out_dir, f"{binary_name}.bin")
        local = workdir / f"{binary_name}.bin"
        if local.exists():
            local.unlink()
        found = transport.run(["ls", remote_bin], timeout=run.short_timeout)
        if found.exit_code != 0:
            out.findings.append(Finding(
                "context.no_binary", f"{GENERATOR} on board {board.name} exited 0 but wrote "
                f"no {binary_name}.bin in {out_dir}; see the log (artefact log)",
                subject=board.name))
            return out
        transport.get(remote_bin, local)
        out.binary = local
        cleanup = run.cleanup()
        if cleanup is not None:
            out.findings.append(cleanup)
    return out
