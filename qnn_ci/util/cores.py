"""How many cores this process may use, and its share of them under pytest-xdist.

Both the simulator's worker processes (``qnn_ci.sim.parallel``) and the intra-op
threads of every onnxruntime session qnn-ci opens follow this: under ``pytest -n N``
the N workers share the machine, so each takes ``cores // N`` (at least one). Left
alone, each worker's sessions would start one spinning thread per core, and N
workers would oversubscribe the machine N times over. ``QNN_CI_THREADS`` sets the
sessions' thread count outright (0 or unset: this rule; outside pytest-xdist,
onnxruntime's own default).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ENV_THREADS = "QNN_CI_THREADS"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def xdist_workers(environ: Mapping[str, str] | None = None) -> int:
    """The number of pytest-xdist workers sharing this machine (1 outside xdist)."""
    env = os.environ if environ is None else environ
    workers = env.get("PYTEST_XDIST_WORKER_COUNT", "").strip()
    return int(workers) if workers.isdigit() and int(workers) > 0 else 1


def share_of_cores(environ: Mapping[str, str] | None = None) -> int:
    """This process's share of the usable cores (at least 1)."""
    return max(1, usable_cores() // xdist_workers(environ))


def session_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The intra-op thread count for an onnxruntime session; None: its default."""
    env = os.environ if environ is None else environ
    asked = env.get(ENV_THREADS, "").strip()
    if asked.isdigit() and int(asked) > 0:
        return int(asked)
    return share_of_cores(env) if xdist_workers(env) > 1 else None


def limit_threads(so: Any, environ: Mapping[str, str] | None = None, *,
                  spin: bool = True) -> Any:
    """``so`` (onnxruntime SessionOptions) with its intra-op threads set by
    ``session_threads``; ``spin`` False: idle worker threads block instead of
    spinning (for sessions whose runs alternate with other work on the cores).
    Returned for chaining."""
    n = session_threads(environ)
    if n is not None:
        so.intra_op_num_threads = n
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so
