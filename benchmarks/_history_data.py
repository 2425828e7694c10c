"""Synthetic run history for benchmarks: ``exports`` x ``nights`` x 3 stages, in the
record shape ``qnn-ci history add`` writes (qnn_ci/nightly/history.py, docs/history.md).

    from _history_data import synthetic_history, write_history
    records = synthetic_history(100, 30)          # list of dicts, oldest night first
    write_history(Path("history.jsonl"), records)

Per export and night: sim_npu (nodes), sim_numerics (cosine / SNR / max_abs of three
outputs) and htp_vs_cpu on board ``rb3`` (latency median / p90, cosine). Values are
noisy around a level; every 10th export's latency and logits cosine slide slowly the
worse way (inside each night's tolerance), so ``qnn-ci history show`` flags drifts
and a report has trends worth drawing. Deterministic (seeded).
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

OUTPUTS = ("logits", "boxes", "scores")
KEYS = ("date", "commit", "export", "stage", "soc", "board", "status", "metrics")


def synthetic_history(exports: int, nights: int, *, seed: int = 14) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    start = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    out: list[dict[str, Any]] = []
    for n in range(nights):
        date = (start + timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
        commit = f"{rng.getrandbits(160):040x}"
        for e in range(exports):
            sliding = e % 10 == 0
            base = {"date": date, "commit": commit, "export": f"e{e}", "soc": "QCS6490",
                    "status": "passed"}
            out.append(base | {"stage": "sim_npu", "board": None,
                               "metrics": {"nodes_on_htp": 40 + e % 3, "nodes_total": 42}})
            numerics: dict[str, float] = {}
            for o in OUTPUTS:
                numerics[f"sim_vs_fp32.{o}.cosine"] = round(0.9995 - rng.random() * 2e-4, 6)
                numerics[f"sim_vs_fp32.{o}.max_abs"] = round(0.05 + rng.random() * 0.01, 6)
                numerics[f"sim_vs_fp32.{o}.snr"] = round(35 + rng.random() * 0.5, 4)
            out.append(base | {"stage": "sim_numerics", "board": None,
                               "metrics": dict(sorted(numerics.items()))})
            slide = n * 0.0003 if sliding else 0.0
            median = 4.0 * (1.02 ** n if sliding else 1.0) + rng.random() * 0.02
            out.append(base | {"stage": "htp_vs_cpu", "board": "rb3", "metrics": {
                "htp_vs_cpu.logits.cosine": round(0.9995 - slide - rng.random() * 5e-5, 6),
                "latency.median_ms": round(median, 3),
                "latency.p90_ms": round(median * 1.1, 3)}})
    return [{k: r.get(k) for k in KEYS} for r in out]


def write_history(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
