"""Shared benchmark machinery: paired, repeated timings and one goal line per goal.

The machine these benchmarks run on is usually shared (CI runners, other jobs),
so absolute times are noisy. Compare two things by running them *paired*: A then
B, A then B, ... in the same process, so both sides see the same load; then
report the ratio of medians (and of minimums, the least disturbed sample).

    from _harness import paired, timed, goal_line

    res = paired([sys.executable, "-c", "pass"], [sys.executable, "-c", "import json"])
    print(res.describe("python -c pass", "python -c 'import json'"))
    print(goal_line("import json / bare start-up", res.ratio, "<= 1.10x",
                    res.ratio <= 1.10, unit="x"))

- ``paired(cmd_a, cmd_b, repeat=5, ...)`` -> ``Paired`` with ``a``/``b`` ``Samples``
  (``median``, ``min``, ``values``) and ``ratio`` (median b / median a) and
  ``ratio_min``. A command is an argv list (run as a whole process: what a user
  sees) or a zero-argument callable (run in-process). ``warmup`` runs of each
  side are discarded first (disk cache, .pyc files).
- ``timed(cmd, repeat=5)`` -> ``Samples`` for one side alone.
- ``goal_line(measure, value, goal, ok, unit="")`` -> ``"measure: value (goal X) OK|MISS"``,
  the one line per goal every benchmark prints.

Benchmarks scripts import this as ``from _harness import ...`` (``benchmarks/`` is
on ``sys.path`` when a script there runs); ``make bench`` skips ``_*.py`` files.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

Command = Sequence[str] | Callable[[], object]


@dataclass
class Samples:
    """Wall times in seconds of repeated runs of one command."""

    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    def describe(self, unit: str = "s", scale: float = 1.0) -> str:
        return (f"median {self.median * scale:.3f} {unit}, min {self.min * scale:.3f} {unit}"
                f" (n={len(self.values)})")


@dataclass
class Paired:
    """Two commands timed alternately; ``ratio`` is median b / median a."""

    a: Samples
    b: Samples

    @property
    def ratio(self) -> float:
        return self.b.median / self.a.median

    @property
    def ratio_min(self) -> float:
        return self.b.min / self.a.min

    @property
    def ratios(self) -> list[float]:
        """Per-pair ratios b_i / a_i (same-moment load on both sides)."""
        return [b / a for a, b in zip(self.a.values, self.b.values, strict=True)]

    def describe(self, name_a: str, name_b: str) -> str:
        return (f"  A {name_a}: {self.a.describe()}\n"
                f"  B {name_b}: {self.b.describe()}\n"
                f"  B/A: median {self.ratio:.2f}x, min {self.ratio_min:.2f}x, "
                f"per-pair median {statistics.median(self.ratios):.2f}x")


def run_once(cmd: Command, *, cwd: str | Path | None = None,
             env: Mapping[str, str] | None = None, ok: Sequence[int] = (0,)) -> float:
    """Wall time of one run; a whole process for an argv list, a call for a callable.

    A process that exits with a code not in ``ok`` stops the benchmark with its output
    (a benchmark timing a failure measures nothing).
    """
    if callable(cmd):
        t = time.perf_counter()
        cmd()
        return time.perf_counter() - t
    t = time.perf_counter()
    proc = subprocess.run(list(cmd), cwd=cwd, env=dict(env) if env is not None else None,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if proc.returncode not in ok:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n"
                 f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return elapsed


def timed(cmd: Command, repeat: int = 5, *, warmup: int = 1, **kw: object) -> Samples:
    """Run ``cmd`` ``warmup`` + ``repeat`` times; the timed runs' wall times."""
    for _ in range(warmup):
        run_once(cmd, **kw)  # type: ignore[arg-type]
    return Samples([run_once(cmd, **kw) for _ in range(repeat)])  # type: ignore[arg-type]


def paired(cmd_a: Command, cmd_b: Command, repeat: int = 5, *, warmup: int = 1,
           cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
           env_b: Mapping[str, str] | None = None, ok: Sequence[int] = (0,),
           before: Callable[[], object] | None = None) -> Paired:
    """Time A and B alternately (A, B, A, B, ...) ``repeat`` times after ``warmup`` pairs.

    ``env_b`` overrides ``env`` for B; ``before`` runs (untimed) before every single run,
    e.g. to reset a cache folder.
    """
    a, b = Samples(), Samples()
    for i in range(warmup + repeat):
        for cmd, out, e in ((cmd_a, a, env), (cmd_b, b, env_b if env_b is not None else env)):
            if before is not None:
                before()
            t = run_once(cmd, cwd=cwd, env=e, ok=ok)
            if i >= warmup:
                out.values.append(t)
    return Paired(a, b)


def goal_line(measure: str, value: float, goal: str, ok: bool, unit: str = "") -> str:
    """``measure: value (goal X) OK|MISS`` -- the one line per goal."""
    shown = f"{value:.2f}{unit}" if isinstance(value, float) else f"{value}{unit}"
    return f"{measure}: {shown} (goal {goal}) {'OK' if ok else 'MISS'}"


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment for child processes (no user plugins or site tweaks)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def venv_bin(name: str) -> str:
    """The path of a console script next to the running interpreter (``.venv/bin/qnn-ci``)."""
    return str(Path(sys.executable).with_name(name))


def plugins_not_installed_with(dist: str = "qnn-ci") -> list[str]:
    """The pytest plugins (``pytest11`` entry points) of this venv that installing
    ``dist`` does not bring: those of packages outside its dependency closure (extras
    excluded) -- here the test extra's, e.g. hypothesis. ``-p no:<name>`` for each
    runs pytest with the plugins a user's venv holding ``dist`` alone would load."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted, todo = set(), [canonicalize_name(dist)]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return sorted({ep.name for ep in metadata.entry_points(group="pytest11")
                   if ep.dist is None or canonicalize_name(ep.dist.name) not in wanted})


NOISE_NOTE = ("(machine may be shared: absolute times are noisy; the paired ratios are what"
              " count)")
