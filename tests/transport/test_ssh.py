"""SshTransport against a real OpenSSH server on loopback."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.sshd import SshServer, free_port
from qnn_ci.errors import ToolError
from qnn_ci.transport.base import DiskFullError, TransportError
from qnn_ci.transport.ssh import SshTransport

HOSTILE = "a b'c\"d $(touch pwned);e `touch pwned` & x"


def _wait_until(cond, what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _in_thread(fn, limit: float = 60.0):
    """Run fn in a thread; return (result, exception). Guards against hangs only."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s (hung)"
    return out.get("result"), out.get("error")


@pytest.fixture
def ssh(sshd: SshServer):
    t = SshTransport(sshd.board())
    yield t
    t.close()


def test_run_exit_codes_streams_env_cwd(ssh: SshTransport, sshd: SshServer) -> None:
    r = ssh.run(["sh", "-c", "echo out; echo err >&2; exit 7"], timeout=30)
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (7, "out\n", "err\n", False)
    assert r.argv == ["sh", "-c", "echo out; echo err >&2; exit 7"]

    work = Path(sshd.board().work_root)
    work.mkdir()
    r = ssh.run(["sh", "-c", 'pwd; printf "%s|%s" "$FROM_CALL" "$FROM_BOARD"'], timeout=30,
                env={"FROM_CALL": "call value"}, cwd=str(work))
    assert r.exit_code == 0
    assert r.stdout == f"{work}\ncall value|"
    board_env = SshTransport(sshd.board(env={"FROM_BOARD": "b", "FROM_CALL": "overridden"}))
    r = board_env.run(["sh", "-c", 'printf "%s|%s" "$FROM_CALL" "$FROM_BOARD"'], timeout=30,
                      env={"FROM_CALL": "c"})
    board_env.close()
    assert r.stdout == "c|b"

    r = ssh.run(["no-such-tool-qnn-ci"], timeout=30)
    assert r.exit_code == 127
    r = ssh.run(["sh", "-c", "kill -9 $$"], timeout=30)
    assert r.exit_code == -1 and not r.timed_out


def test_bad_env_name_is_refused(ssh: SshTransport) -> None:
    with pytest.raises(ValueError, match="not a valid shell name"):
        ssh.run(["true"], timeout=10, env={"A;touch x": "1"})


