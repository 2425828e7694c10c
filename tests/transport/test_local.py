"""LocalTransport: the runner is the board."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from fixtures.sshd import pids_with_env
from qnn_ci.errors import ToolError
from qnn_ci.transport.base import DiskFullError
from qnn_ci.transport.config import BoardConfig
from qnn_ci.transport.local import LocalTransport


@pytest.fixture
def local(tmp_path: Path) -> LocalTransport:
    return LocalTransport(BoardConfig(name="here", transport="local",
                                      work_root=str(tmp_path / "work"), env={"B": "board"}))


def test_run_exit_codes_env_cwd(local: LocalTransport, tmp_path: Path) -> None:
    r = local.run(["sh", "-c", 'echo "$A|$B|$(pwd)"; echo e >&2; exit 4'], timeout=30,
                  env={"A": "$(touch pwned) x"}, cwd=str(tmp_path))
    assert (r.exit_code, r.stdout, r.stderr) == (4, f"$(touch pwned) x|board|{tmp_path}\n", "e\n")
    assert not (tmp_path / "pwned").exists()
    assert local.run(["no-such-tool-qnn-ci"], timeout=5).exit_code == 127
    assert local.run(["sh", "-c", "kill -9 $$"], timeout=5).exit_code == -1


def test_timeout_kills_the_group(local: LocalTransport) -> None:
    tag = uuid.uuid4().hex
    r = local.run(["sh", "-c", "sleep 300 & sleep 301 & echo started; wait"], timeout=1,
                  env={"QNN_CI_LOCAL_TAG": tag})
    assert r.timed_out and r.exit_code == -1 and r.stdout == "started\n"
    deadline = time.monotonic() + 10
    while pids_with_env("QNN_CI_LOCAL_TAG", tag):
        assert time.monotonic() < deadline, "sleeps survived the timeout"
        time.sleep(0.05)


def test_files(local: LocalTransport, tmp_path: Path) -> None:
    root = local.board.work_root
    local.mkdir(f"{root}/a b/c")
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(1000))
    local.put(src, f"{root}/a b/c/x.bin")
    local.get(f"{root}/a b/c/x.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    assert local.listdir(f"{root}/a b") == ["c"]
    with pytest.raises(ValueError, match="refusing"):
        local.remove_tree(root)
    local.remove_tree(f"{root}/a b")
    assert local.listdir(root) == []
    with pytest.raises(ToolError, match="get"):
        local.get(f"{root}/missing", tmp_path / "m")
    with pytest.raises(ToolError, match="put"):
        local.put(src, "/dev/full")


def test_full_disk_is_named(local: LocalTransport, full_disk: Path, tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(300_000))
    with pytest.raises(DiskFullError) as info:
        local.put(src, f"{full_disk}/f.bin")
    assert str(info.value) == (f"no space left on device on board here ({full_disk}: "
                               "0 bytes free, 300000 needed to copy f.bin)")
