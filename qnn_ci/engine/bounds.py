"""Per-output numeric bounds (manifest ``thresholds:``): the one value type that
``qnn_ci.compare`` needs from an export, kept apart from ``qnn_ci.engine.spec``
so that ``qnn-ci compare`` starts without building every spec class."""

from __future__ import annotations

from dataclasses import dataclass, field

from qnn_ci.tables import DEFAULT_COSINE


@dataclass(frozen=True)
class Thresholds:
    """metric -> bound. Higher-is-better metrics (cosine, snr, psnr) are minimums;
    error metrics (max_abs, mean_abs) are maximums."""

    default: dict[str, float] = field(default_factory=lambda: {"cosine": DEFAULT_COSINE})
    per_output: dict[str, dict[str, float]] = field(default_factory=dict)

    def for_output(self, name: str) -> dict[str, float]:
        return {**self.default, **self.per_output.get(name, {})}
