"""SIGINT / SIGTERM: `qnn-ci run` as a real process stops with 130 / 143 and one
stderr line, its JUnit report is whole, says it was interrupted and lists every
stage that did not run; no JSON rather than half of it; the job summary says so;
and a tool's process tree does not outlive it. Plus the signal guard itself.

Every test here sets the dispositions it relies on (``fixtures.signals``): a test run
started with SIGINT or SIGTERM ignored (``cmd &``, nohup, some CI runners) passes
them on to the processes it starts, and Python installs no SIGINT handler over an
ignored SIGINT. ``test_launch_dispositions.py`` runs this file so launched."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_esdk, make_sdk
from fixtures.signals import default_dispositions, default_signals
from qnn_ci.cli import interrupts
from tests.core.graphs import small_project


@pytest.fixture(autouse=True)
def default_handlers() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM terminates in this process during
    each test, whatever the test run inherited (restored after)."""
    with default_dispositions():
        yield


_started: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    """A process a test started and left running (the test failed) is killed."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def start(args: list[str], env: dict[str, str], cwd: Path, *,
          preexec: Callable[[], None] = default_signals) -> subprocess.Popen[str]:
    """``python -m qnn_ci ARGS``, with SIGINT and SIGTERM at their defaults (``preexec``
    sets others)."""
    proc = subprocess.Popen([sys.executable, "-m", "qnn_ci", *args], env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    _started.append(proc)
    return proc


def wait_for(path: Path, proc: subprocess.Popen[str], limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not path.exists():
        proc.kill()
        pytest.fail(f"never got to {path.name}: {proc.communicate()}")


def report_cases(junit: Path) -> dict[str, ET.Element]:
    return {c.get("name", ""): c for c in ET.parse(junit).getroot().iter("testcase")}


def suite_props(junit: Path) -> dict[str, str | None]:
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    return {p.get("name", ""): p.get("value") for p in suite.findall("properties/property")}


@pytest.mark.parametrize(("sig", "status", "name", "twice"), [
    (signal.SIGTERM, 143, "SIGTERM", False), (signal.SIGINT, 130, "SIGINT", False),
    (signal.SIGTERM, 143, "SIGTERM", True),   # a second signal while cleaning up
])
def test_signal_leaves_a_whole_report_listing_what_did_not_run(
        tmp_path: Path, sig: signal.Signals, status: int, name: str, twice: bool) -> None:
    manifest = small_project(tmp_path, ("a", "b"))
    junit = tmp_path / "out" / "report.xml"
    flag = tmp_path / "sleeping"
    summary = tmp_path / "summary.md"
    env = dict(os.environ, GEN_SLEEP=str(flag), GITHUB_ACTIONS="true",
               GITHUB_STEP_SUMMARY=str(summary))
    env.pop("QNN_SDK_ROOT", None)
    proc = start(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--junit", str(junit),
                  "--stage", "calibration", "--json"], env, tmp_path)
    wait_for(flag, proc)
    proc.send_signal(sig)
    if twice:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert out == ""                      # no JSON rather than part of one
    lines = err.strip().splitlines()
    assert lines[-1] == f"qnn-ci run: interrupted by {name}", err
    assert "Traceback" not in err
    assert f"::error title=qnn-ci::run interrupted by {name}" in err   # stderr: --json
    # The report parses, says why, and nothing of the run is silently missing.
    assert suite_props(junit)["qnn.interrupted"] == f"interrupted by {name}"
    got = report_cases(junit)
    assert list(got) == ["a::static_shapes", "a::calibration", "b::static_shapes",
                         "b::calibration"]
    assert got["a::static_shapes"].find("skipped") is None   # it ran and passed
    running = got["a::calibration"].find("error")
    assert running is not None
    assert running.get("message") == f"stopped while running: interrupted by {name}"
    for case in ("b::static_shapes", "b::calibration"):
        skipped = got[case].find("skipped")
        assert skipped is not None and skipped.get("message") == \
            f"not run: interrupted by {name}"
    assert [p.name for p in junit.parent.iterdir()] == ["report.xml"]   # no temporary file
    text = summary.read_text()
    assert f"**Run interrupted** (interrupted by {name})" in text
    assert f"not run: interrupted by {name}" in text


def _sigint_ignored() -> None:
    """What a shell does for ``qnn-ci run &`` in a script (and nohup's callers)."""
    default_signals()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_started_with_sigint_ignored_it_keeps_ignoring_it(tmp_path: Path) -> None:
    """A command started in the background is meant to outlive the terminal's Ctrl-C:
    qnn-ci leaves an inherited ignored SIGINT alone and still stops on SIGTERM."""
    manifest = small_project(tmp_path, ("a", "b"))
    flag = tmp_path / "sleeping"
    env = dict(os.environ, GEN_SLEEP=str(flag))
    env.pop("QNN_SDK_ROOT", None)
    env.pop("GITHUB_ACTIONS", None)
    proc = start(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--stage",
                  "calibration"], env, tmp_path, preexec=_sigint_ignored)
    wait_for(flag, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None              # ignored: still running
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert [line for line in err.splitlines() if not line.startswith("  ")] == \
        ["qnn-ci run: interrupted by SIGTERM"]


def test_sigterm_without_junit_or_json_is_one_line(tmp_path: Path) -> None:
    manifest = small_project(tmp_path, ("a", "b"))
    flag = tmp_path / "sleeping"
    env = dict(os.environ, GEN_SLEEP=str(flag))
    env.pop("QNN_SDK_ROOT", None)
    env.pop("GITHUB_ACTIONS", None)
    proc = start(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--stage",
                  "calibration"], env, tmp_path)
    wait_for(flag, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert out == ""
    assert [line for line in err.splitlines() if not line.startswith("  ")] == \
        ["qnn-ci run: interrupted by SIGTERM"]


# -- a tool's process tree does not outlive qnn-ci --------------------------------

HOLD = """
if [ -n "${QNNCI_TEST_HOLD:-}" ]; then
    sleep 300 &
    echo $! > "$QNNCI_TEST_HOLD.tmp" && mv "$QNNCI_TEST_HOLD.tmp" "$QNNCI_TEST_HOLD"
    wait
fi
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@contextlib.contextmanager
def reaped(pid_file: Path) -> Iterator[None]:
    """Kill the held child if the test fails and leaves it behind."""
    try:
        yield
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_kills_the_running_tools_process_tree(tmp_path: Path) -> None:
    root = make_sdk(tmp_path / "sdk", "2.31.0")
    with (root / "bin" / "envsetup.sh").open("a") as fh:   # every SDK tool run now holds
        fh.write(HOLD)
    manifest = small_project(tmp_path, ("a", "b"))
    held = tmp_path / "held.pid"
    env = dict(os.environ, QNN_SDK_ROOT=str(root), ESDK_ENV=str(make_esdk(tmp_path / "esdk")),
               QNNCI_TEST_HOLD=str(held))
    env.pop("GITHUB_ACTIONS", None)
    junit = tmp_path / "report.xml"
    with reaped(held):
        proc = start(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--junit",
                      str(junit), "--stage", "convert"], env, tmp_path)
        wait_for(held, proc)
        child = int(held.read_text())
        assert alive(child)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        deadline = time.monotonic() + 15   # generous: the kill may wait out a grace period
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child), "the tool's child process outlived qnn-ci"
    assert suite_props(junit)["qnn.interrupted"] == "interrupted by SIGTERM"
    skipped = [c for c in report_cases(junit).values() if c.find("skipped") is not None
               and "not run: interrupted by SIGTERM" in (c.find("skipped").get("message") or "")]
    assert any(c.get("name", "").startswith("b::") for c in skipped)


# -- the guard itself ----------------------------------------------------------------

def test_sigterm_raises_terminated_once_then_is_held_back(
        capfd: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with interrupts.stop_on_signals():
        with pytest.raises(interrupts.Terminated) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert isinstance(info.value, KeyboardInterrupt)
        assert interrupts.exit_status(info.value) == 143
        assert interrupts.reason(info.value) == "interrupted by SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)   # while cleaning up: noted, not raised
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is before
    assert "SIGTERM: already stopping, finishing the report" in capfd.readouterr().err


def test_sigint_stays_keyboard_interrupt() -> None:
    with interrupts.stop_on_signals(), pytest.raises(KeyboardInterrupt) as info:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    assert type(info.value) is KeyboardInterrupt
    assert interrupts.exit_status(info.value) == 130


def test_deferred_block_finishes_before_the_signal_is_raised() -> None:
    done = []
    with interrupts.stop_on_signals(), pytest.raises(interrupts.Terminated):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            done.append("whole report written")
    assert done == ["whole report written"]


def test_ignored_sigterm_and_other_threads_are_left_alone() -> None:
    old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupts.stop_on_signals():
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, old)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # as under nohup / `cmd &`
    try:
        with interrupts.stop_on_signals():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
    seen: list[object] = []

    def in_thread() -> None:
        with interrupts.stop_on_signals():   # signal.signal would raise off the main thread
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(10)
    assert seen == [signal.getsignal(signal.SIGTERM)]


def test_third_signal_stops_at_once(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import os, signal, sys, time
        from qnn_ci.cli import interrupts
        with interrupts.stop_on_signals():
            try:
                print("ready", flush=True)
                time.sleep(60)
            except KeyboardInterrupt:
                print("cleaning up", flush=True)
                time.sleep(60)    # a clean-up that hangs
        print("not reached", flush=True)
        """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
                            stdin=subprocess.DEVNULL, preexec_fn=default_signals)
    _started.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline() == "cleaning up\n"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None           # the second one is only noted
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err   # the first signal decides the status
    assert "not reached" not in out
    assert "SIGINT again: stopping now" in err


def test_json_output_is_whole_when_not_interrupted(tmp_path: Path) -> None:
    manifest = small_project(tmp_path, ("a", "b"))
    env = dict(os.environ)
    env.pop("QNN_SDK_ROOT", None)
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run([sys.executable, "-m", "qnn_ci", "run", str(manifest), "--workdir",
                           str(tmp_path / "w"), "--stage", "calibration", "--json"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [r["stage"] for r in json.loads(proc.stdout)] == ["static_shapes", "calibration"] * 2
