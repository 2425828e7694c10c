"""What `--junit` costs: `qnn-ci run --junit` next to the same run without it.

Whole processes, paired (without, with, without, with, ...) on N tiny exports with
every stage cached (N x 11 testcases; the hard case: nothing else takes time). The
yardstick is the run without `--junit`; goal: with <= 1.2x without. Also, in-process:
the writer alone adding the same number of testcases one by one.

    python benchmarks/junit_writer.py [--exports 100] [--repeat 11]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from _harness import NOISE_NOTE, clean_env, goal_line, paired, run_once, venv_bin
from _workload import make_workload

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.report.junit import JUnitWriter


def writer_alone(folder: Path, cases: int) -> float:
    """Seconds to add ``cases`` testcases one by one and finish the report."""
    results = [StageResult(f"s{i}", Status.PASSED, "ok", properties={"n": i, "x": 0.5},
                           artefacts={"report": f"/w/e{i}/r.json"}, cached=True)
               for i in range(cases)]
    manifest = folder / "qnn-ci.yaml"    # one Path for the run, as `qnn-ci run` has
    t = time.perf_counter()
    writer = JUnitWriter(folder / "alone.xml")
    for i, r in enumerate(results):   # as `qnn-ci run` adds them
        writer.add_result(manifest, f"e{i // 11}", 5 + i // 11, r)
    writer.flush()
    elapsed = time.perf_counter() - t
    assert len(list(ET.parse(folder / "alone.xml").getroot().iter("testcase"))) == cases
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exports", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=11)   # cheap: more pairs, steadier medians
    args = ap.parse_args()
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_workload(Path(tmp) / "w", args.exports).parent
        cli = [venv_bin("qnn-ci"), "run"]
        run_once(cli, cwd=folder, env=env)                     # fill the cache
        report = folder / "report.xml"
        res = paired(cli, [*cli, "--junit", str(report)], args.repeat, cwd=folder, env=env)
        cases = len(list(ET.parse(report).getroot().iter("testcase")))
        alone = writer_alone(Path(tmp), cases)
    print(f"`qnn-ci run` on {args.exports} cached exports ({cases} testcases); {NOISE_NOTE}")
    print(res.describe("without --junit (the yardstick)", "with --junit"))
    print(f"writer alone, {cases} testcases added one by one: {1000 * alone:.1f} ms "
          f"({1e6 * alone / cases:.0f} us per testcase)")
    print(goal_line("qnn-ci run --junit / without (median of paired whole runs)", res.ratio,
                    "<= 1.20x", res.ratio <= 1.2, unit="x"))


if __name__ == "__main__":
    main()