def test_put_get_listdir_byte_identical(ssh: SshTransport, sshd: SshServer,
                                        tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    remote_dir = f"{sshd.board().work_root}/x/y"
    ssh.mkdir(remote_dir)
    ssh.put(src, f"{remote_dir}/blob.bin")
    assert Path(remote_dir, "blob.bin").read_bytes() == data
    back = tmp_path / "back.bin"
    ssh.get(f"{remote_dir}/blob.bin", back)
    assert back.read_bytes() == data
    ssh.mkdir(f"{remote_dir}/sub")
    assert ssh.listdir(remote_dir) == ["blob.bin", "sub"]
    ssh.remove_tree(f"{sshd.board().work_root}/x")
    assert not Path(sshd.board().work_root, "x").exists()


def test_timeout_kills_the_whole_remote_group(ssh: SshTransport, sshd: SshServer) -> None:
    script = "sleep 300 & sleep 301 & (sleep 302; echo late) & echo started; wait"
    r = ssh.run(["sh", "-c", script], timeout=1.5)
    assert r.timed_out and r.exit_code == -1
    assert r.stdout == "started\n"
    _wait_until(lambda: not sshd.remote_pids(), "the remote sleeps to die")
    # the connection is still usable afterwards
    assert ssh.run(["true"], timeout=30).exit_code == 0


def test_connection_lost_mid_command(ssh: SshTransport, sshd: SshServer) -> None:
    def crash_when_running() -> None:
        _wait_until(lambda: bool(sshd.remote_pids()), "the remote command to start")
        sshd.stop()

    crasher = threading.Thread(target=crash_when_running, daemon=True)
    crasher.start()
    result, error = _in_thread(lambda: ssh.run(["sleep", "60"], timeout=60))
    crasher.join(30)
    assert error is None
    assert result.exit_code == -1 and not result.timed_out
    assert "connection to board testboard lost" in result.stderr


def test_server_gone_mid_put_then_back(sshd: SshServer, tmp_path: Path) -> None:
    board = sshd.board(retries=2, retry_delay_s=0.1)
    ssh = SshTransport(board)
    big = tmp_path / "big.bin"
    with big.open("wb") as f:                           # sparse: cheap to make, slow to send
        f.truncate(1024 * 1024 * 1024)
    work = Path(board.work_root)
    work.mkdir()
    target = work / "big.bin"

    def stop_when_started() -> None:
        _wait_until(lambda: target.exists() and target.stat().st_size > 1 << 20,
                    "the upload to start", 30)
        sshd.stop()

    stopper = threading.Thread(target=stop_when_started, daemon=True)
    stopper.start()
    connections_before = sshd.connection_count()
    _, error = _in_thread(lambda: ssh.put(big, str(target)))
    stopper.join(30)
    assert isinstance(error, TransportError)
    assert str(error).startswith("board testboard unreachable: connection dropped by the "
                                 "server ("), str(error)
    assert "Server connection dropped" not in str(error) and "()" not in str(error)
    assert "3 attempts" in str(error)
    assert sshd.connection_count() == connections_before + 1   # retries found no server

    sshd.start()                                        # the board is back (same host key)
    small = tmp_path / "small.bin"
    small.write_bytes(b"back again")
    ssh.put(small, str(work / "small.bin"))
    assert (work / "small.bin").read_bytes() == b"back again"
    ssh.close()


def test_unreachable_board_fails_with_clear_message(tmp_path: Path, sshd: SshServer) -> None:
    closed = sshd.board(name="ghost", port=free_port(), retries=1, retry_delay_s=0.1)
    t = SshTransport(closed)
    _, error = _in_thread(lambda: t.run(["true"], timeout=5), limit=30)
    assert isinstance(error, TransportError)
    assert str(error).startswith("board ghost unreachable: connection refused")

    sshd.pause()                                        # TCP connects, no banner ever comes
    try:
        hung = SshTransport(sshd.board(name="hung", connect_timeout_s=1.0, retries=1,
                                       retry_delay_s=0.1))
        _, error = _in_thread(lambda: hung.run(["true"], timeout=5), limit=30)
    finally:
        sshd.resume()
    assert isinstance(error, TransportError)
    assert str(error) == (f"board hung unreachable: no SSH banner from 127.0.0.1:{sshd.port} "
                          "within 1 s — is this an SSH server? (during run true, 2 attempts)")


def test_unknown_host_key_is_rejected(sshd: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    t = SshTransport(sshd.board(known_hosts=empty, retries=3))
    before = sshd.connection_count()
    with pytest.raises(TransportError) as info:
        t.run(["true"], timeout=10)
    msg = str(info.value)
    assert "is not in" in msg and "ssh-keyscan -p" in msg and "SHA256:" in msg
    assert sshd.connection_count() == before + 1         # not retried
    # the suggested fix works as written
    command = re.search(r"`(ssh-keyscan [^`]*)`", msg).group(1)  # type: ignore[union-attr]
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=30)
    assert t.run(["true"], timeout=10).exit_code == 0
    t.close()
    missing = SshTransport(sshd.board(known_hosts=tmp_path / "nope"))
    with pytest.raises(TransportError, match="is not in"):
        missing.run(["true"], timeout=10)


def test_accept_new_saves_then_reject_accepts(sshd: SshServer, tmp_path: Path) -> None:
    kh = tmp_path / "sub" / "known_hosts"
    t = SshTransport(sshd.board(known_hosts=kh, host_key_policy="accept-new"))
    assert t.run(["true"], timeout=10).exit_code == 0
    t.close()
    assert f"[127.0.0.1]:{sshd.port}" in kh.read_text()
    strict = SshTransport(sshd.board(known_hosts=kh))
    assert strict.run(["true"], timeout=10).exit_code == 0
    strict.close()
    # ignore: any key, nothing saved (unsafe, for throwaway lab boards only)
    sshd.rotate_host_key()
    empty = tmp_path / "never_written"
    lax = SshTransport(sshd.board(known_hosts=empty, host_key_policy="ignore"))
    assert lax.run(["true"], timeout=10).exit_code == 0
    lax.close()
    assert not empty.exists()


def test_changed_host_key_is_rejected(sshd: SshServer) -> None:
    sshd.rotate_host_key()
    for policy in ("reject", "accept-new"):
        t = SshTransport(sshd.board(host_key_policy=policy))
        with pytest.raises(TransportError) as info:
            t.run(["true"], timeout=10)
        assert "CHANGED" in str(info.value) and "man-in-the-middle" in str(info.value)
        assert "ssh-keygen -R" in str(info.value)
    # the suggested fix works: drop the old key, add the new one
    command = re.search(r"`(ssh-keygen -R [^`]*)`", str(info.value)).group(1)  # type: ignore[union-attr]
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=30)
    t = SshTransport(sshd.board(host_key_policy="accept-new"))
    assert t.run(["true"], timeout=10).exit_code == 0
    t.close()


def test_wrong_client_key_is_not_retried(sshd: SshServer, tmp_path: Path) -> None:
    from fixtures.sshd import keygen

    other = tmp_path / "other_key"
    keygen(other)
    t = SshTransport(sshd.board(key_file=other, retries=3))
    before = sshd.connection_count()
    with pytest.raises(TransportError, match="authentication failed"):
        t.run(["true"], timeout=10)
    assert sshd.connection_count() == before + 1


