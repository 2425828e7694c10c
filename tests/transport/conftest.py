"""Fixtures for transport tests: a throwaway sshd per test, an ADB device stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.sshd import SshServer, sshd_missing_reason


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    """A running OpenSSH server on 127.0.0.1 with per-test keys; killed at teardown."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer(tmp_path / "sshd")
    server.start()
    try:
        yield server
    finally:
        server.close()
