"""Fixtures for transport tests: a throwaway sshd per test, an ADB device stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.adb_device import AdbDevice, AdbServer, adb_missing_reason
from fixtures.small_disk import small_disk_or_skip
from fixtures.sshd import SshServer, running_sshd


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    """A running OpenSSH server on 127.0.0.1 with per-test keys; killed at teardown."""
    with running_sshd(tmp_path / "sshd") as server:
        yield server


@pytest.fixture(scope="session")
def adb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbServer]:
    """A private adb server for the test session (never port 5037); killed at the end."""
    reason = adb_missing_reason()
    if reason:
        pytest.skip(reason)
    server = AdbServer(tmp_path_factory.mktemp("adb-home"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def adb_device(tmp_path: Path, adb_server: AdbServer) -> Iterator[AdbDevice]:
    """A device stand-in connected to the session's adb server."""
    device = AdbDevice(tmp_path / "device")
    device.start()
    adb_server.connect(device.serial)
    try:
        yield device
    finally:
        adb_server.disconnect(device.serial)
        device.stop()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 100 KiB tmpfs (skipped where mounting is not allowed)."""
    yield from small_disk_or_skip(tmp_path / "small-disk", 100)
