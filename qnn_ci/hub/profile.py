"""What an AI Hub profile says, in qnn-ci's terms: the latency (``latency.*``, as a
board run reports it), the load times and peak memory, and every layer that did not
run on the NPU (each one a finding, as ``sim_npu``'s "all nodes on the HTP")."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from qnn_ci.tables import HUB_COMPUTE_UNITS

SOURCE = "ai_hub_profile"


@dataclass(frozen=True)
class OffNpu:
    """One layer AI Hub placed off the NPU."""

    name: str
    type: str
    unit: str


@dataclass
class HubProfile:
    """The parts of ``download_profile()`` qnn-ci judges and keeps."""

    times_us: list[float] = field(default_factory=list)
    estimated_us: float | None = None
    first_load_us: float | None = None
    warm_load_us: float | None = None
    peak_memory_bytes: float | None = None
    layers: int = 0
    units: dict[str, int] = field(default_factory=dict)
    off_npu: list[OffNpu] = field(default_factory=list)

    def latency_ms(self) -> tuple[float, float, int] | None:
        """(median, p90, runs) in ms: of every inference time when the profile lists
        them, else the estimated time alone (one run)."""
        times = [t for t in self.times_us if t > 0] or (
            [self.estimated_us] if self.estimated_us and self.estimated_us > 0 else [])
        if not times:
            return None
        ordered = sorted(times)
        p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
        return statistics.median(ordered) / 1000.0, p90 / 1000.0, len(ordered)

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        lat = self.latency_ms()
        if lat is not None:
            median, p90, runs = lat
            props |= {"latency.median_ms": round(median, 4), "latency.p90_ms": round(p90, 4),
                      "latency.runs": runs, "latency.method": "profile",
                      "latency.statistic": ("median and p90 of AI Hub's inference times"
                                            if any(t > 0 for t in self.times_us) else
                                            "AI Hub's estimated inference time"),
                      "latency.perf_profile": "", "latency.source": SOURCE}
        if self.first_load_us is not None:
            props["load.init_ms"] = round(self.first_load_us / 1000.0, 4)
        if self.warm_load_us is not None:
            props["load.warm_ms"] = round(self.warm_load_us / 1000.0, 4)
        if self.peak_memory_bytes is not None:
            props["memory.peak_mib"] = round(self.peak_memory_bytes / (1 << 20), 3)
        props["layers"] = self.layers
        for unit in HUB_COMPUTE_UNITS:
            props[f"layers.{unit.lower()}"] = self.units.get(unit, 0)
        return props

    def describe(self) -> str:
        lat = self.latency_ms()
        parts = []
        if lat is not None:
            parts.append(f"latency median {lat[0]:.3f} ms, p90 {lat[1]:.3f} ms "
                         f"({lat[2]} run{'s' if lat[2] != 1 else ''}, AI Hub profile)")
        if self.first_load_us is not None:
            parts.append(f"load {self.first_load_us / 1000.0:.1f} ms")
        if self.layers:
            on = self.units.get("NPU", 0)
            parts.append(f"{on}/{self.layers} layers on the NPU")
        return "; ".join(parts)


def _number(value: Any) -> float | None:
    """A time or a size: a finite number >= 0, else None (left out)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def read_profile(profile: Any) -> HubProfile:
    """A profile dict as the client returns it; anything missing or malformed is left
    out rather than guessed."""
    out = HubProfile()
    if not isinstance(profile, dict):
        return out
    summary = profile.get("execution_summary")
    if isinstance(summary, dict):
        times = summary.get("all_inference_times")
        if isinstance(times, list | tuple):
            out.times_us = [t for t in (_number(v) for v in times) if t is not None]
        out.estimated_us = _number(summary.get("estimated_inference_time"))
        out.first_load_us = _number(summary.get("first_load_time"))
        out.warm_load_us = _number(summary.get("warm_load_time"))
        out.peak_memory_bytes = _number(summary.get("estimated_inference_peak_memory"))
    detail = profile.get("execution_detail")
    if isinstance(detail, list):
        for layer in detail:
            if not isinstance(layer, dict):
                continue
            unit = str(layer.get("compute_unit") or "").upper()
            out.layers += 1
            out.units[unit] = out.units.get(unit, 0) + 1
            if unit != "NPU":
                out.off_npu.append(OffNpu(str(layer.get("name") or "?"),
                                          str(layer.get("type") or "?"), unit or "unknown"))
    return out
