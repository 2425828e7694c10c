"""Make docs/report.png: the HTML report of a real run of a tiny export on the HTP
simulator (tests/core/test_html_report.py's project), with a baselines file and twelve
nights of history and a baselines file the run regressed from, screenshot in headless
Chromium.

    .venv/bin/python scripts/report_screenshot.py [--out docs/report.png]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _history(path: Path, junit: Path) -> None:
    """Twelve nights: the run's numbers, the cosine sliding, a board's latency."""
    from qnn_ci.nightly import history

    rng = random.Random(14)
    base = {r["stage"]: r for r in history.records_from_junit(junit, commit="x")}
    lines = []
    for night in range(12):
        date = f"2026-11-{18 + night:02d}T02:00:00Z"
        commit = f"{rng.getrandbits(160):040x}"
        for rec in base.values():
            metrics = dict(rec["metrics"])
            for k in metrics:
                if k.endswith(".cosine"):
                    metrics[k] = round(0.99999 - night * 2e-5, 6)
                elif isinstance(metrics[k], float):
                    metrics[k] = round(metrics[k] * (1 + (rng.random() - 0.5) * 0.04), 6)
            lines.append({**rec, "date": date, "commit": commit, "metrics": metrics})
        median = round(4.2 + rng.random() * 0.2, 3)
        lines.append({"date": date, "commit": commit, "export": "tiny", "stage": "htp_vs_cpu",
                      "soc": "QCS6490", "board": "rb3", "status": "passed",
                      "metrics": {"latency.median_ms": median,
                                  "latency.p90_ms": round(median * 1.17, 3)}})
    path.write_text("".join(history.record_line(r) + "\n" for r in lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    args = ap.parse_args()
    from qnn_ci.nightly import baselines as bl
    from tests.core.graphs import FLOATS_GEN, tiny_matmul_model
    from tests.core.test_html_report import MANIFEST, _cli, load_in_chromium

    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "qnn-ci.yaml").write_text(MANIFEST)
        (project / "gens.py").write_text(FLOATS_GEN)
        tiny_matmul_model(project / "models" / "m.onnx")
        # a baselines file from an earlier night: the SNR has since dropped beyond its
        # tolerance, so the regression check fails with its one line
        bl.write(project / "qnn-baselines.yaml", {("tiny", "QCS6490", "simulator"): bl.Entry(
            metrics={"sim_vs_fp32.y.cosine": 0.99999, "sim_vs_fp32.y.max_abs": 0.0085,
                     "sim_vs_fp32.y.snr": 46.1},
            commit="3f2c1ab", date="2026-11-28")})
        done = _cli("run", "--workdir", "work", "--junit", "junit.xml", cwd=project)
        assert done.returncode in (0, 1), done.stderr
        _history(project / "history.jsonl", project / "junit.xml")
        page = project / "report.html"
        done = _cli("report", "--junit", "junit.xml", "--workdir", "work", "--history",
                    "history.jsonl", "--title", "qnn-ci nightly — QCS6490", "-o", str(page),
                    cwd=project)
        assert done.returncode == 0, done.stderr
        shot = project / "shot.png"
        console, urls = load_in_chromium(page, shot, height=1250, width=1100)
        assert console == [] and urls == [], (console, urls)
        args.out.write_bytes(shot.read_bytes())
    print(f"{args.out}: written")


if __name__ == "__main__":
    main()
