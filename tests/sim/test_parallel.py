"""sim_numerics' samples simulated in several processes: the same numbers as one
session, the process count from the cores and the pytest-xdist workers."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.numerics import file_key
from qnn_ci.sim.parallel import sim_processes, simulate_samples
from qnn_ci.util.cores import usable_cores
from tests.sim.conftest import make_conv_feeds, needs_sim


@pytest.fixture(scope="module")
def conv_ctx(graphs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The conv graph prepared once for SM8550's simulator (read only by the tests)."""
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.quantize import QuantSettings

    report = check_htp(graphs["conv"], tmp_path_factory.mktemp("conv_npu"),
                       sim_target("SM8550"), make_conv_feeds(2), QuantSettings())
    return report.prepare.ctx_model


def test_process_count_follows_cores_xdist_workers_and_samples() -> None:
    cores = usable_cores()
    assert sim_processes(100, {}) == cores
    assert sim_processes(1, {}) == 1                                   # never above samples
    assert sim_processes(100, {"PYTEST_XDIST_WORKER_COUNT": str(cores)}) == 1
    assert sim_processes(100, {"PYTEST_XDIST_WORKER_COUNT": str(cores * 4)}) == 1
    assert sim_processes(100, {"PYTEST_XDIST_WORKER_COUNT": "junk"}) == cores
    assert sim_processes(100, {"QNN_CI_SIM_PROCESSES": "3"}) == 3      # asked for
    assert sim_processes(2, {"QNN_CI_SIM_PROCESSES": "3"}) == 2
    assert sim_processes(100, {"QNN_CI_SIM_PROCESSES": "0"}) == cores  # not a count


