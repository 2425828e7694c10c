"""Board declarations (``boards:`` in the manifest or ``qnn-boards.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

TransportKind = Literal["ssh", "adb", "local"]


@dataclass(frozen=True)
class BoardConfig:
    """One board as declared: how to reach it (SSH or ADB) and what it has."""

    name: str
    transport: TransportKind
    soc: str | None = None
    # ssh
    host: str | None = None
    port: int = 22
    user: str | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None          # None: ~/.ssh/known_hosts
    host_key_policy: Literal["reject", "accept-new", "ignore"] = "reject"
    # adb
    serial: str | None = None
    adb_server_port: int | None = None
    # on the board
    qnn_lib_dir: str = "/usr/lib"
    net_run: str = "qnn-net-run"             # the tool's path on the board
    work_root: str = "/tmp/qnn-ci"           # tmpfs: eMMC burst writes can reset a board
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0                 # per remote command
    connect_timeout_s: float = 15.0
    retries: int = 2                         # reconnect attempts on transport errors
    retry_delay_s: float = 2.0               # pause before each reconnect attempt
    lock_max_age_s: float = 6 * 3600.0       # a board lock older than this is stale
    lock_timeout_s: float = 300.0            # how long a board stage waits for the lock
