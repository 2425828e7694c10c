"""Shared, prepared work for the diagnosis tests: the collapse model quantized,
prepared for QCS6490 and checked once per module that asks for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.diagnose.graphs import collapse_model, collapse_samples
from tests.sim.conftest import needs_sim

SOC = "QCS6490"


@dataclass
class Checked:
    """A model quantized, prepared and run on the simulator against fp32."""

    model: Path
    qdq: Path
    ctx: Path | None
    soc: Any
    calibration: list[dict[str, Any]]
    held_out: list[dict[str, Any]]
    settings: Any
    numerics: Any
    folder: Path


def check(model: Path, folder: Path, calibration: list[dict[str, Any]],
          held_out: list[dict[str, Any]], settings: Any, *, fuse: bool = True,
          thresholds: Any = None) -> Checked:
    from qnn_ci.engine.bounds import Thresholds
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.numerics import simulate_and_compare
    from qnn_ci.sim.prepare import prepare_for_htp
    from qnn_ci.sim.quantize import quantize_for_htp

    soc = sim_target(SOC)
    stem = model.name.removesuffix(".onnx")
    q = quantize_for_htp(model, folder / f"{stem}.qdq.onnx", calibration, settings, fuse=fuse)
    p = prepare_for_htp(q.model, folder, soc, stem=stem)
    assert p.prepared and p.ctx_model is not None, p.findings
    numerics = simulate_and_compare(model, q.model, p.ctx_model, soc, held_out,
                                    thresholds or Thresholds(), folder / "numerics",
                                    processes=1)
    return Checked(model, q.model, p.ctx_model, soc, calibration, held_out, settings,
                   numerics, folder)


@pytest.fixture(scope="module")
def collapse_checked(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    """The collapse model with the default settings (W8A16 per-tensor): fails."""
    if needs_sim.args[0]:
        pytest.skip(needs_sim.kwargs["reason"])
    from qnn_ci.sim.quantize import QuantSettings

    folder = tmp_path_factory.mktemp("collapse")
    model = collapse_model(folder / "collapse.onnx")
    return check(model, folder / "default", collapse_samples(8, seed=1),
                 collapse_samples(2, seed=2), QuantSettings())
