"""How long `qnn-ci report` takes on a nightly's worth of input: N exports (each 11
stages in a JUnit report, a work folder holding each export's sim_numerics comparison
with its error histograms) and M nights of history (3 stages x their metrics per
export and night: benchmarks/_history_data.py), so 900 matplotlib charts (a
histogram and 8 trends per export). Whole process, what a CI step waits for. Goal:
<= 5 s for 100 exports x 30 nights.

    python benchmarks/report_speed.py [--exports 100] [--nights 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from _harness import NOISE_NOTE, clean_env, goal_line, timed, venv_bin
from _history_data import synthetic_history, write_history

from qnn_ci.engine.results import Finding, StageResult, Status
from qnn_ci.report.junit import JUnitWriter, testcase

STAGES = ("static_shapes", "calibration", "sim_npu", "sim_numerics", "dry_run", "convert",
          "contract", "fp16_gate", "model_lib", "so_load", "htp_vs_cpu")
OUTPUTS = ("logits", "boxes", "scores")


def _comparison(rng: random.Random) -> dict[str, object]:
    outputs = []
    for name in OUTPUTS:
        samples = []
        for s in range(4):
            hist = [[0.0, 0.0, rng.randint(0, 50)], [0.0, 1e-7, rng.randint(0, 500)]]
            hist += [[10.0 ** e, 10.0 ** (e + 1), rng.randint(0, 5000)] for e in range(-7, 0)]
            samples.append({"sample": s, "verdict": "ok", "metrics": {
                "cosine": 1 - rng.random() * 1e-3, "max_abs": rng.random() * 0.1,
                "snr": 30 + rng.random() * 10, "histogram": hist}})
        outputs.append({"name": name, "test_key": name, "bounds": {"cosine": 0.99},
                        "samples": samples})
    return {"outputs": outputs}


def _result(stage: str, e: int, rng: random.Random) -> StageResult:
    if stage == "sim_numerics":
        props: dict[str, object] = {"soc": "QCS6490", "samples": 4}
        for out in OUTPUTS:
            props |= {f"sim_vs_fp32.{out}.cosine": round(1 - rng.random() * 1e-3, 6),
                      f"sim_vs_fp32.{out}.snr": round(30 + rng.random() * 10, 4),
                      f"sim_vs_fp32.{out}.max_abs": round(rng.random() * 0.1, 6),
                      f"sim_vs_fp32.{out}.cosine.min": 0.99}
        failed = e % 10 == 0
        return StageResult(stage, Status.FAILED if failed else Status.PASSED,
                           "QCS6490 simulator vs fp32 CPU on 4 held-out sample(s): worst "
                           "cosine 0.9991 (logits, sample 2)",
                           [Finding("compare.cosine", "logits: cosine 0.98 < 0.99")]
                           if failed else [], properties=props,
                           data={"comparison": _comparison(rng)})
    if stage in ("dry_run", "convert", "contract", "fp16_gate", "model_lib"):
        return StageResult(stage, Status.SKIPPED, "QNN_SDK_ROOT is not set")
    if stage in ("so_load", "htp_vs_cpu"):
        return StageResult(stage, Status.SKIPPED, f"export e{e} names no board")
    return StageResult(stage, Status.PASSED, f"{stage} ok", properties={"n": e})


def make_inputs(folder: Path, exports: int, nights: int) -> tuple[Path, Path, Path]:
    """(JUnit report, work folder, history file) for ``exports`` x ``nights``."""
    rng = random.Random(14)
    work = folder / "work"
    writer = JUnitWriter(folder / "junit.xml", interval_s=3600)
    for e in range(exports):
        for stage in STAGES:
            r = _result(stage, e, rng)
            writer.add(testcase(folder / "qnn-ci.yaml", f"e{e}", 2 + 6 * e, r))
            if r.data:
                d = work / f"e{e}" / stage
                d.mkdir(parents=True)
                (d / "result.json").write_text(json.dumps({"key": "k", "result": r.to_dict()}))
    writer.flush()
    history = write_history(folder / "history.jsonl", synthetic_history(exports, nights))
    return folder / "junit.xml", work, history


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exports", type=int, default=100)
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        junit, work, history = make_inputs(Path(tmp), args.exports, args.nights)
        page = Path(tmp) / "report.html"
        cmd = [venv_bin("qnn-ci"), "report", "--junit", str(junit), "--workdir", str(work),
               "--history", str(history), "-o", str(page)]
        samples = timed(cmd, args.repeat, cwd=tmp, env=clean_env())
        size = page.stat().st_size
        text = page.read_text("utf-8")
        assert text.count("<section") == args.exports, "an export is missing from the page"
        assert "|error| by decade" in text and "<h3>Trends</h3>" in text
        charts = text.count('<img class="plot"')   # matplotlib PNGs: histogram + 8 trends
        assert charts == 9 * args.exports, charts
    print(f"qnn-ci report, {args.exports} exports x {args.nights} nights ({charts} "
          f"matplotlib charts): {samples.describe()}; page {size / 1e6:.1f} MB  {NOISE_NOTE}")
    print(goal_line(f"qnn-ci report ({args.exports} exports x {args.nights} nights)",
                    samples.median, "<= 5 s", samples.median <= 5.0, unit=" s"))


if __name__ == "__main__":
    main()
