"""ADB transport over adbutils (the adb server protocol, no output scraping).

- Commands go through ``shell,v2,raw:`` (separate stdout/stderr and the real exit
  code); the packets are read here against our own deadline, so the process-group
  marker is seen before a timeout and the group can be killed over a new stream —
  also when an interrupt (Ctrl-C, a SIGTERM turned into an exception, SystemExit)
  arrives while we wait, before that exception goes on.
  Devices without shell_v2 fall back to v1 (stderr merged into stdout, exit code
  from a trailing marker the wrapper prints itself).
- A death by signal N shows as exit code 128+N, as adbd reports it.
- An offline or vanished device is reconnected (``adb disconnect`` + ``adb
  connect`` for TCP serials) ``board.retries`` times, then ``TransportError``.
- Every socket to the adb server has ``board.timeout_s`` as its timeout, so a
  push or pull that moves no data for that long (a device hung mid-transfer)
  fails; it counts as a dropped connection (reconnect, then ``TransportError``),
  never as a refusal by a healthy device.
- The adb server is ``board.adb_server_port`` (default 5037); when none answers
  there, ``adb -P <port> start-server`` starts one.
"""

from __future__ import annotations

import logging
import re
import shutil
import socket
import stat
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import adbutils
from adbutils import AdbClient, AdbDevice, AdbError, AdbTimeout

from qnn_ci.errors import ToolError
from qnn_ci.transport.base import CommandResult, TransportError
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.remote_shell import (
    SMALL_OP_TIMEOUT,
    ShellFileOps,
    kill_group_command,
    merged_env,
    split_pgid,
    wrap_command,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
_EXIT_MARKER = "__qnn_ci_exit="
_EXIT_RE = re.compile(r"\n?" + re.escape(_EXIT_MARKER) + r"(\d+)\n?\Z")
_TCP_SERIAL = re.compile(r"\A(?!emulator-)[^\s:]+:\d+\Z")
_TRANSIENT = (AdbError, OSError, EOFError, struct.error)


_DROPPED = -2          # internal: the stream ended without an exit status
_DRAIN_S = 1.0         # interrupted: how long to read on for the process-group line


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError | AdbTimeout)


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = " ".join(str(a) for a in exc.args) if exc.args else type(exc).__name__
    return text or type(exc).__name__


