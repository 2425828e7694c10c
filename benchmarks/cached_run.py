"""Cached re-runs: what qnn-ci itself costs when every stage is cached.

Whole processes, as a user runs them, on tiny exports (a 64x64 MatMul each: stage
work is near zero, so the time is qnn-ci's own -- start-up, manifest, cache keys,
reports):

- ``qnn-ci run`` on ONE cached export (goal <= 0.25 s wall);
- ``qnn-ci run`` on N cached exports, per export (goal <= 5 ms/export);
- ``pytest`` on N cached exports, per export (goal <= 10 ms/export).

Per export is the whole run's time / N (start-up included, as the issue measured
it); the marginal cost ((run of N - run of 1) / (N - 1), from paired runs) is
printed next to it. SDK and board stages skip (no SDK, no board), the simulator
stages skip (no target.soc): the cached stages are static_shapes and calibration.

    python benchmarks/cached_run.py [--exports 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _harness import NOISE_NOTE, clean_env, goal_line, paired, run_once, venv_bin
from _workload import make_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exports", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.exports
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        one = make_workload(Path(tmp) / "one", 1).parent
        many = make_workload(Path(tmp) / "many", n).parent
        cli = [venv_bin("qnn-ci"), "run"]
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "-m", "qnn", "qnn-ci.yaml"]
        for folder in (one, many):            # first runs: fill the caches
            run_once(cli, cwd=folder, env=env)
        # `cwd` differs per side: wrap each side in `env -C` (a whole process still).
        def at(folder: Path, argv: list[str]) -> list[str]:
            return ["env", "-C", str(folder), *argv]

        c = paired(at(one, cli), at(many, cli), args.repeat, env=env)
        p = paired(at(one, pytest), at(many, pytest), args.repeat, env=env)
    print(f"cached re-runs, tiny exports; {NOISE_NOTE}")
    print(f"qnn-ci run, 1 export vs {n} exports (paired, whole processes):")
    print(c.describe("1 export", f"{n} exports"))
    print(f"pytest, 1 export vs {n} exports (paired, whole processes):")
    print(p.describe("1 export", f"{n} exports"))
    cli_per = 1000 * c.b.median / n
    py_per = 1000 * p.b.median / n
    cli_marginal = 1000 * (c.b.median - c.a.median) / (n - 1)
    py_marginal = 1000 * (p.b.median - p.a.median) / (n - 1)
    print(f"marginal cost per export: CLI {cli_marginal:.1f} ms, pytest {py_marginal:.1f} ms "
          "(start-up excluded)")
    print(goal_line("qnn-ci run, one cached export (median wall)", c.a.median, "<= 0.25 s",
                    c.a.median <= 0.25, unit=" s"))
    print(goal_line(f"qnn-ci run, {n} cached exports, per export (median wall / {n})",
                    cli_per, "<= 5 ms", cli_per <= 5, unit=" ms"))
    print(goal_line(f"pytest, {n} cached exports, per export (median wall / {n})", py_per,
                    "<= 10 ms", py_per <= 10, unit=" ms"))


if __name__ == "__main__":
    main()
