"""What the board stages (so_load, htp_vs_cpu) share: the skip reason, the
board lookup, the SoC check, and turning a board run into StageResult parts."""

from __future__ import annotations

from typing import Any

from qnn_ci.boards.config import BoardConfig
from qnn_ci.boards.lock import BoardLockedError
from qnn_ci.boards.netrun import NetRunResult
from qnn_ci.boards.session import board_fingerprint, board_problem, resolve_board
from qnn_ci.results import Finding, Severity, StageResult, Status
from qnn_ci.spec import ExportSpec
from qnn_ci.stage import Environment, StageContext
from qnn_ci.tables import find_soc
from qnn_ci.transport.base import TransportError


def unavailable(export: ExportSpec, env: Environment) -> str | None:
    return board_problem(export, env.boards, env.board_override)


def the_board(ctx: StageContext) -> BoardConfig:
    return resolve_board(ctx.export, ctx.env.boards, ctx.env.board_override)


def fingerprint(ctx: StageContext) -> dict[str, Any]:
    if unavailable(ctx.export, ctx.env):
        return {}
    return board_fingerprint(the_board(ctx))


def _canonical_soc(name: str) -> str:
    soc = find_soc(name)
    return soc.name if soc is not None else name.strip().upper()


def soc_mismatch(export: ExportSpec, board: BoardConfig) -> str | None:
    """Why ``export`` must not run on ``board``: both name a SoC and they differ
    (aliases match: QCM6490 is a QCS6490). None when either is not set."""
    if not board.soc or not export.target.soc:
        return None
    if _canonical_soc(board.soc) == _canonical_soc(export.target.soc):
        return None
    return (f"board {board.name} is a {board.soc} but export {export.name} targets "
            f"{export.target.soc} (target.soc): a run there proves nothing about the "
            f"{export.target.soc}; use a {export.target.soc} board (board: or --qnn-board) "
            "or correct target.soc or the board's soc")


def soc_mismatch_result(stage: str, board: BoardConfig, message: str) -> StageResult:
    return StageResult(stage, Status.FAILED, message,
                       [Finding("board.soc_mismatch", message, subject=board.name)],
                       properties={"board": board.name, "board_soc": board.soc or ""})


def status_of(findings: list[Finding]) -> Status:
    return Status.FAILED if any(f.severity == Severity.ERROR for f in findings) \
        else Status.PASSED


def board_error_result(stage: str, board: BoardConfig, exc: Exception) -> StageResult:
    """A failed result for a board that could not be reached, stayed locked, or
    refused a file operation before qnn-net-run ran."""
    text = str(exc)
    if isinstance(exc, BoardLockedError):
        check = "board.locked"
    elif isinstance(exc, TransportError):
        check = "board.unreachable"
        if not text.startswith(f"board {board.name}"):
            text = f"board {board.name} unreachable: {text}"
    else:
        check = "board.error"
        if not text.startswith(f"board {board.name}"):
            text = f"board {board.name}: {text}"
    return StageResult(stage, Status.FAILED, text, [Finding(check, text, subject=board.name)],
                       properties={"board": board.name})


def run_properties(nr: NetRunResult) -> dict[str, Any]:
    """board, its QNN version, the library's SDK version, per-backend status."""
    props: dict[str, Any] = {
        "board": nr.board,
        "board_qnn_version": (nr.board_version.version if nr.board_version else None) or "",
        "sdk_version": nr.library_sdk_version or "",
        "samples": nr.samples,
    }
    for name, outcome in nr.backends.items():
        props[f"{name}.exit_code"] = "" if outcome.exit_code is None else outcome.exit_code
        props[f"{name}.duration_s"] = round(outcome.duration_s, 3)
    return props


def first_error(findings: list[Finding]) -> str | None:
    for f in findings:
        if f.severity == Severity.ERROR:
            return f.message
    return None
