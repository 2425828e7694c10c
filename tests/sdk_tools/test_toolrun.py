"""Running SDK tools: bash, sourcing order, cwd, LD_LIBRARY_PATH, timeouts, interrupts,
logs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.signals import default_dispositions
from qnn_ci.sdk.toolrun import build_script, run_tool


@pytest.fixture(autouse=True)
def default_handlers() -> Iterator[None]:
    """The tools these tests time out or interrupt start with SIGINT and SIGTERM at
    their defaults, whatever the test run inherited (``fixtures.signals``): the kill
    (TERM, then KILL after a grace period) takes the same path however pytest was
    launched."""
    with default_dispositions():
        yield


def test_esdk_sourced_before_envsetup(sdk_factory, tmp_path: Path) -> None:
    sdk = sdk_factory(esdk=True)
    script = build_script(["qnn-model-lib-generator", "--help"], sdk=sdk, workdir=tmp_path,
                          need_esdk=True)
    assert script.index(str(sdk.esdk_env)) < script.index(str(sdk.envsetup))
    run = run_tool(["qnn-model-lib-generator", "--help"], sdk=sdk, workdir=tmp_path,
                   log_name="help", timeout=60, need_esdk=True)
    assert run.exit_code == 0, run.describe()
    assert "Supported targets" in run.output
    # The stand-in's trap is real: the other order loses the tool.
    wrong = subprocess.run(
        ["bash", "-c", f"unset LD_LIBRARY_PATH; source {sdk.envsetup}; "
                       f"source {sdk.esdk_env}; qnn-model-lib-generator --help"],
        capture_output=True, text=True, cwd=tmp_path)
    assert wrong.returncode == 127 and "command not found" in wrong.stderr


def test_a_link_in_place_of_the_log_is_replaced_not_written_through(sdk_factory,
                                                                     tmp_path: Path) -> None:
    """The SDK probe's log is written in ``<workdir>/.cache/sdk``, a folder qnn-ci does
    not clear: a symbolic link left there (a restored cache archive) is not followed."""
    sdk = sdk_factory()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    work = tmp_path / "cache"
    work.mkdir()
    (work / "probe.log").symlink_to(outside)
    run = run_tool(["echo", "hello"], sdk=sdk, workdir=work, log_name="probe", timeout=60)
    assert run.exit_code == 0, run.describe()
    assert outside.read_text() == "keep me"
    assert not run.log_path.is_symlink() and "hello" in run.log_path.read_text()


def test_cwd_trap_relative_paths_and_callers_cwd(sdk_factory, tmp_path: Path,
                                                 monkeypatch) -> None:
    sdk = sdk_factory(esdk=True)
    caller = tmp_path / "caller"
    caller.mkdir()
    monkeypatch.chdir(caller)
    # Relative workdir; the eSDK cds to its own root when sourced; the tool writes
    # to its cwd ("pwd > here.txt").
    run = run_tool(["bash", "-c", "pwd > here.txt"], sdk=sdk, workdir=Path("rel/work"),
                   log_name="pwd", timeout=60, need_esdk=True)
    assert run.exit_code == 0, run.describe()
    work = caller / "rel" / "work"
    assert (work / "here.txt").read_text().strip() == str(work)
    assert run.log_path == work / "pwd.log"
    assert Path.cwd() == caller
    assert not (Path(sdk.esdk_env).parent / "here.txt").exists()


def test_arguments_quoted_and_ld_library_path_unset(sdk_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    odd = "a b $HOME; `x` 'q'"
    run = run_tool(["bash", "-c", 'printf "%s|" "$1" "${LD_LIBRARY_PATH-unset}" "$0"', "zero",
                    odd], sdk=sdk, workdir=tmp_path, log_name="quote", timeout=60,
                   environ={**os.environ, "LD_LIBRARY_PATH": "/bad/lib"})
    assert run.exit_code == 0
    assert run.output.splitlines()[-1] == f"{odd}|unset|zero|"


def test_timeout_kills_the_process_group_and_keeps_the_log(sdk_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    pidfile = tmp_path / "child.pid"
    run = run_tool(["bash", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; wait"],
                   sdk=sdk, workdir=tmp_path, log_name="slow", timeout=1.0)
    assert run.timed_out and not run.ok
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"background child {child} survived the timeout")
    text = run.log_path.read_text()
    assert text.startswith("command: bash -c ")
    assert "started" in text and "killed after 1 s timeout" in text
    assert "timed out after" in run.describe()


def test_failure_describe_has_command_and_last_lines(sdk_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    run = run_tool(["bash", "-c", "for i in $(seq 1 40); do echo line$i; done; exit 3"],
                   sdk=sdk, workdir=tmp_path, log_name="fail", timeout=60)
    assert run.exit_code == 3
    assert run.tail(3) == "line38\nline39\nline40"
    assert run.tail_lines(2) == ["line39", "line40"]
    text = run.describe()
    assert text.startswith("command: bash -c ") and "exit status 3" in text
    assert "last lines:\n" in text and "line21" in text and "line20\n" not in text


def test_tools_start_from_the_runs_environment(sdk_factory, export_factory,
                                               tmp_path: Path) -> None:
    from qnn_ci.engine.stage import Environment
    from qnn_ci.sdk.locate import find_sdk

    root = sdk_factory().root
    env = Environment(workdir=tmp_path, environ={"PATH": "/usr/bin:/bin", "QNN_CI_TAG": "t1",
                                                 "QNN_SDK_ROOT": str(root),
                                                 "LD_LIBRARY_PATH": "/x"})
    sdk = find_sdk(export_factory(), env)
    run = run_tool(["bash", "-c", 'echo "$QNN_CI_TAG ${LD_LIBRARY_PATH-unset} $QNN_SDK_ROOT"'],
                   sdk=sdk, workdir=tmp_path, log_name="env", timeout=60)
    assert run.output.splitlines()[-1] == f"t1 unset {root}"


class _Terminated(KeyboardInterrupt):
    """What the CLI raises for SIGTERM (a KeyboardInterrupt subclass)."""


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, _Terminated, SystemExit])
def test_interrupt_kills_the_tools_process_group(sdk_factory, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture,
                                                 exc_type: type[BaseException]) -> None:
    """An exception raised in the main thread (as a signal handler does) while the
    tool runs: the tool's whole group (bash and its sleeping grandchildren) is dead
    and reaped before the exception reaches the caller, and the log says so."""
    sdk = sdk_factory()
    leader, kids = tmp_path / "leader.pid", tmp_path / "kids.pid"
    script = (f"echo $$ > {leader}; sleep 300 & sleep 301 & echo $! > {kids}; "
              "echo started; wait")

    def interrupt(_signum: int, _frame: object) -> None:
        if kids.exists() and kids.read_text().strip():
            raise exc_type()
        signal.setitimer(signal.ITIMER_REAL, 0.05)          # not started yet: look again

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    started = time.monotonic()
    try:
        with caplog.at_level("WARNING", logger="qnn_ci.sdk.toolrun"):
            with pytest.raises(exc_type):
                run_tool(["bash", "-c", script], sdk=sdk, workdir=tmp_path,
                         log_name="interrupted", timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 30                   # did not wait for the tool
    pgid = int(leader.read_text())
    grandchild = int(kids.read_text())
    assert _group_members(pgid) == []                        # nothing of the group survives
    assert not Path(f"/proc/{pgid}").exists()                # the leader is reaped, too
    assert not Path(f"/proc/{grandchild}/status").exists() or \
        "zombie" in Path(f"/proc/{grandchild}/status").read_text()
    text = (tmp_path / "interrupted.log").read_text()
    assert "started" in text
    assert f"qnn-ci: interrupted ({exc_type.__name__}) after " in text
    assert f"killed the tool's process group {pgid}" in text
    assert any("interrupted" in r.getMessage() for r in caplog.records)