def test_hostile_names_reach_the_board_literally(ssh: SshTransport, sshd: SshServer,
                                                 tmp_path: Path) -> None:
    home = Path.home()
    assert not (home / "pwned").exists()
    root = sshd.board().work_root
    hostile_dir = f"{root}/{HOSTILE}"
    ssh.mkdir(hostile_dir)
    src = tmp_path / "in.txt"
    src.write_text("payload")
    remote_file = f"{hostile_dir}/{HOSTILE};.txt"
    ssh.put(src, remote_file)
    assert Path(remote_file).read_text() == "payload"
    assert ssh.listdir(hostile_dir) == [f"{HOSTILE};.txt"]
    r = ssh.run(["cat", f"{HOSTILE};.txt"], timeout=30, cwd=hostile_dir,
                env={"V": HOSTILE})
    assert (r.exit_code, r.stdout) == (0, "payload")
    r = ssh.run(["sh", "-c", 'printf %s "$V"', HOSTILE], timeout=30, env={"V": HOSTILE})
    assert r.stdout == HOSTILE
    r = ssh.run(["printf", "%s|", HOSTILE, "$(id)", ";", "*"], timeout=30, cwd=hostile_dir)
    assert r.stdout == f"{HOSTILE}|$(id)|;|*|"
    back = tmp_path / "back.txt"
    ssh.get(remote_file, back)
    assert back.read_text() == "payload"
    ssh.remove_tree(hostile_dir)
    assert os.listdir(root) == []
    pwned = [p for p in (tmp_path, home, Path(root)) if (p / "pwned").exists()]
    assert pwned == []


def test_remove_tree_refuses_paths_outside_work_root(ssh: SshTransport,
                                                     sshd: SshServer) -> None:
    root = sshd.board().work_root
    for bad in ("", "/", "relative/x", "/tmp", root, f"{root}/..", f"{root}/../other",
                f"{root}/a/../../x"):
        with pytest.raises(ValueError, match="refusing to remove"):
            ssh.remove_tree(bad)


def test_board_side_failures_are_tool_errors(ssh: SshTransport, sshd: SshServer,
                                             tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 200_000)
    # a full disk: every write to /dev/full fails with ENOSPC
    with pytest.raises(ToolError, match="put"):
        ssh.put(src, "/dev/full")
    # a FILE where a folder should be (what a filled-up or broken work_root looks like)
    root = Path(sshd.board().work_root)
    root.mkdir()
    (root / "blocker").write_text("")
    with pytest.raises(ToolError, match="mkdir -p"):
        ssh.mkdir(f"{root}/blocker/sub")
    with pytest.raises(ToolError, match="put"):
        ssh.put(src, f"{root}/blocker/f.bin")
    missing = tmp_path / "missing.bin"
    with pytest.raises(ToolError, match="get"):
        ssh.get(f"{root}/nope.bin", missing)
    assert not missing.exists()
    with pytest.raises(ToolError, match="listdir"):
        ssh.listdir(f"{root}/nope")
    assert ssh.run(["true"], timeout=30).exit_code == 0      # the connection survived


@pytest.mark.parametrize("direction", ["put", "get"])
def test_board_frozen_mid_copy_fails_within_the_timeout(sshd: SshServer, tmp_path: Path,
                                                        direction: str) -> None:
    """sshd SIGSTOPped mid-transfer: TCP stays up, no data moves. The copy must end
    as an unreachable board after timeout_s (+ the reconnect attempts), not hang."""
    board = sshd.board(timeout_s=2.0, connect_timeout_s=1.0, retries=1, retry_delay_s=0.1)
    ssh = SshTransport(board)
    work = Path(board.work_root)
    work.mkdir()
    big = (tmp_path if direction == "put" else work) / "big.bin"
    with big.open("wb") as f:                           # sparse: cheap to make, slow to send
        f.truncate(512 * 1024 * 1024)
    if direction == "put":
        growing = work / "copy.bin"
        copy = lambda: ssh.put(big, str(growing))       # noqa: E731
    else:
        growing = tmp_path / f".copy.bin.part-{os.getpid()}"
        copy = lambda: ssh.get(str(big), tmp_path / "copy.bin")  # noqa: E731
    frozen_at: list[float] = []

    def freeze_when_started() -> None:
        _wait_until(lambda: growing.exists() and growing.stat().st_size > 1 << 20,
                    "the copy to start", 30)
        sshd.pause()
        frozen_at.append(time.monotonic())

    freezer = threading.Thread(target=freeze_when_started, daemon=True)
    freezer.start()
    try:
        _, error = _in_thread(copy, limit=60)
        ended = time.monotonic()
    finally:
        freezer.join(30)
        sshd.resume()
    assert frozen_at, "the copy never started"
    assert isinstance(error, TransportError), error
    message = str(error)
    assert message.startswith("board testboard unreachable: no data moved for 2 s during "
                              f"{direction} "), message
    assert "(board hung?)" in message and "2 attempts" in message
    # the stall timeout, one reconnect (delay + connect timeout), and slack for a busy box
    bound = board.timeout_s + board.retry_delay_s + board.connect_timeout_s + 5.0
    assert ended - frozen_at[0] < bound
    assert not (tmp_path / "copy.bin").exists()          # no half file left behind locally
    assert ssh.run(["true"], timeout=10).exit_code == 0  # the board is back: so is the transport
    ssh.close()


