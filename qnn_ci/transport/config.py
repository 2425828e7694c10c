"""Board declarations (``boards:`` in the manifest or ``qnn-boards.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from qnn_ci.tables import HUB_TOKEN_ENV

TransportKind = Literal["ssh", "adb", "local", "ai-hub"]
HUB = "ai-hub"


@dataclass(frozen=True)
class BoardConfig:
    """One board as declared: how to reach it (SSH, ADB, or Qualcomm AI Hub's jobs)
    and what it has."""

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
    # ai-hub (qnn_ci.hub): a device of Qualcomm AI Hub; the token is read from the
    # environment variable ``token_env`` names, never from a file qnn-ci reads
    device: str | None = None                # an AI Hub device name
    chipset: str | None = None               # or a chipset attribute (the first such device)
    token_env: str = HUB_TOKEN_ENV
    project: str | None = None
    options: str = ""                        # extra compile options, e.g. --compute_unit npu
    quantize: str = "qnn-ci"                 # qnn-ci: compile the simulator's QDQ model;
    #                                          ai-hub: AI Hub quantizes from the bit widths
    api_url: str | None = None               # None: the client's default (AI Hub itself)
    job_timeout_s: float = 3600.0            # per job, submission to its end
    max_parallel: int = 4                    # exports on AI Hub at once from this machine
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
