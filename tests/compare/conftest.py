"""Test helpers for qnn_ci.compare: a plain numpy reference implementation of
the metrics (whole arrays, float64, no chunking) and writers for output layouts."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest


def reference_metrics(ref: np.ndarray, test: np.ndarray) -> dict[str, float | None]:
    """The metrics computed the obvious way, over positions where both are finite."""
    r = np.asarray(ref, dtype=np.float64).reshape(-1)
    t = np.asarray(test, dtype=np.float64).reshape(-1)
    ok = np.isfinite(r) & np.isfinite(t)
    r, t = r[ok], t[ok]
    e = t - r
    out: dict[str, float | None] = {"finite": float(len(r))}
    if len(r) == 0:
        return out | {"cosine": None, "max_abs": None, "mean_abs": None, "snr": None,
                      "psnr": None, "peak": 0.0}
    peak = float(np.max(np.abs(r)))
    out |= {"max_abs": float(np.max(np.abs(e))), "mean_abs": float(np.mean(np.abs(e))),
            "peak": peak}
    if peak <= 1e-6:
        return out | {"cosine": None, "snr": None, "psnr": None}
    nr, nt = np.linalg.norm(r), np.linalg.norm(t)
    out["cosine"] = 0.0 if nt == 0 else float(np.dot(r, t) / (nr * nt))
    mse = float(np.mean(e * e))
    out["snr"] = math.inf if mse == 0 else float(10 * np.log10(np.mean(r * r) / mse))
    out["psnr"] = math.inf if mse == 0 else float(10 * np.log10(peak**2 / mse))
    return out


def write_raw(path: Path, values: np.ndarray, dtype: str = "float32") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.asarray(values, dtype=dtype).tofile(path)
    return path


def make_net_run(root: Path, outputs: dict[str, list[np.ndarray]]) -> Path:
    """``root/Result_<n>/<name>.raw`` for every name and sample (names may hold '/')."""
    for name, samples in outputs.items():
        for n, values in enumerate(samples):
            write_raw(root / f"Result_{n}" / f"{name}.raw", values)
    return root


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