def test_full_disk_is_named_on_upload(ssh: SshTransport, full_disk: Path,
                                      tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(300_000))
    with pytest.raises(DiskFullError) as info:
        ssh.put(src, f"{full_disk}/f.bin")
    assert str(info.value) == (f"no space left on device on board testboard ({full_disk}: "
                               "0 bytes free, 300000 needed to put f.bin)")
    assert isinstance(info.value, ToolError)
    (full_disk / "f.bin").unlink()                     # room again: the same copy works
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 50_000)
    ssh.put(small, f"{full_disk}/small.bin")
    assert (full_disk / "small.bin").stat().st_size == 50_000


@contextmanager
def fake_server(mode: str) -> Iterator[int]:
    """A TCP server on 127.0.0.1 that is no SSH server: ``silent`` accepts and never
    speaks, ``close`` hangs up at once, ``reset`` resets the connection."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if mode == "silent":
                held.append(conn)
            else:
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        for conn in held:
            conn.close()


_CONNECT = """\
import sys
from pathlib import Path
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.base import TransportError
from qnn_ci.transport.ssh import SshTransport
board = BoardConfig(name="odd", transport="ssh", host="127.0.0.1", port=int(sys.argv[1]),
                    key_file=Path(sys.argv[2]), connect_timeout_s=1.0, retries=2,
                    retry_delay_s=0.1)
try:
    SshTransport(board).run(["true"], timeout=5)
except TransportError as exc:
    print(exc)
"""


_DROPPED = r"connection dropped by the server \([^()]+\)"


@pytest.mark.parametrize(("mode", "reason"), [
    ("silent", re.escape("no SSH banner from 127.0.0.1:{port} within 1 s — is this an SSH "
                         "server?")),
    # a close while our banner is unread may reach us as a reset: either is named
    ("close", re.escape("connection dropped by the server (before its SSH banner: ")
     + r"(it closed the connection|Connection reset by peer)\)"
     + f"(; then {_DROPPED})?"),
    # a reset races the banner read: each attempt names its cause, whichever it was
    ("reset", f"{_DROPPED}(; then {_DROPPED})?"),
], ids=["silent", "close", "reset"])
def test_not_an_ssh_server_is_one_line_and_no_traceback(sshd: SshServer, mode: str,
                                                        reason: str) -> None:
    """A plain process, as the CLI or a library user runs it (no logging set up):
    paramiko's handshake tracebacks must not reach stderr; the failure is one line."""
    with fake_server(mode) as port:
        run = subprocess.run([sys.executable, "-c", _CONNECT, str(port),
                              str(sshd.client_key)], capture_output=True, text=True,
                             timeout=120, cwd=Path(__file__).parents[2])
    assert run.stderr == "", run.stderr                 # no "Traceback", no paramiko lines
    why = reason.replace(r"\{port\}", str(port))
    assert re.fullmatch(rf"board odd unreachable: {why} \(during run true, 3 attempts\)\n",
                        run.stdout), run.stdout
    if mode == "reset":
        assert "Connection reset by peer" in run.stdout or "closed the connection" in run.stdout


def test_paramiko_tracebacks_go_to_debug(sshd: SshServer,
                                         caplog: pytest.LogCaptureFixture) -> None:
    board = sshd.board(name="odd", connect_timeout_s=1.0, retries=0)
    with fake_server("silent") as port, caplog.at_level("DEBUG"):
        t = SshTransport(replace(board, port=port))
        with pytest.raises(TransportError, match="no SSH banner"):
            t.run(["true"], timeout=5)
        # paramiko's transport thread logs its traceback on its own schedule.
        _wait_until(lambda: any("Traceback" in r.getMessage() for r in caplog.records
                                if r.name.startswith("paramiko")),
                    "paramiko to log the banner traceback", 10)
    paramiko_records = [r for r in caplog.records if r.name.startswith("paramiko")]
    assert any("Traceback" in r.getMessage() for r in paramiko_records)   # kept, for -vv
    assert {r.levelname for r in paramiko_records} == {"DEBUG"}
