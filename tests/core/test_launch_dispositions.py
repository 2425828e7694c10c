"""The signal tests do not depend on how the test run was launched: started with
SIGINT and SIGTERM ignored (``cmd &`` in a script, nohup, some CI runners: the
ignored dispositions pass to every process started), they pass as they do from a
terminal, because each sets the dispositions it relies on (``fixtures.signals``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The tests that send SIGINT / SIGTERM, or kill a process group with TERM then KILL.
SIGNAL_TESTS = [
    "tests/core/test_interrupts.py",
    "tests/sdk_tools/test_toolrun.py::test_interrupt_kills_the_tools_process_group",
    "tests/sdk_tools/test_toolrun.py::test_timeout_kills_the_process_group_and_keeps_the_log",
    "tests/transport/test_interrupt_remote.py::test_local_interrupt_kills_the_group",
]


def _ignore_sigint_and_sigterm() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _launched_ignoring(argv: list[str], tmp_path: Path, timeout: float
                       ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "COV_CORE_"))}   # not a worker of this run
    return subprocess.run(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_ignore_sigint_and_sigterm)


@pytest.mark.slow
def test_signal_tests_pass_when_launched_with_sigint_and_sigterm_ignored(
        tmp_path: Path) -> None:
    probe = _launched_ignoring(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is "
         "signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)"],
        tmp_path, 60)
    assert probe.stdout.split() == ["True", "True"], probe   # the launch is what it says
    run = _launched_ignoring(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "inner"), "-o", "addopts=", *SIGNAL_TESTS],
        tmp_path, 600)
    tail = (run.stdout + run.stderr)[-4000:]
    assert run.returncode == 0, tail
    summary = run.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)
              if not word.startswith("warning")}
    assert counts.get("passed") and set(counts) == {"passed"}, tail   # none skipped
