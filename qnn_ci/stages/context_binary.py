"""Stage `context_binary`: build the context binary ON the board from ``libmodel.so``
(the artefact production applications load), pull it back, and check what it says
it is.

``qnn-context-binary-generator`` runs on the board with the board's own QNN
libraries (``qnn_ci.boards.context_build``), with the export's ``htp_config`` when
it gives one (the wrapper and the inner file are written for the board's run
folder, graph names read from the converter's ``.cpp``). A failure is classified:
FP16 op on v68 (SIGABRT, the FP16 tensors named), VTCM overflow (both sizes), graph
finalize failure, an op the HTP refuses (3110), anything else with the tool's lines.

The binary's own bytes (and, when the host SDK has ``qnn-context-binary-utility``,
its JSON) say which SoC / HTP arch / VTCM it was built for, which QNN built it, and
its graphs' I/O: checked against ``target.soc``, the converter's graph I/O (names,
types, dims from the ``_net.json``) and the board's runtime (a binary newer than
the runtime is named before the load fails with error 5000).

Cached by the library's content, the HTP config and the board's QNN version (read
from the board when the cache key is made).

On an AI Hub board (``transport: ai-hub``) AI Hub compiles the pinned model instead:
``context_binary_hub``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.errors import ToolError, UserError
from qnn_ci.stages import board_common
from qnn_ci.stages.context_common import (
    describe_info,
    record_binary,
    sha256_of,
    utility_stamp,
)
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)


class ContextBinaryStage(board_common.BoardStage):
    name = "context_binary"
    needs = ("model_lib", "convert")
    gates = ("fp16_gate",)          # an FP16 graph on v68 aborts: the gate already says why
    # an AI Hub board: AI Hub compiles the pinned model, calibrated on the samples
    hub_needs = ("static_shapes", "calibration")
    runs_on_hub = True
    settings = ("board", "target", "htp_config")
    route = "classic"

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        found = board_common.fingerprint(ctx)
        if not found or board_common.on_hub(ctx.export, ctx.env):
            return found
        library = ctx.upstream["model_lib"].artefacts.get("library")
        found["library_sha256"] = sha256_of(Path(library)) if library else None
        found["board_qnn_version"] = board_common.live_board_version(ctx)
        found["host_utility"] = utility_stamp(ctx)     # what reads the binary back
        return found

    def run(self, ctx: StageContext) -> StageResult:
        if board_common.on_hub(ctx.export, ctx.env):
            from qnn_ci.stages.context_binary_hub import run_compile

            return run_compile(self.name, ctx)
        from qnn_ci.boards.context_build import build_context
        from qnn_ci.boards.session import board_session
        from qnn_ci.transport.base import TransportError

        export, board = ctx.export, board_common.the_board(ctx)
        mismatch = board_common.soc_mismatch(export, board)
        if mismatch:
            return board_common.soc_mismatch_result(self.name, board, mismatch)
        lib, convert = ctx.upstream["model_lib"], ctx.upstream["convert"]
        library = Path(lib.artefacts["library"])
        soc = board_common.export_soc(export, board)
        cpp = convert.artefacts.get("cpp")
        config = board_common.htp_config_writer(export, soc, Path(cpp) if cpp else None)
        try:
            with board_session(board, ctx.env.environ) as transport:
                built = build_context(
                    transport, board, library=library, binary_name=export.name,
                    workdir=ctx.workdir, soc=soc, fp16_tensors=fp16_tensors(convert),
                    vtcm_mb=export.htp_config.vtcm_mb, htp_config=config)
        except (TransportError, ToolError) as exc:
            return board_common.board_error_result(self.name, board, exc)
        findings = list(built.findings)
        version = built.board_version.version if built.board_version else None
        artefacts = {"log": str(built.log)} if built.log else {}
        properties: dict[str, Any] = {
            "board": board.name, "board_qnn_version": version or "",
            "generator.exit_code": "" if built.exit_code is None else built.exit_code,
            "generator.duration_s": round(built.duration_s, 3),
            "htp_config": "given" if export.htp_config.given else "SDK defaults"}
        data: dict[str, Any] = {"build": built.to_dict(), "board": board.name,
                                "board_qnn_version": version}
        summary = first_error(findings)
        if built.binary is not None:
            info, found = _read_binary(ctx, built.binary, soc, version)
            findings += found
            record_binary(ctx.workdir, built.binary, info, artefacts=artefacts,
                          properties=properties, data=data)
            summary = first_error(findings) or (
                f"{built.binary.name} built on board {board.name} (QNN {version or 'unknown'}"
                f") in {built.duration_s:.1f} s: {describe_info(data.get('context_info'))}")
        if config is not None and (ctx.workdir / "htp_config").is_dir():
            artefacts["htp_config"] = str(ctx.workdir / "htp_config")
        return board_common.finish(StageResult(
            self.name, status_of(findings), summary or "no context binary",
            findings, properties=properties, artefacts=artefacts, data=data))


def fp16_tensors(convert: StageResult) -> list[str]:
    """The FP16 tensors of the converter's output (the generated source), for the
    message of an FP16 abort; [] when it cannot be read."""
    from qnn_ci.sdk.fp16_audit import audit_fp16

    cpp = convert.artefacts.get("cpp")
    if not cpp or not Path(cpp).is_file():
        return []
    try:
        return sorted(audit_fp16(Path(cpp)).tensors)
    except UserError:
        return []


def expected_io(ctx: StageContext) -> list[Any]:
    """The graph's inputs and outputs as the converter wrote them (``_net.json``:
    QNN names, data types, dims): what the binary must carry."""
    from qnn_ci.sdk.context_info import ExpectedTensor
    from qnn_ci.sdk.net_json import read_net_json

    net_json = ctx.upstream["convert"].artefacts.get("net_json")
    if not net_json or not Path(net_json).is_file():
        return []
    try:
        tensors = read_net_json(Path(net_json)).tensors
    except UserError:
        return []
    return [ExpectedTensor(t.name, t.data_type, tuple(t.dims) if t.dims else None,
                           t.type_code == 0)
            for t in tensors if t.type_code in (0, 1)]


def _read_binary(ctx: StageContext, binary: Path, soc: SocInfo | None,
                 runtime: str | None) -> tuple[Any, list[Finding]]:
    from qnn_ci.sdk.context_info import check_context, merge, read_context_info, run_context_utility
    from qnn_ci.sdk.locate import sdk_root_for

    try:
        info = read_context_info(binary)
    except UserError as exc:
        return None, [Finding("context.unreadable", f"{exc.oneline()}: the binary's SoC, "
                              "arch and I/O are not checked", Severity.ERROR)]
    found: list[Finding] = []
    utility, problem = run_context_utility(sdk_root_for(ctx.export, ctx.env), binary,
                                           ctx.workdir, environ=ctx.env.environ)
    if problem:
        found.append(Finding("context.utility", problem, Severity.WARNING))
    info = merge(info, utility)
    found += check_context(info, soc=soc, expected=expected_io(ctx),
                           runtime_qnn_version=runtime, subject=binary.name)
    return info, found
