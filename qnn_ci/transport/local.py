"""Local transport: the runner is the board (a dev kit running its own CI, or tests).

Commands run without a shell in a new session, so a timeout kills the whole
process group, and so does an exception (Ctrl-C, a SIGTERM turned into an
exception) arriving while we wait; files are plain copies. Remote paths are local
paths.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from qnn_ci.errors import ToolError
from qnn_ci.transport.base import CommandResult, DiskFullError
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.procgroup import kill_group
from qnn_ci.transport.remote_shell import merged_env, removable_path

log = logging.getLogger(__name__)
_GRACE_S = 1.0                  # TERM, then KILL after this long


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Close our ends of the pipes and wait for the killed leader."""
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()


class LocalTransport:
    def __init__(self, board: BoardConfig) -> None:
        self.board = board
        self.name = board.name

    def run(self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        argv = list(argv)
        if not argv:
            raise ValueError("empty command")
        full_env = dict(os.environ)
        full_env.update(merged_env(self.board.env, env))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            missing = cwd if cwd and not Path(cwd).is_dir() else argv[0]
            return CommandResult(argv=argv, exit_code=127 if isinstance(
                exc, FileNotFoundError) else 126, stdout="",
                stderr=f"{missing}: {exc.strerror}\n", duration_s=time.monotonic() - started)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc, _GRACE_S)
            try:
                out, err = proc.communicate(timeout=5.0)
            except subprocess.TimeoutExpired:     # a setsid'd grandchild holds the pipes
                log.warning("board %s: %s left a process outside its group", self.name,
                            argv[0])
                proc.kill()
                for pipe in (proc.stdout, proc.stderr):
                    if pipe is not None:
                        pipe.close()
                proc.wait()
                out, err = b"", b""
        except BaseException as exc:   # Ctrl-C, SIGTERM-as-exception, SystemExit: no orphans
            log.warning("board %s: %s interrupted (%s): killing its process group %d",
                        self.name, argv[0], type(exc).__name__, proc.pid)
            try:
                kill_group(proc, _GRACE_S)
            finally:
                _reap(proc)
            raise
        code = proc.returncode
        return CommandResult(
            argv=argv, exit_code=-1 if timed_out or code < 0 else code,
            stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
            timed_out=timed_out, duration_s=time.monotonic() - started)

    def free_bytes(self, folder: str) -> int | None:
        """Bytes free on the filesystem holding ``folder``, or None when unknown."""
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            return None

    def _copy(self, src: Path, dst: Path, what: str) -> None:
        try:
            shutil.copyfile(src, dst)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                self._raise_if_full(src, dst)
            raise ToolError(f"board {self.name}: {what} failed: {exc}") from None

    def _raise_if_full(self, src: Path, dst: Path) -> None:
        """DiskFullError when the free space plus the partial copy cannot hold ``src``
        (as the remote transports judge it; /dev/full says ENOSPC on a roomy disk)."""
        try:
            free = shutil.disk_usage(dst.parent).free
            written = dst.stat().st_size if dst.is_file() else 0
            size = src.stat().st_size
        except OSError:
            return
        if free + written < size:
            raise DiskFullError(f"no space left on device on board {self.name} ({dst.parent}: "
                                f"{free} bytes free, {size} needed to copy {src.name})")

    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not local.is_file():
            raise FileNotFoundError(f"no such local file: {local}")
        self._copy(local, Path(remote), f"put {local} -> {remote}")

    def get(self, remote: str, local: Path) -> None:
        self._copy(Path(remote), Path(local), f"get {remote}")

    def mkdir(self, remote: str) -> None:
        try:
            Path(remote).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ToolError(f"board {self.name}: mkdir -p {remote} failed: {exc}") from None

    def remove_tree(self, remote: str) -> None:
        path = removable_path(remote, self.board.work_root)
        if os.path.lexists(path):
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError as exc:
                raise ToolError(f"board {self.name}: rm -rf {path} failed: {exc}") from None

    def listdir(self, remote: str) -> list[str]:
        try:
            return sorted(os.listdir(remote))
        except OSError as exc:
            raise ToolError(f"board {self.name}: listdir {remote} failed: {exc}") from None

    def close(self) -> None:
        pass
