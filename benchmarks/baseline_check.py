"""What the baseline check (the `regression` stage) adds to a cached run.

N tiny exports (the cached-run workload, with `target.soc` so the simulator stages
measure something), all cached; `qnn-ci run` of the same exports with
`regression.enabled: false` (A) and with the check against a `qnn-baselines.yaml`
holding every export's entry (B), whole processes, alternately. Goal: B - A <= 5 ms
per export.

    python benchmarks/baseline_check.py [--exports 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _harness import NOISE_NOTE, clean_env, goal_line, paired, run_once, venv_bin
from _workload import make_workload

SIM = ["  target: {soc: QCS6490}", "  sim: {samples: 1}", "  diagnosis: {enabled: false}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exports", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.exports
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        manifest = make_workload(Path(tmp) / "w", n)
        lines = manifest.read_text().splitlines()
        at = lines.index("exports:")
        on = [*lines[:at], *SIM, *lines[at:]]
        off = [*lines[:at], *SIM, "  regression: {enabled: false}", *lines[at:]]
        manifest.write_text("\n".join(on) + "\n")
        (manifest.parent / "off.yaml").write_text("\n".join(off) + "\n")
        qnn_ci = venv_bin("qnn-ci")
        work = str(manifest.parent / ".qnn-ci")
        # fill the caches (the simulator runs once per export), write the baselines,
        # cache the check itself
        run_once([qnn_ci, "run", "--workdir", work, str(manifest)], env=env, ok=(0, 1))
        run_once([qnn_ci, "baseline", "update", "--workdir", work, str(manifest)], env=env)
        run_once([qnn_ci, "run", "--workdir", work, str(manifest)], env=env, ok=(0, 1))
        text = (manifest.parent / "qnn-baselines.yaml").read_text()
        assert text.count("simulator:") == n, "every export needs its baseline"
        c = paired([qnn_ci, "run", "--workdir", work, str(manifest.parent / "off.yaml")],
                   [qnn_ci, "run", "--workdir", work, str(manifest)], args.repeat, env=env,
                   ok=(0, 1))
    print(f"cached runs of {n} tiny exports, without vs with the baseline check; {NOISE_NOTE}")
    print(c.describe("regression disabled", "regression against qnn-baselines.yaml"))
    added = 1000 * (c.b.median - c.a.median) / n
    pairs = sorted(1000 * (b - a) / n for a, b in zip(c.a.values, c.b.values, strict=True))
    print(f"added per export: median of runs {added:.2f} ms, per-pair median "
          f"{pairs[len(pairs) // 2]:.2f} ms")
    print(goal_line(f"baseline check, added per cached export (median wall diff / {n})",
                    added, "<= 5 ms", added <= 5, unit=" ms"))


if __name__ == "__main__":
    main()
