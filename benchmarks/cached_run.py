"""Cached re-runs: what qnn-ci itself costs when every stage is cached.

Whole processes, as a user runs them, on tiny exports (a 64x64 MatMul each: stage
work is near zero, so the time is qnn-ci's own -- start-up, manifest, cache keys,
reports):

- ``qnn-ci run`` on ONE cached export (goal <= 0.25 s wall);
- ``qnn-ci run`` on N cached exports, per export (goal <= 5 ms/export);
- ``pytest`` on N cached exports vs the honest floor: bare pytest (qnn-ci's plugin
  off) on a generated test file with the same number of passing and skipped items,
  in the same paired run -- pytest's own per-item cost (goal <= 1.3x: every qnn-ci
  item runs pytest's own protocol, so this is what the plugin adds on top of it).

The pytest runs load the plugins a venv holding qnn-ci alone loads (qnn-ci's and its
dependencies'): plugins this dev venv has only for qnn-ci's own tests (the test
extra's hypothesis, whose plugin imports all of hypothesis at the end of every pytest
run) are turned off with ``-p no:<name>``, on both sides. The same run with them on
is printed next to it.

Next to them, the machine's speed at the time: the interpreter's own start-up
(``python -c pass``) paired with one cached export.

Per export is the whole run's time / N (start-up included, as the issue measured
it); the marginal cost ((run of N - run of 1) / (N - 1), from paired runs) is
printed next to it. Each goal line takes the median of every run of its command in
this script (the N-export pytest run is timed in three pairings: with 1 export,
with bare pytest, with the dev venv's plugins -- 3 x repeat runs; the one-export CLI
run in two), not of one pairing's runs only: on a shared machine whose speed swings
from run to run, more runs of the same command give a steadier median. SDK and
board stages skip (no SDK, no board), the simulator stages skip (no target.soc): the
cached stages are static_shapes and calibration.

    python benchmarks/cached_run.py [--exports 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import (
    NOISE_NOTE,
    Samples,
    clean_env,
    goal_line,
    paired,
    plugins_not_installed_with,
    run_once,
    venv_bin,
)
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
        extra = plugins_not_installed_with("qnn-ci")   # the dev venv's test extras'
        off = [arg for name in extra for arg in ("-p", f"no:{name}")]
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        manifest = ["-m", "qnn", "qnn-ci.yaml"]
        dev, pytest = [*base, *manifest], [*base, *off, *manifest]
        for folder in (one, many):            # first runs: fill the caches
            run_once(cli, cwd=folder, env=env)
        # `cwd` differs per side: wrap each side in `env -C` (a whole process still).
        def at(folder: Path, argv: list[str]) -> list[str]:
            return ["env", "-C", str(folder), *argv]

        c = paired(at(one, cli), at(many, cli), args.repeat, env=env)
        p = paired(at(one, pytest), at(many, pytest), args.repeat, env=env)
        passed, skipped = _counts(pytest, many, env)
        floor_dir = _floor_file(Path(tmp) / "floor", passed, skipped)
        bare = [*base, *off, "-p", "no:qnn_ci", "test_floor.py"]
        f = paired(at(many, pytest), at(floor_dir, bare), args.repeat, env=env)
        d = paired(at(many, pytest), at(many, dev), args.repeat, env=env)
        # The machine's speed now: the interpreter's own start-up, paired with one export.
        y = paired(at(one, cli), [sys.executable, "-c", "pass"], args.repeat, env=env)
    print(f"cached re-runs, tiny exports; {NOISE_NOTE}")
    print(f"qnn-ci run, 1 export vs {n} exports (paired, whole processes):")
    print(c.describe("1 export", f"{n} exports"))
    print(f"pytest, 1 export vs {n} exports (paired, whole processes):")
    print(p.describe("1 export", f"{n} exports"))
    cli_per = 1000 * c.b.median / n
    cli_marginal = 1000 * (c.b.median - c.a.median) / (n - 1)
    py_marginal = 1000 * (p.b.median - p.a.median) / (n - 1)
    print(f"marginal cost per export: CLI {cli_marginal:.1f} ms, pytest {py_marginal:.1f} ms "
          "(start-up excluded)")
    print(f"pytest on {n} exports ({passed} passed + {skipped} skipped items) vs bare pytest "
          "on a generated file with the same items, qnn-ci's plugin off (paired, whole "
          "processes):")
    print(f.describe(f"{n} exports", "bare pytest"))
    print(f"the same {n} exports with this dev venv's other plugins on too "
          f"({', '.join(extra) or 'none'}; paired, whole processes):")
    print(d.describe("qnn-ci's own plugins", "all plugins"))
    print(f"pytest, {n} cached exports, all of this venv's plugins: "
          f"{1000 * d.b.median / n:.1f} ms/export (info)")
    floor_per = 1000 * f.b.median / n
    print(f"pytest's own floor for these items: {floor_per:.1f} ms/export "
          f"({1000 * f.b.median / (passed + skipped):.2f} ms/item); qnn-ci's share above it: "
          f"{1000 * (f.a.median - f.b.median) / n:.1f} ms/export")
    print(f"yardstick: `python -c pass` here and now {1000 * y.b.median:.0f} ms "
          f"(one cached export in the same pairs {1000 * y.a.median:.0f} ms: qnn-ci's own "
          f"{1000 * (y.a.median - y.b.median):.0f} ms)")
    # The goal lines: every run of the command in this script (see the docstring).
    one = Samples(c.a.values + y.a.values)
    py_all = Samples(p.b.values + f.a.values + d.a.values)
    print(f"every run of one cached export (qnn-ci run): {one.describe()}")
    print(f"every run of pytest on {n} cached exports: {py_all.describe()}")
    py_per = 1000 * py_all.median / n
    print(goal_line("qnn-ci run, one cached export (median wall)", one.median, "<= 0.25 s",
                    one.median <= 0.25, unit=" s"))
    print(goal_line(f"qnn-ci run, {n} cached exports, per export (median wall / {n})",
                    cli_per, "<= 5 ms", cli_per <= 5, unit=" ms"))
    print(f"pytest, {n} cached exports, per export (median wall / {n}): {py_per:.1f} ms (info)")
    ratio = f.a.median / f.b.median
    print(goal_line(f"pytest, {n} cached exports / bare pytest, same items (paired medians)",
                    ratio, "<= 1.3x", ratio <= 1.3, unit="x"))


def _counts(pytest: list[str], folder: Path, env: dict[str, str]) -> tuple[int, int]:
    """(passed, skipped) of one pytest run of the cached exports."""
    out = subprocess.run(pytest, cwd=folder, env=env, capture_output=True, text=True).stdout
    found = {k: int(v) for v, k in re.findall(r"(\d+) (passed|skipped)", out)}
    return found.get("passed", 0), found.get("skipped", 0)


def _floor_file(folder: Path, passed: int, skipped: int) -> Path:
    """Trivial tests, ``passed`` passing and ``skipped`` skipped at run time (as the
    plugin's skipped stages are)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_floor.py").write_text(
        "import pytest\n\n\n"
        f"@pytest.mark.parametrize('i', range({passed}))\ndef test_passes(i):\n    pass\n\n\n"
        f"@pytest.mark.parametrize('i', range({skipped}))\ndef test_skips(i):\n"
        "    pytest.skip('not here')\n")
    return folder


if __name__ == "__main__":
    main()
