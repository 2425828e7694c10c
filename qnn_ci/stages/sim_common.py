"""What the simulator stages (sim_npu, sim_numerics) share: the capability check
and the versions that key their cache."""

from __future__ import annotations

from typing import Any

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.sim.availability import sim_unavailable, versions


class SimStage(Stage):
    marker = "qnn_sim"

    def unavailable(self, export: ExportSpec, env: Environment) -> str | None:
        reason = sim_unavailable()
        if reason:
            return reason
        if not export.target.soc:
            return "no target.soc in the manifest: the simulator prepares for one SoC"
        return None

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        return {"versions": versions()}
