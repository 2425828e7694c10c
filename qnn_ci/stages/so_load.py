"""Stage `so_load`: push the model library to the board and run ONE inference
with qnn-net-run on each backend (CPU, HTP). Tells "could not load the backend /
model" apart from an execution failure, and reports the board's QNN version next
to the SDK the library was built with. With ``native_outputs`` the run writes
``<tensor>_native.raw``, checked against the types in the converter's _net.json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from qnn_ci.boards.session import board_session
from qnn_ci.engine.results import StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.errors import ToolError
from qnn_ci.stages import board_common

log = logging.getLogger(__name__)

BACKENDS = ("cpu", "htp")


class SoLoadStage(board_common.BoardStage):
    name = "so_load"
    needs = ("model_lib", "calibration", "convert")
    settings = ("board", "target", "native_outputs", "htp_config")
    route = "classic"

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.boards.netrun import run_on_board  # numpy: only when it runs
        from qnn_ci.boards.storage import storage_findings, work_root_filesystem
        from qnn_ci.transport.base import TransportError

        board = board_common.the_board(ctx)
        mismatch = board_common.soc_mismatch(ctx.export, board)
        if mismatch:
            return board_common.soc_mismatch_result(self.name, board, mismatch)
        lib, cal = ctx.upstream["model_lib"], ctx.upstream["calibration"]
        library = Path(lib.artefacts["library"])
        sdk_version = lib.data.get("sdk_version")
        names = list(cal.data["inputs"])
        native = ctx.export.native_outputs
        expected, type_findings = None, []
        if native:
            net_json = ctx.upstream["convert"].artefacts.get("net_json")
            _types, expected, type_findings = board_common.native_expectations(
                net_json, board_common.net_json_outputs(net_json))
        cpp = ctx.upstream["convert"].artefacts.get("cpp")
        config = board_common.htp_config_writer(
            ctx.export, board_common.export_soc(ctx.export, board), Path(cpp) if cpp else None)
        try:
            with board_session(board, ctx.env.environ) as transport:
                fs_type = work_root_filesystem(transport, board)
                nr = run_on_board(transport, board, library=library,
                                  input_list=Path(cal.artefacts["input_list"]),
                                  input_names=names, backends=BACKENDS, workdir=ctx.workdir,
                                  max_samples=1, library_sdk_version=sdk_version,
                                  native=native, expected_outputs=expected or None,
                                  htp_config=config)
        except (TransportError, ToolError) as exc:
            return board_common.board_error_result(self.name, board, exc)
        report = ctx.workdir / "so_load.json"
        report.write_text(json.dumps(nr.to_dict(), indent=2), encoding="utf-8")
        version = nr.board_version.version if nr.board_version else None
        error = first_error(nr.findings)
        summary = error or (
            f"{library.name} loaded and ran 1 inference on "
            f"{' and '.join(b.upper() for b in BACKENDS)} on board {board.name} "
            f"(board QNN {version or 'unknown'}, built with SDK {sdk_version or 'unknown'})")
        artefacts = {"report": str(report), "library": str(library)}
        for name, outcome in nr.backends.items():
            if outcome.log:
                artefacts[f"{name}_log"] = str(outcome.log)
        findings = type_findings + list(nr.findings) + storage_findings(board, fs_type)
        summary = first_error(findings) or summary
        properties = board_common.run_properties(nr) | {
            "work_root_fs": fs_type or "", "output_files": "native" if native else "float"}
        return board_common.finish(StageResult(
            self.name, status_of(findings), summary, findings,
            properties=properties,
            artefacts=artefacts,
            data={"board": board.name, "board_qnn_version": version,
                  "sdk_version": sdk_version, "library": str(library)}), nr)
