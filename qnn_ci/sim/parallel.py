"""Simulated inferences spread over processes.

The HTP simulator runs one inference on one core for tens of seconds on a
detector, so ``sim_numerics`` spreads the samples over processes: as many as the
cores this process may use (``os.sched_getaffinity``), divided by the number of
pytest-xdist workers sharing them (``PYTEST_XDIST_WORKER_COUNT``), never more than
the samples; ``QNN_CI_SIM_PROCESSES`` overrides the count. Worker processes are
started first (``spawn``: onnxruntime's threads do not survive ``fork``), each
loading the prepared context into its own session, while this process simulates
from the first sample on; every sample goes to whoever is free first, so samples
that take milliseconds are all done here before a worker is ready (the workers
are then stopped). Outputs come back in sample order, the same numbers one session
gives; workers are killed if the caller is interrupted. With a core per process,
each keeps to its own (``_one_core_each``): this process only while it simulates.

The samples reach the workers through a file in the work folder, not the start-up
pipe: ``spawn`` writes a process's arguments into a pipe whose reading end the parent
holds open until the write ends, so a worker that dies while starting (a script
without a ``__main__`` guard, a killed process) would leave a large write -- and the
run -- blocked for ever. A worker that dies while starting is logged; this process
then simulates the samples itself. A worker killed by a signal once it has taken
samples (SIGKILL: the kernel's OOM killer, exit -9 / 137) ends the run with one
line, ``WorkerKilled``: which worker, which signal, the sample it was running and
the memory available when the workers started (``qnn_ci.util.memory``).
QNN_CI_SIM_KILL_WORKER=N (tests) makes the first worker kill itself with SIGKILL
as it starts simulating its N-th sample.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.sim.ep import capture_native_output
from qnn_ci.sim.samples import Feeds, SampleList
from qnn_ci.sim.sessions import Outputs
from qnn_ci.tables import SocInfo
from qnn_ci.util.cores import share_of_cores

log = logging.getLogger(__name__)


ENV_PROCESSES = "QNN_CI_SIM_PROCESSES"
ENV_KILL = "QNN_CI_SIM_KILL_WORKER"        # tests: the first worker kills itself
STARTED = "started"                        # a worker's notice: (index, STARTED, pid)


class WorkerKilled(UserError):
    """A simulator worker process was killed by a signal (one line: which, where)."""


def sim_processes(samples: int, environ: dict[str, str] | None = None) -> int:
    """How many simulator processes for ``samples`` samples (see the module text)."""
    env = os.environ if environ is None else environ
    asked = env.get(ENV_PROCESSES, "").strip()
    if asked.isdigit() and int(asked) > 0:
        return max(1, min(samples, int(asked)))
    return max(1, min(samples, share_of_cores(env)))


# -- in a worker process ---------------------------------------------------------------
def _worker(payload_file: str, todo: Any, ctx_model: str, soc_name: str,
           log_dir: str, results: Any, core: int | None = None) -> None:
    """Load a session, then simulate the sample indices taken from ``todo`` until a
    None; put ``(index, outputs, seconds)`` per sample on ``results``, or
    ``(index, None, error text)``. ``core``: the one core this process keeps to."""
    if core is not None:
        _keep_to({core})
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.sessions import htp_session

    log_path = Path(log_dir) / f"sim_run.{os.getpid()}.log"
    index = -1
    try:
        with open(payload_file, "rb") as fh:   # written by this run's SimPool
            payloads: dict[int, Any] = pickle.load(fh)
        session = htp_session(Path(ctx_model), sim_target(soc_name), log_path)
        names = [o.name for o in session.get_outputs()]
        kill_at = _kill_at(core)
        taken = 0
        while (index := todo.get()) is not None:
            results.put((index, STARTED, os.getpid()))
            taken += 1
            if taken == kill_at:
                _kill_self(results)
            payload = payloads[index]
            feeds = payload[0] if isinstance(payload, SampleList) else payload
            start = time.monotonic()
            with capture_native_output(log_path):
                values = session.run(names, feeds)
            results.put((index, dict(zip(names, values, strict=True)),
                         time.monotonic() - start))
    except Exception as exc:   # sent to the caller, which raises it there
        results.put((index, None, f"{type(exc).__name__}: {exc}"))


def _kill_at(core: int | None) -> int | None:
    """The sample (1-based, of those this worker takes) at which ``QNN_CI_SIM_KILL_WORKER``
    asks the first worker to kill itself; None: never."""
    asked = os.environ.get(ENV_KILL, "").strip()
    first = multiprocessing.current_process().name.endswith("-0")
    return int(asked) if asked.isdigit() and int(asked) > 0 and first else None


def _kill_self(results: Any) -> None:
    import signal

    results.close()
    results.join_thread()            # the STARTED notice is out before the kill
    os.kill(os.getpid(), signal.SIGKILL)


def _keep_to(cores: set[int]) -> set[int] | None:
    """Keep the calling thread (and the threads it starts from now on) to ``cores``;
    the cores it had, or None when that cannot be done."""
    try:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError, ValueError):
        return None
    return before


@contextmanager
def _on_core(core: int | None) -> Iterator[None]:
    """The calling thread kept to ``core`` while the block runs (None: as it is); then
    its own cores back, and theirs to the threads started meanwhile that outlive
    the block (onnxruntime and the QNN libraries keep some for the process's life)."""
    before = _keep_to({core}) if core is not None else None
    if before is None:
        yield
        return
    existing = _thread_ids()
    try:
        yield
    finally:
        _keep_to(before)
        for tid in _thread_ids() - existing:
            with suppress(OSError):
                os.sched_setaffinity(tid, before)


def _thread_ids() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except (OSError, ValueError):
        return set()


def _one_core_each(processes: int) -> list[int] | None:
    """A core per simulator process (this one first), when there are enough.

    The simulator starts a thread per simulated HVX context, and idle ones spin on
    ``sched_yield``: with two simulator processes floating over two cores each one's
    spinning threads take time from the other's inference. Kept to a core each,
    they take it only from their own."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return cores[:processes] if len(cores) >= processes else None


def _payload(samples: Sequence[Feeds], i: int) -> Any:
    return samples[i:i + 1] if isinstance(samples, SampleList) else samples[i]


def _merge_logs(log_path: Path) -> None:
    for part in sorted(log_path.parent.glob("sim_run.*.log")):
        with log_path.open("ab") as out:
            out.write(f"\n=== qnn-ci: simulator process {part.stem.split('.')[-1]} ===\n"
                      .encode())
            out.write(part.read_bytes())
        part.unlink()


def killed_message(name: str, pid: int | None, code: int, sample: int | None, total: int,
                   available: int | None) -> str:
    """The one line for a worker killed by signal ``-code``."""
    import signal

    from qnn_ci.util.memory import human

    try:
        sig = signal.Signals(-code).name
    except ValueError:
        sig = f"signal {-code}"
    why = f"{sig}: out of memory?" if -code == signal.SIGKILL else sig
    where = (f"while running sample {sample + 1} of {total}" if sample is not None
             else "before it ran a sample")
    memory = (f"; {human(available)} were available when the workers started"
              if available is not None else "")
    return (f"the HTP simulator's worker process {name} (pid {pid}) was killed ({why}) "
            f"{where}{memory}; give the run more memory or fewer simulator processes "
            f"({ENV_PROCESSES}=1)")


def _gather(procs: list[Any], results: Any, want: set[int], found: dict[int, Outputs],
            total: int, available: int | None = None) -> float:
    """Wait for the workers' samples ``want``; their seconds, summed. A worker killed
    by a signal: ``WorkerKilled``; one that exited otherwise: RuntimeError."""
    import queue

    seconds = 0.0
    running: dict[int, int] = {}           # worker pid -> the sample it took last
    while not want <= set(found):
        try:
            index, outs, s = results.get(timeout=1.0)
        except queue.Empty:
            for p in procs:
                if p.exitcode is not None and p.exitcode < 0:
                    sample = running.get(p.pid)
                    raise WorkerKilled(killed_message(
                        p.name, p.pid, p.exitcode,
                        sample if sample is not None and sample not in found else None,
                        total, available)) from None
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a simulator process exited with code {dead[0]} "
                                   "before its samples were done") from None
            continue
        if isinstance(outs, str) and outs == STARTED:
            running[int(s)] = index
            continue
        if outs is None:
            raise RuntimeError(f"simulating sample {index + 1} failed: {s}")
        found[index] = outs
        seconds += s
        log.info("simulated sample %d (%d/%d done) in %.1f s, in a worker process", index + 1,
                 len(found), total, s)
    return seconds


def _run_here(session: Any, samples: Sequence[Feeds], index: int, log_path: Path,
              found: dict[int, Outputs], total: int) -> float:
    from qnn_ci.sim.sessions import run_all

    (outs,), s = run_all(session, [samples[index]], log_path=log_path)
    found[index] = outs
    log.info("simulated sample %d (%d/%d done) in %.1f s", index + 1, len(found), total, s)
    return s


def simulate_samples(ctx_model: Path, soc: SocInfo, samples: Sequence[Feeds], log_path: Path,
                     processes: int, *, share_here: bool = True
                     ) -> tuple[list[Outputs], float]:
    """The simulated outputs of ``samples`` in order, and the mean seconds per inference.

    With ``processes`` > 1 (and more than one sample), ``processes - 1`` workers are
    started first, each loading its own session, and every sample goes to whoever is
    free first: this process (its own session, from the first sample on) or a
    worker that is ready. Samples that take milliseconds are all done here before a
    worker is ready; the workers are then stopped. ``share_here`` False leaves the
    samples to the workers alone (for tests)."""
    with SimPool(ctx_model, soc, samples, log_path, processes, share_here=share_here) as pool:
        return pool.run()


class SimPool:
    """``simulate_samples`` in two steps: the workers start (and load their sessions)
    when the pool is made, so the caller can do other work -- the fp32 and QDQ runs
    on CPU -- while they get ready and take samples; ``run`` then joins in and
    returns the outputs. Leaving the ``with`` block stops the workers."""

    def __init__(self, ctx_model: Path, soc: SocInfo, samples: Sequence[Feeds],
                 log_path: Path, processes: int, *, share_here: bool = True) -> None:
        self.ctx_model, self.soc, self.samples, self.log_path = ctx_model, soc, samples, log_path
        self.share_here = share_here
        total = len(samples)
        self.n = min(processes, total) if share_here else min(processes, total + 1)
        self.procs: list[Any] = []
        self.payload_file: Path | None = None
        self.started = time.monotonic()
        self.cores: list[int] | None = None
        self.results: Any = None
        self.todo: Any = None
        self.available: int | None = None
        if self.n <= 1:
            return
        from qnn_ci.util.memory import available_bytes

        self.available = available_bytes()
        log.info("simulating %d samples in up to %d processes", total, self.n)
        mp = multiprocessing.get_context("spawn")
        self.results, self.todo = mp.Queue(), mp.Queue()
        for i in range(total):                # taken by whoever is free: this process too
            self.todo.put(i)
        for _ in range(self.n if share_here else self.n - 1):
            self.todo.put(None)               # one stop per taker: each worker, and this one
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self.payload_file = log_path.parent / f".sim_samples.{os.getpid()}.pickle"
            with self.payload_file.open("wb") as fh:
                pickle.dump({i: _payload(samples, i) for i in range(total)}, fh,
                            protocol=pickle.HIGHEST_PROTOCOL)
            self.cores = _one_core_each(self.n) if share_here else None
            if self.cores:
                log.info("one core per simulator process: %s (this one first)",
                         ", ".join(map(str, self.cores)))
            for k in range(self.n - 1):
                proc = mp.Process(target=_worker, name=f"qnn-ci-sim-{k}", daemon=True, args=(
                    str(self.payload_file), self.todo, str(ctx_model), soc.name,
                    str(log_path.parent), self.results,
                    self.cores[k + 1] if self.cores else None))
                proc.start()
                self.procs.append(proc)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> SimPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self) -> tuple[list[Outputs], float]:
        from qnn_ci.sim.sessions import htp_session

        samples, log_path = self.samples, self.log_path
        total = len(samples)
        found: dict[int, Outputs] = {}
        if self.n <= 1:
            if not total:
                return [], 0.0
            session = htp_session(self.ctx_model, self.soc, log_path)
            seconds = sum(_run_here(session, samples, i, log_path, found, total)
                          for i in range(total))
            return [found[i] for i in range(total)], seconds / total
        seconds = 0.0
        here = 0
        if self.share_here:
            # this thread, and the simulator threads its session starts, on one core
            with _on_core(self.cores[0] if self.cores else None):
                session = htp_session(self.ctx_model, self.soc, log_path)
                while (i := self.todo.get(timeout=60)) is not None:
                    seconds += _run_here(session, samples, i, log_path, found, total)
                    here += 1
                del session
        seconds += _gather(self.procs, self.results, set(range(total)), found, total,
                           self.available)
        for proc in self.procs:
            if proc.exitcode not in (None, 0):
                log.warning("simulator process %s exited with code %s; the samples were "
                            "simulated without it", proc.name, proc.exitcode)
        log.info("simulated %d samples in %.1f s, %d of them in worker processes", total,
                 time.monotonic() - self.started, total - here)
        return [found[i] for i in range(total)], seconds / total

    def close(self) -> None:
        """Every sample is in (or this failed): a worker still starting is stopped."""
        if self.results is None:
            return
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
            proc.join()
        self.results.close()
        self.todo.close()
        self.results = None
        if self.payload_file is not None:
            self.payload_file.unlink(missing_ok=True)
        _merge_logs(self.log_path)
