"""What the AI Hub halves of ``context_binary`` and ``context_run`` share: the client
and device of the export's board (or the failed result that says why not), the
samples as arrays, and a failure of the service as a result."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.results import Finding, StageResult, Status
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import board_common

if TYPE_CHECKING:
    import numpy as np

    from qnn_ci.calibration.sources import Expected
    from qnn_ci.hub.client import HubClient, HubError
    from qnn_ci.hub.device import HubDevice
    from qnn_ci.tables import SocInfo
    from qnn_ci.transport.config import BoardConfig



def error_result(stage: str, board: BoardConfig, exc: HubError,
                 properties: dict[str, Any] | None = None) -> StageResult:
    text = str(exc)
    return StageResult(stage, Status.FAILED, text, [Finding(exc.check, text, subject=board.name)],
                       properties={"board": board.name, **(properties or {})})


def open_device(stage: str, ctx: StageContext
                ) -> tuple[HubClient, HubDevice] | StageResult:
    """The board's client and device, checked against ``target.soc``; or the failed
    result (no token, unknown device, another SoC, the service unreachable)."""
    from qnn_ci.hub.client import HubClient, HubError
    from qnn_ci.hub.device import find_device, soc_mismatch

    board = board_common.the_board(ctx)
    try:
        hub = HubClient(board, ctx.env.environ)
        device = find_device(hub)
    except HubError as exc:
        return error_result(stage, board, exc)
    mismatch = soc_mismatch(device, board.name, ctx.export.name, ctx.export.target.soc)
    if mismatch:
        return board_common.soc_mismatch_result(stage, board, hub.mask(mismatch))
    return hub, device


def slot(ctx: StageContext, board: BoardConfig) -> AbstractContextManager[int]:
    """One of the board's ``max_parallel`` slots on this machine (``qnn_ci.hub.slots``),
    locked in the runner's lock folder (``QNN_CI_LOCK_DIR``, as for board locks)."""
    from qnn_ci.boards.session import lock_dir
    from qnn_ci.hub.slots import hub_slot

    return hub_slot(board, lock_dir(ctx.env.environ), progress=ctx.env.progress)


def judged_soc(export: Any, device: HubDevice) -> SocInfo | None:
    """The SoC a run on ``device`` is judged for: ``target.soc``, else the device's."""
    from qnn_ci.tables import find_soc

    return find_soc(export.target.soc or "") or device.soc


def expected_inputs(cal: StageResult) -> list[Expected]:
    from qnn_ci.calibration.sources import Expected

    return [Expected(n, i["dtype"], tuple(i["shape"])) for n, i in cal.data["inputs"].items()]


def as_arrays(samples: list[dict[str, Path]], inputs: list[Expected]
              ) -> dict[str, list[np.ndarray]]:
    """{input: [one array per sample]} from raw sample files (AI Hub's dataset form)."""
    import numpy as np

    out: dict[str, list[np.ndarray]] = {i.name: [] for i in inputs}
    for sample in samples:
        for i in inputs:
            out[i.name].append(np.fromfile(sample[i.name], dtype=np.dtype(i.dtype))
                               .reshape(i.shape))
    return out


def job_properties(prefix: str, sub: Any) -> dict[str, str]:
    """``hub.<prefix>_job`` and ``hub.<prefix>_url`` of a submitted job."""
    return {f"hub.{prefix}_job": sub.job_id, f"hub.{prefix}_url": sub.url}
