"""SSH transport (fabric over paramiko) with checked host keys and bounded reconnects.

- No ``~/.ssh/config``, no agent, no key search: only the board's ``key_file``.
- Host keys are checked against the board's ``known_hosts`` (default
  ``~/.ssh/known_hosts``) with paramiko's reject semantics; ``accept-new`` adds and
  saves unknown keys (a changed key is still refused); ``ignore`` accepts anything
  (unsafe: only for throwaway lab boards).
- A dropped connection, a refused connect or a silent server is retried
  ``board.retries`` times with a fresh connection, then ``TransportError("board
  <name> unreachable: ...")``. A bad host key or a failed login is never retried.
- A file copy (SFTP) that moves no data for ``board.timeout_s`` seconds (a board
  hung mid-transfer) counts as a dropped connection: a watchdog closes the
  connection, so the copy can never block forever.
- Failures the board reports while the connection is fine (no such file, no space)
  are ``ToolError``.
- Commands run on a plain paramiko channel read here against our own deadline; the
  remote process group (see ``remote_shell``) is killed on a timeout, on a dropped
  connection, and when ANY exception (Ctrl-C, a SIGTERM turned into an exception,
  SystemExit) interrupts the wait, before that exception goes on.
- paramiko's own log records (its tracebacks on a failed handshake) are lowered to
  DEBUG: they never reach stderr at the default level. The failure itself is one
  line: ``no SSH banner from host:port within N s — is this an SSH server?``,
  ``connection dropped by the server (<cause>)``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import paramiko
from fabric import Config, Connection
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    SSHException,
)

from qnn_ci.errors import ToolError, UserError
from qnn_ci.transport.base import CommandResult, TransportError
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.remote_shell import (
    ShellFileOps,
    kill_group_command,
    merged_env,
    split_pgid,
    wrap_command,
)
from qnn_ci.transport.ssh_channel import collect, drain, start_command, wait_readable
from qnn_ci.transport.ssh_faults import (
    NoBanner,
    Stalled,
    Watchdog,
    dropped,
    hard_close,
    quiet_paramiko,
    reason,
    root_cause,
    says_dropped,
)

log = logging.getLogger(__name__)
quiet_paramiko()
T = TypeVar("T")
# paramiko's key type name -> ssh-keyscan -t name
_KEYSCAN_TYPES = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ecdsa-sha2-nistp256": "ecdsa",
                  "ecdsa-sha2-nistp384": "ecdsa", "ecdsa-sha2-nistp521": "ecdsa"}
_KILL_TIMEOUT_S = 15.0          # the remote group kill (TERM, ~1 s, KILL)
_PGID_WAIT_S = 2.0              # interrupted before the group id came: wait this long for it


class _UnknownHostKey(SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"host key for {hostname} not found in known_hosts")
        self.hostname = hostname
        self.key = key


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise _UnknownHostKey(hostname, key)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class SshTransport(ShellFileOps):
    def __init__(self, board: BoardConfig) -> None:
        if not board.host:
            raise ValueError(f"board {board.name}: ssh transport needs a host")
        self.board = board
        self.name = board.name
        self._conn: Connection | None = None

    # --- connection --------------------------------------------------------
    @property
    def known_hosts_path(self) -> Path:
        return Path(self.board.known_hosts or Path.home() / ".ssh" / "known_hosts").expanduser()

    @property
    def _hostport(self) -> str:
        b = self.board
        return b.host if b.port == 22 else f"[{b.host}]:{b.port}"  # type: ignore[return-value]

    def _new_connection(self) -> Connection:
        b = self.board
        config = Config(overrides={
            "load_ssh_configs": False,
            "run": {"in_stream": False, "hide": True, "warn": True, "encoding": "utf-8"},
        })
        t = b.connect_timeout_s
        kwargs: dict[str, object] = {
            "look_for_keys": False, "allow_agent": False,
            "timeout": t, "banner_timeout": t, "auth_timeout": t, "channel_timeout": t,
        }
        if b.key_file:
            key = Path(b.key_file).expanduser()
            if not key.is_file():
                raise UserError(f"board {b.name}: key file {key} does not exist",
                                key=f"boards.{b.name}.key_file")
            kwargs["key_filename"] = str(key)
        conn = Connection(b.host, user=b.user, port=b.port, config=config,  # type: ignore[arg-type]
                          connect_kwargs=kwargs)
        client = conn.client
        path = self.known_hosts_path
        if b.host_key_policy == "ignore":
            log.warning("board %s: host key checking is OFF (host_key_policy: ignore)", b.name)
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        elif b.host_key_policy == "accept-new":
            if not path.exists():
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.touch(mode=0o600)
            client.load_host_keys(str(path))        # remembers the file: new keys are saved
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        else:
            if path.is_file():
                client.load_host_keys(str(path))
            client.set_missing_host_key_policy(_RejectUnknown())
        return conn

    def _connection(self) -> Connection:
        if self._conn is not None and self._conn.is_connected:
            return self._conn
        self._drop()
        conn = self._new_connection()
        try:
            conn.open()
        except SSHException as exc:
            # paramiko may report a failed handshake as "No existing session";
            # the transport thread kept the real cause (e.g. no banner).
            transport = conn.client.get_transport()
            cause = getattr(transport, "saved_exception", None)
            conn.close()
            failure = self._handshake_failure(exc, cause)
            if failure is exc:
                raise
            raise failure from exc
        except EOFError as exc:
            conn.close()
            raise dropped("during the SSH handshake: ", exc) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _handshake_failure(self, exc: SSHException, cause: BaseException | None
                           ) -> BaseException:
        """What a failed ``open()`` means, as an exception with a one-line text."""
        if isinstance(exc, _UnknownHostKey | BadHostKeyException | AuthenticationException):
            return exc
        real: BaseException = exc
        if str(exc) == "No existing session" and isinstance(cause, Exception):
            real = cause
        if isinstance(real, _UnknownHostKey | BadHostKeyException | AuthenticationException):
            return real
        text = str(real)
        b = self.board
        if text.startswith("Error reading SSH protocol banner") or (
                text == "No existing session" and real is exc):
            under = root_cause(real)
            if under is None or isinstance(under, TimeoutError):
                return NoBanner(f"no SSH banner from {b.host}:{b.port} within "
                                 f"{b.connect_timeout_s:g} s — is this an SSH server?")
            return dropped("before its SSH banner: ", under)
        if isinstance(real, EOFError | ConnectionError):
            return dropped("during the SSH handshake: ", real)
        return real

    def _alive(self) -> bool:
        return self._conn is not None and self._conn.is_connected

    def _drop(self, *, hard: bool = False) -> None:
        if self._conn is not None:
            try:
                if hard:
                    hard_close(self._conn)
                self._conn.close()
            except Exception:  # a dead socket may fail to close; nothing to keep
                pass
            self._conn = None

    def _fatal_message(self, exc: SSHException) -> str:
        b = self.board
        kh = self.known_hosts_path
        if isinstance(exc, _UnknownHostKey):
            ktype = exc.key.get_name()
            scan_type = _KEYSCAN_TYPES.get(ktype, ktype)
            return (f"board {b.name}: the host key of {exc.hostname} ({ktype} "
                    f"{fingerprint(exc.key)}) is not in {kh}; after checking the fingerprint "
                    f"on the board, add it with `ssh-keyscan -p {b.port} -t {scan_type} {b.host} "
                    f">> {kh}` (or set known_hosts: to a file that has it, or "
                    "host_key_policy: accept-new to trust it on first connect)")
        if isinstance(exc, BadHostKeyException):
            return (f"board {b.name}: the host key of {self._hostport} CHANGED: got "
                    f"{exc.key.get_name()} {fingerprint(exc.key)}, {kh} has "
                    f"{fingerprint(exc.expected_key)} — possible man-in-the-middle attack, "
                    "refusing to connect; if the board was reinstalled, remove the old key "
                    f"with `ssh-keygen -R '{self._hostport}' -f {kh}` and add the new one")
        return (f"board {b.name}: authentication failed for user {b.user or '(local user)'} "
                f"with key_file {b.key_file or '(none set)'}: {exc}; check that the key's "
                "public half is in the board's authorized_keys")

    def _with_retries(self, what: str, op: Callable[[Connection], T]) -> T:
        b = self.board
        first: BaseException | None = None
        last: BaseException | None = None
        for attempt in range(b.retries + 1):
            if attempt:
                log.info("board %s: %s failed (%s); reconnect %d/%d", b.name, what,
                         reason(last) if last else "?", attempt, b.retries)
                time.sleep(b.retry_delay_s)
            first = first or last
            try:
                return op(self._connection())
            except (_UnknownHostKey, BadHostKeyException, AuthenticationException) as exc:
                self._drop()
                raise TransportError(self._fatal_message(exc)) from None
            except TimeoutError as exc:         # a stalled copy or a silent socket
                last = exc
                self._drop(hard=True)
                continue
            except OSError as exc:
                if self._alive() and not isinstance(exc, NoValidConnectionsError):
                    raise ToolError(f"board {b.name}: {what} failed: {exc}") from None
                last = exc
            except (SSHException, EOFError) as exc:
                last = exc
            self._drop()
        assert last is not None
        why = reason(last)
        if first is not None and reason(first) != why:
            why = f"{reason(first)}; then {why}"
        raise TransportError(f"board {b.name} unreachable: {why} "
                             f"(during {what}, {b.retries + 1} attempts)") from last

    # --- commands ----------------------------------------------------------
    def run(self, argv: list[str], *, timeout: float, env: dict[str, str] | None = None,
            cwd: str | None = None) -> CommandResult:
        argv = list(argv)
        command = wrap_command(argv, env=merged_env(self.board.env, env), cwd=cwd)
        started = time.monotonic()
        out, err = bytearray(), bytearray()
        opened: list[paramiko.Channel] = []
        running = False
        try:
            # Only starting the command is retried: once it runs, a drop is a result.
            chan = self._with_retries(f"run {argv[0]}", lambda conn: start_command(
                conn, command, self.board.connect_timeout_s, opened.append))
            running = True
            status, timed_out = collect(chan, out, err, started + timeout)
        except BaseException as exc:        # Ctrl-C, SIGTERM-as-exception, SystemExit, ...
            # interrupted while the command ran, or while it was being started (it may
            # already run on the board): kill its remote process group
            if opened and (running or not isinstance(exc, Exception)):
                self._abandon(opened[-1], out, argv, exc)
            raise
        finally:
            for each in opened:
                each.close()
        pgid, stdout = split_pgid(out.decode("utf-8", "replace"))
        stderr = err.decode("utf-8", "replace")
        exit_code = -1 if timed_out else status
        dropped = exit_code == -1 and not timed_out and not self._alive()
        if timed_out or dropped:
            if dropped:
                stderr += f"\n[qnn-ci] connection to board {self.name} lost during the command\n"
            if pgid is not None:
                self._kill_group(pgid)
        return CommandResult(argv=argv, exit_code=exit_code, stdout=stdout, stderr=stderr,
                             timed_out=timed_out, duration_s=time.monotonic() - started)

    def _abandon(self, chan: paramiko.Channel, out: bytearray, argv: list[str],
                 exc: BaseException) -> None:
        """The local wait was interrupted: kill the command's remote process group
        (waiting briefly for its id if it has not come yet), best effort."""
        pgid = split_pgid(out.decode("utf-8", "replace"))[0]
        if pgid is None and self._alive():
            deadline = time.monotonic() + _PGID_WAIT_S
            while pgid is None and time.monotonic() < deadline and not chan.closed:
                drain(chan, out, bytearray())
                pgid = split_pgid(out.decode("utf-8", "replace"))[0]
                if pgid is None:
                    wait_readable(chan, 0.05)
        self._kill_interrupted(pgid, argv, exc)

    def _kill_group(self, pgid: int) -> None:
        """Kill the remote process group over a fresh channel (best effort)."""
        try:
            chan = start_command(self._connection(), kill_group_command(pgid),
                          self.board.connect_timeout_s)
            try:
                collect(chan, bytearray(), bytearray(), time.monotonic() + _KILL_TIMEOUT_S)
            finally:
                chan.close()
        except Exception as exc:
            log.warning("board %s: could not kill remote process group %d: %s",
                        self.name, pgid, reason(exc))
            self._drop()

    # --- files -------------------------------------------------------------
    @property
    def stall_timeout(self) -> float:
        """Seconds a file copy may move no data before the connection counts as dropped."""
        return self.board.timeout_s

    def _sftp_op(self, what: str, fn: Callable[[paramiko.SFTPClient, Callable[..., None]], T]
                 ) -> T:
        """``fn(sftp, progress)`` under a watchdog: when ``progress`` is not called for
        ``stall_timeout`` s the connection is closed under it, and the copy fails as a
        dropped connection (retried, then TransportError) instead of blocking forever."""
        stall = self.stall_timeout

        def op(conn: Connection) -> T:
            with Watchdog(stall, lambda: hard_close(conn)) as dog:
                try:
                    sftp = conn.sftp()
                    channel = sftp.get_channel()
                    if channel is not None:
                        channel.settimeout(stall)
                    return fn(sftp, dog.progress)
                except (OSError, EOFError, SSHException) as exc:
                    if dog.fired or isinstance(exc, TimeoutError):
                        raise Stalled(f"no data moved for {stall:g} s during {what} "
                                       "(board hung?)") from exc
                    transport = conn.client.get_transport()
                    if says_dropped(exc) or (transport is not None
                                              and not transport.is_active()):
                        # paramiko says only that; the transport thread kept the cause
                        cause = getattr(transport, "saved_exception", None) or root_cause(exc)
                        raise dropped("", cause) from exc
                    raise

        return self._with_retries(what, op)

    def put(self, local: Path, remote: str) -> None:
        local = Path(local)
        if not local.is_file():
            raise FileNotFoundError(f"no such local file: {local}")
        what = f"put {local} -> {remote}"
        try:
            self._sftp_op(what, lambda sftp, progress: sftp.put(str(local), remote,
                                                                callback=progress))
        except ToolError as exc:
            raise self.explain_failed_put(exc, local, remote) from None

    def get(self, remote: str, local: Path) -> None:
        local = Path(local)
        part = local.with_name(f".{local.name}.part-{os.getpid()}")
        try:
            self._sftp_op(f"get {remote}", lambda sftp, progress: sftp.get(
                remote, str(part), callback=progress))
            os.replace(part, local)
        finally:
            part.unlink(missing_ok=True)

    def listdir(self, remote: str) -> list[str]:
        return sorted(self._sftp_op(f"listdir {remote}",
                                    lambda sftp, _progress: sftp.listdir(remote)))

    def close(self) -> None:
        self._drop()