class AdbTransport(ShellFileOps):
    def __init__(self, board: BoardConfig) -> None:
        if not board.serial:
            raise ValueError(f"board {board.name}: adb transport needs a serial")
        self.board = board
        self.name = board.name
        self.serial: str = board.serial
        self.server_port = board.adb_server_port or 5037
        self._client = AdbClient(host="127.0.0.1", port=self.server_port,
                                 socket_timeout=board.timeout_s)
        self._server_ok = False
        self._connected_once = False
        self._v2: bool | None = None

    # --- server and device -------------------------------------------------
    @property
    def is_tcp(self) -> bool:
        return bool(_TCP_SERIAL.match(self.serial))

    def _ensure_server(self) -> None:
        if self._server_ok:
            return
        try:
            with socket.create_connection(("127.0.0.1", self.server_port), timeout=1.0):
                pass
        except OSError:
            adb = shutil.which("adb") or adbutils.adb_path()
            log.info("starting an adb server on port %d (%s)", self.server_port, adb)
            try:
                subprocess.run([adb, "-P", str(self.server_port), "start-server"], check=True,
                               capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.SubprocessError) as exc:
                raise TransportError(f"board {self.name} unreachable: no adb server on port "
                                     f"{self.server_port} and starting one failed: {exc}"
                                     ) from None
        self._server_ok = True

    def _connect(self) -> None:
        """``adb connect`` for TCP serials; then wait until the device is online."""
        if self.is_tcp:
            out = self._client.connect(self.serial, timeout=self.board.connect_timeout_s)
            if "connected to" not in out:
                raise AdbError(out.strip() or f"cannot connect to {self.serial}")
        self._client.wait_for(self.serial, state="device",
                              timeout=self.board.connect_timeout_s)
        self._connected_once = True

    def _reconnect(self) -> None:
        if self.is_tcp:
            self._client.disconnect(self.serial)
        self._v2 = None
        self._connect()

    def _device(self) -> AdbDevice:
        self._ensure_server()
        device = self._client.device(self.serial)
        try:
            state = device.get_state()
        except AdbError:
            if self._connected_once or not self.is_tcp:
                raise
            self._connect()
            state = device.get_state()
        if state != "device":
            raise AdbError(f"device {state}")
        return device

    def _online(self) -> bool:
        try:
            return self._client.device(self.serial).get_state() == "device"
        except Exception:
            return False

    def _with_retries(self, what: str, op: Callable[[AdbDevice], T]) -> T:
        b = self.board
        first: str | None = None            # the first failure's reason, for the message
        last: BaseException | None = None
        for attempt in range(b.retries + 1):
            if attempt:
                first = first or _reason(last)
                log.info("board %s: %s failed (%s); reconnect %d/%d", b.name, what,
                         _reason(last), attempt, b.retries)
                time.sleep(b.retry_delay_s)
                try:
                    self._reconnect()
                except _TRANSIENT as exc:
                    last = exc
                    continue
            try:
                device = self._device()
            except _TRANSIENT as exc:
                last = exc
                continue
            try:
                return op(device)
            except _TRANSIENT as exc:
                if _timed_out(exc):             # a hung device: a drop, never "refused"
                    last = TimeoutError(f"no answer for {b.timeout_s:g} s during {what} "
                                        "(device hung?)")
                    continue
                if self._online():
                    raise ToolError(f"board {b.name}: {what} failed: {_reason(exc)}") from None
                last = exc
        why = _reason(last)
        if first is not None and first != why:
            why = f"{first}; then {why}"
        raise TransportError(f"board {b.name} unreachable: {why} "
                             f"(during {what}, {b.retries + 1} attempts)") from last

    def _supports_v2(self, device: AdbDevice) -> bool:
        if self._v2 is None:
            self._v2 = "shell_v2" in device.get_features().split(",")
        return self._v2

    # --- commands ----------------------------------------------------------
    def run(self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        argv = list(argv)
        command = wrap_command(argv, env=merged_env(self.board.env, env), cwd=cwd)
        started = time.monotonic()
        deadline = started + timeout

        sink = bytearray()           # stdout so far: the group id, should we be interrupted

        def op(device: AdbDevice) -> tuple[bytes, bytes, int | None]:
            del sink[:]
            if self._supports_v2(device):
                return self._run_v2(device, command, deadline, sink)
            return self._run_v1(device, command, deadline, sink)

        try:
            out, err, code = self._with_retries(f"run {argv[0]}", op)
        except BaseException as exc:
            if not isinstance(exc, Exception):      # Ctrl-C, SIGTERM-as-exception, SystemExit
                self._abandon(sink, argv, exc)
            raise
        pgid, stdout = split_pgid(out.decode("utf-8", "replace"))
        stderr = err.decode("utf-8", "replace")
        timed_out = code is None
        if code == _DROPPED:
            stderr += f"\n[qnn-ci] connection to board {self.name} lost during the command\n"
            code = -1
        elif not timed_out and not self._v2:
            m = _EXIT_RE.search(stdout)
            code = int(m.group(1)) if m else -1
            stdout = stdout[: m.start()] if m else stdout
        if (timed_out or code == -1) and pgid is not None:
            self._kill_group(pgid)
        return CommandResult(argv=argv, exit_code=-1 if code is None else code, stdout=stdout,
                             stderr=stderr, timed_out=timed_out,
                             duration_s=time.monotonic() - started)

    def _open(self, device: AdbDevice, service: str) -> adbutils.AdbConnection:
        conn = device.open_transport(timeout=self.board.connect_timeout_s)
        try:
            conn.send_command(service)
            conn.check_okay()
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _recv(conn: adbutils.AdbConnection, n: int, deadline: float,
              exact: bool = True) -> bytes | None:
        """n bytes (or, not exact, up to n), b'' at end of stream, None at the deadline."""
        buf = b""
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            conn.conn.settimeout(remaining)
            try:
                chunk = conn.conn.recv(n - len(buf))
            except TimeoutError:
                return None
            except OSError:          # reset mid-command: a drop, never a reason to re-run
                chunk = b""
            if not chunk:
                return buf if not exact else (b"" if not buf else None)
            buf += chunk
            if not exact:
                break
        return buf

    def _abandon(self, sink: bytearray, argv: list[str], exc: BaseException) -> None:
        """The local wait was interrupted: kill the command's remote process group."""
        pgid = split_pgid(sink.decode("utf-8", "replace"))[0]
        self._kill_interrupted(pgid, argv, exc)

    def _run_v2(self, device: AdbDevice, command: str, deadline: float, out: bytearray
                ) -> tuple[bytes, bytes, int | None]:
        conn = self._open(device, "shell,v2,raw:" + command)
        err = bytearray()
        try:
            while True:
                header = self._recv(conn, 5, deadline)
                if header is None and time.monotonic() < deadline:
                    return bytes(out), bytes(err), _DROPPED      # ended mid-packet
                if header is None:
                    return bytes(out), bytes(err), None
                if header == b"":
                    return bytes(out), bytes(err), _DROPPED
                kind, length = struct.unpack("<BI", header)
                data = self._recv(conn, length, deadline) if length else b""
                if data is None or (length and data == b""):
                    code = None if time.monotonic() >= deadline else _DROPPED
                    return bytes(out), bytes(err), code
                if kind == 1:
                    out += data
                elif kind == 2:
                    err += data
                elif kind == 3:
                    return bytes(out), bytes(err), data[0] if data else 255
        except BaseException as exc:
            if not isinstance(exc, Exception):   # interrupted: the group id may be waiting
                self._drain_for_pgid(conn, out, v2=True)
            raise
        finally:
            conn.close()

    def _drain_for_pgid(self, conn: adbutils.AdbConnection, out: bytearray, *,
                        v2: bool) -> None:
        """Interrupted before the command's process-group line was read: read what the
        device has already sent (for at most ``_DRAIN_S``) until that line is in
        ``out``, so the group can still be killed. Never raises."""
        deadline = time.monotonic() + _DRAIN_S
        try:
            while split_pgid(out.decode("utf-8", "replace"))[0] is None:
                if not v2:
                    chunk = self._recv(conn, 1 << 16, deadline, exact=False)
                    if not chunk:
                        return
                    out += chunk
                    continue
                header = self._recv(conn, 5, deadline)
                if not header:
                    return
                kind, length = struct.unpack("<BI", header)
                data = self._recv(conn, length, deadline) if length else b""
                if data is None or kind == 3:
                    return
                if kind == 1:
                    out += data
        except Exception as exc:   # best effort while stopping
            log.debug("board %s: reading the process group after an interrupt: %s",
                      self.name, exc)

    def _run_v1(self, device: AdbDevice, command: str, deadline: float, out: bytearray
                ) -> tuple[bytes, bytes, int | None]:
        line = f"({command}); printf '\\n%s%s\\n' '{_EXIT_MARKER}' \"$?\""
        conn = self._open(device, "shell:" + line)
        try:
            while True:
                chunk = self._recv(conn, 1 << 16, deadline, exact=False)
                if chunk is None:
                    return bytes(out), b"", None
                if chunk == b"":
                    return bytes(out), b"", 0                    # exit code: the marker
                out += chunk
        except BaseException as exc:
            if not isinstance(exc, Exception):   # interrupted: the group id may be waiting
                self._drain_for_pgid(conn, out, v2=False)
            raise
        finally:
            conn.close()

    def _kill_group(self, pgid: int) -> None:
        try:
            device = self._device()
            service = ("shell,v2,raw:" if self._supports_v2(device) else "shell:")
            conn = self._open(device, service + kill_group_command(pgid))
            try:
                deadline = time.monotonic() + SMALL_OP_TIMEOUT
                while self._recv(conn, 1 << 16, deadline, exact=False):
                    pass
            finally:
                conn.close()
        except Exception as exc:
            log.warning("board %s: could not kill remote process group %d: %s",
                        self.name, pgid, _reason(exc))

    # --- files -------------------------------------------------------------
    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not local.is_file():
            raise FileNotFoundError(f"no such local file: {local}")
        mode = stat.S_IMODE(local.stat().st_mode)

        def op(device: AdbDevice) -> None:
            try:
                device.sync.push(local, remote, mode=mode)
            except AdbError as exc:
                if _reason(exc) == "FAIL":
                    raise ToolError(f"board {self.name}: put {local} -> {remote} failed: the "
                                    "device refused the file (missing folder, no space or "
                                    "no permission)") from None
                raise

        try:
            self._with_retries(f"put {local} -> {remote}", op)
        except ToolError as exc:
            raise self.explain_failed_put(exc, local, remote) from None

    def get(self, remote: str, local: Path) -> None:
        local = Path(local)
        part = local.with_name(f".{local.name}.part")

        def op(device: AdbDevice) -> None:
            with part.open("wb") as fh:
                for chunk in device.sync.iter_content(remote):
                    fh.write(chunk)

        try:
            self._with_retries(f"get {remote}", op)
            part.replace(local)
        finally:
            part.unlink(missing_ok=True)

    def listdir(self, remote: str) -> list[str]:
        def op(device: AdbDevice) -> list[str]:
            info = device.sync.stat(remote)
            if not stat.S_ISDIR(info.mode):
                why = "no such folder" if info.mode == 0 else "not a folder"
                raise ToolError(f"board {self.name}: listdir {remote} failed: {why}")
            return sorted(e.path for e in device.sync.list(remote) if e.path not in (".", ".."))

        return self._with_retries(f"listdir {remote}", op)

    def close(self) -> None:
        pass
