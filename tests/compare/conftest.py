"""Test helpers for qnn_ci.compare: a plain numpy reference implementation of
the metrics (whole arrays, float64, no chunking) and writers for output layouts."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest


def near_zero(ref: np.ndarray, test: np.ndarray, step: float | None = None) -> bool:
    """The near-zero rule written out plainly (whole arrays): the reference's peak
    is zero, or within 4 quantization steps or 4 dtype steps of zero, or at most
    0.1 % of the test's peak."""
    ok = np.isfinite(np.asarray(ref, np.float64)) & np.isfinite(np.asarray(test, np.float64))
    rp = float(np.max(np.abs(np.asarray(ref, np.float64)[ok]))) if ok.any() else 0.0
    tp = float(np.max(np.abs(np.asarray(test, np.float64)[ok]))) if ok.any() else 0.0
    dsteps = [1.0 if a.dtype.kind in "iub" else float(np.finfo(a.dtype).smallest_subnormal)
              for a in (np.asarray(ref), np.asarray(test))]
    return rp <= max(4 * (step or 0.0), 4 * max(dsteps), 1e-3 * tp)


def reference_metrics(ref: np.ndarray, test: np.ndarray,
                      step: float | None = None) -> dict[str, float | None]:
    """The metrics computed the obvious way, over positions where both are finite."""
    flagged = near_zero(ref, test, step)
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
    if flagged:
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