@needs_sim
def test_parallel_simulation_gives_the_serial_numbers(cls_prepared, cls_held_out, text_lines,
                                                      tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The PP-OCR classifier on two held-out lines: a worker process with its own
    session on the prepared context gives byte-identical outputs to one session
    (``share_here=False``: the worker simulates them all). The serial numbers are
    the session's ``cls_held_out`` (simulate_and_compare, ``processes=1``)."""
    report = cls_prepared
    soc = sim_target("QCS6490")
    held = text_lines(10)[8:]
    ctx_model = report.prepare.ctx_model
    serial = cls_held_out
    assert serial.passed and serial.samples == 2
    log_path = tmp_path / "parallel" / "sim_run.log"
    with caplog.at_level(logging.INFO, logger="qnn_ci.sim.parallel"):
        outs, per_s = simulate_samples(ctx_model, soc, held, log_path, 2, share_here=False)
    assert len(outs) == 2 and per_s > 0
    for i, sample in enumerate(outs):
        assert sample, i
        for name, value in sample.items():
            ref = np.load(serial.sim_dir / f"Result_{i}" / f"{file_key(name)}.npy")
            assert ref.dtype == value.dtype and np.array_equal(ref, value), (i, name)
    messages = [r.getMessage() for r in caplog.records]
    assert "simulating 2 samples in up to 2 processes" in messages
    done = [m for m in messages if m.startswith("simulated sample ")]
    assert len(done) == 2 and all(m.endswith("in a worker process") for m in done)
    assert any(m.endswith("2 of them in worker processes") for m in messages)
    # The worker logged to its own file, appended to sim_run.log afterwards.
    text = log_path.read_text(errors="replace")
    assert text.count("=== qnn-ci: simulator process") == 1
    assert not list(log_path.parent.glob("sim_run.*.log"))


@needs_sim
def test_this_process_and_a_worker_share_the_samples_and_finish(
        conv_ctx: Path, conv_feeds, tmp_path: Path) -> None:
    """Both take samples from one queue (whoever is free first); every sample comes
    back once, in order, with the numbers one session gives, and nobody waits
    forever for a sample the other took (a worker still starting when this process
    has done them all is stopped)."""

    soc = sim_target("SM8550")
    feeds = conv_feeds(12, seed=2)
    ctx_model = conv_ctx
    one, _ = simulate_samples(ctx_model, soc, feeds, tmp_path / "one" / "sim_run.log", 1)
    for attempt in range(3):
        both, _ = simulate_samples(ctx_model, soc, feeds,
                                   tmp_path / f"both{attempt}" / "sim_run.log", 2)
        assert len(both) == 12
        for a, b in zip(one, both, strict=True):
            assert a.keys() == b.keys()
            assert all(np.array_equal(a[k], b[k]) for k in a)


@needs_sim
def test_workers_start_when_the_pool_is_made(conv_ctx: Path, conv_feeds,
                                             tmp_path: Path) -> None:
    """sim_numerics makes the pool before its CPU runs: the worker is already
    starting then, and ``run`` gives the one-session numbers; leaving the block
    stops it."""
    from qnn_ci.sim.parallel import SimPool

    soc = sim_target("SM8550")
    feeds = conv_feeds(6, seed=4)
    ctx_model = conv_ctx
    one, _ = simulate_samples(ctx_model, soc, feeds, tmp_path / "one" / "sim_run.log", 1)
    with SimPool(ctx_model, soc, feeds, tmp_path / "pool" / "sim_run.log", 2,
                 share_here=False) as pool:
        assert len(pool.procs) == 1 and pool.procs[0].is_alive()   # before run()
        outs, _ = pool.run()
    assert not pool.procs[0].is_alive()
    for a, b in zip(one, outs, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


DIES_WHILE_STARTING = '''
import logging, pickle, sys
from pathlib import Path

if __name__ == "__mp_main__":       # a spawned worker dies before reading its arguments
    raise SystemExit(3)

from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.parallel import simulate_samples

ctx, feeds_file, out = sys.argv[1:4]
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
feeds = pickle.loads(Path(feeds_file).read_bytes())
outs, _ = simulate_samples(Path(ctx), sim_target("SM8550"), feeds, Path(out) / "sim_run.log", 2)
Path(out, "outs.pickle").write_bytes(pickle.dumps(outs))
'''


@needs_sim
def test_a_worker_that_dies_while_starting_neither_hangs_nor_loses_samples(
        conv_ctx: Path, conv_feeds, tmp_path: Path) -> None:
    """More samples than a pipe holds (``spawn`` used to write them all into the
    worker's start-up pipe, and waited for ever when the worker died first): the run
    goes on in this process, logs the dead worker, and gives the one-session numbers."""
    import pickle
    import subprocess
    import sys


    soc = sim_target("SM8550")
    feeds = conv_feeds(120, seed=5)       # 120 x 768 float32: ~370 KB of samples
    ctx_model = conv_ctx
    one, _ = simulate_samples(ctx_model, soc, feeds, tmp_path / "one" / "sim_run.log", 1)
    (tmp_path / "feeds.pickle").write_bytes(pickle.dumps(feeds))
    (tmp_path / "script.py").write_text(DIES_WHILE_STARTING)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(tmp_path / "script.py"), str(ctx_model),
                           str(tmp_path / "feeds.pickle"), str(out)], capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "simulator process qnn-ci-sim-0 exited with code 3" in done.stderr
    both = pickle.loads((out / "outs.pickle").read_bytes())
    assert len(both) == 120
    for a, b in zip(one, both, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert not list(out.glob(".sim_samples.*"))     # the samples' file is removed


@needs_sim
@pytest.mark.skipif(usable_cores() < 2, reason="needs two usable cores")
def test_each_simulator_process_keeps_to_its_own_core(conv_ctx: Path, conv_feeds,
                                                      tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker keeps to the second core from its start; this thread keeps to the
    first only while it simulates (its own cores are back afterwards); the numbers are
    one session's."""
    import os
    import time

    from qnn_ci.sim.parallel import SimPool

    soc = sim_target("SM8550")
    feeds = conv_feeds(4, seed=6)
    ctx_model = conv_ctx
    one, _ = simulate_samples(ctx_model, soc, feeds, tmp_path / "one" / "sim_run.log", 1)
    mine = os.sched_getaffinity(0)
    cores = sorted(mine)
    import qnn_ci.sim.parallel as parallel

    simulating_on: list[set[int]] = []
    real_run_here = parallel._run_here

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        simulating_on.append(os.sched_getaffinity(0))
        return real_run_here(*args, **kwargs)

    monkeypatch.setattr(parallel, "_run_here", recording)
    with caplog.at_level(logging.INFO, logger="qnn_ci.sim.parallel"), \
            SimPool(ctx_model, soc, feeds, tmp_path / "pool" / "sim_run.log", 2) as pool:
        worker = pool.procs[0]
        deadline = time.monotonic() + 60
        while os.sched_getaffinity(worker.pid) != {cores[1]} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.sched_getaffinity(worker.pid) == {cores[1]}
        assert os.sched_getaffinity(0) == mine          # not before it simulates
        outs, _ = pool.run()
    assert os.sched_getaffinity(0) == mine              # nor after
    assert simulating_on and all(c == {cores[0]} for c in simulating_on)
    assert f"one core per simulator process: {cores[0]}, {cores[1]} (this one first)" in [
        r.getMessage() for r in caplog.records]
    for a, b in zip(one, outs, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


FIRST_SESSION_PINNED = '''
import os, pickle, sys
from pathlib import Path

from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.parallel import simulate_samples

if __name__ == "__main__":
    ctx, feeds_file, out = sys.argv[1:4]
    mine = os.sched_getaffinity(0)
    feeds = pickle.loads(Path(feeds_file).read_bytes())
    # this process's first simulator session: made while this thread keeps to a core
    simulate_samples(Path(ctx), sim_target("SM8550"), feeds, Path(out) / "sim_run.log", 2)
    tasks = os.listdir("/proc/self/task")
    print(len(tasks), all(os.sched_getaffinity(int(t)) == mine for t in tasks))
'''


@needs_sim
@pytest.mark.skipif(usable_cores() < 2, reason="needs two usable cores")
def test_threads_started_while_simulating_get_the_process_cores_back(
        conv_ctx: Path, conv_feeds, tmp_path: Path) -> None:
    """onnxruntime and the QNN libraries keep some threads for the process's life,
    started with the first session: made while this thread kept to one core, they
    get the process's cores back too."""
    import pickle
    import subprocess
    import sys


    (tmp_path / "feeds.pickle").write_bytes(pickle.dumps(conv_feeds(4, seed=7)))
    (tmp_path / "script.py").write_text(FIRST_SESSION_PINNED)
    done = subprocess.run([sys.executable, str(tmp_path / "script.py"),
                           str(conv_ctx), str(tmp_path / "feeds.pickle"),
                           str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    count, all_back = done.stdout.split()
    assert int(count) > 1 and all_back == "True"
