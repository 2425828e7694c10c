"""What the board stages (so_load, htp_vs_cpu, context_binary, context_run) share:
the skip reason, the board lookup, the SoC check, the HTP config writer, and
turning a board run into StageResult parts."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.boards.session import board_fingerprint, board_problem, resolve_board
from qnn_ci.engine.pipeline import NO_CACHE
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.tables import SocInfo, find_soc

if TYPE_CHECKING:   # numpy (via these) only when a board stage runs, not at load
    from qnn_ci.boards.native_outputs import NativeType
    from qnn_ci.boards.netrun import NetRunResult
    from qnn_ci.boards.result_files import ExpectedOutput
    from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

# Failures that say more about the board's state at that moment than about the
# export: never reused from the cache (see ``finish``).
TRANSIENT_CHECKS = frozenset({"board.unreachable", "board.locked", "board.timeout",
                              "board.disk_full"})


def unavailable(export: ExportSpec, env: Environment) -> str | None:
    return board_problem(export, env.boards, env.board_override)


def on_hub(export: ExportSpec, env: Environment | None) -> bool:
    """The export's board (here) is a Qualcomm AI Hub device (``transport: ai-hub``)."""
    from qnn_ci.transport.config import HUB

    if env is None or unavailable(export, env):
        return False
    return bool(the_board_of(export, env).transport == HUB)


def the_board_of(export: ExportSpec, env: Environment) -> BoardConfig:
    return resolve_board(export, env.boards, env.board_override)


def hub_unavailable(stage: Stage, export: ExportSpec, env: Environment) -> str | None:
    """Why ``stage`` does not run for ``export`` on its AI Hub board, else None."""
    from qnn_ci.hub.client import hub_problem
    from qnn_ci.hub.guard import fork_problem

    board = the_board_of(export, env)
    if not getattr(stage, "runs_on_hub", False):
        return (f"board {board.name} is an AI Hub board: {stage.name} runs qnn-net-run on a "
                "board with a shell; on AI Hub, context_binary compiles the model and "
                "context_run runs and profiles it")
    if export.route != "classic":
        return (f"board {board.name} is an AI Hub board: the {export.route} route's binary is "
                "built on the host for qnn-net-run on a board with a shell; for AI Hub use "
                "route: classic (AI Hub compiles the pinned model itself)")
    return hub_problem(board, env.environ) or fork_problem(env.environ)


def the_board(ctx: StageContext) -> BoardConfig:
    return the_board_of(ctx.export, ctx.env)


def fingerprint(ctx: StageContext) -> dict[str, Any]:
    if unavailable(ctx.export, ctx.env):
        return {}
    found = board_fingerprint(the_board(ctx))
    if on_hub(ctx.export, ctx.env):
        from qnn_ci.hub.options import compile_options, not_applied

        # What AI Hub is asked: the options (the export's bit widths among them); the
        # other quantization settings are not sent, but they are in the warning.
        board = the_board(ctx)
        found |= {"compile_options": compile_options(ctx.export, board.options, board.quantize),
                  "not_applied": not_applied(ctx.export, board.quantize)}
    return found


class BoardStage(Stage):
    """Base of the stages that run on a board: skipped without one, keyed by the
    board's identity, and a failure is never reused (the board may be fixed)."""

    marker = "qnn_board"
    cache_failures = False
    runs_on_hub: bool = False       # has an AI Hub half (context_binary, context_run)
    hub_needs: tuple[str, ...] = ()
    # with ``quantize: qnn-ci`` (the default): the QDQ model qnn-ci made
    QDQ_NEEDS: tuple[str, ...] = ("sim_npu",)

    def unavailable(self, export: ExportSpec, env: Environment) -> str | None:
        problem = unavailable(export, env)
        if problem is None and on_hub(export, env):
            return hub_unavailable(self, export, env)
        return problem

    def needs_for(self, export: ExportSpec, env: Environment | None = None
                  ) -> tuple[str, ...]:
        if not self.runs_on_hub:
            return self.needs
        if env is None:     # the boards are not known: an export with a board may be on AI Hub
            hub = (*self.hub_needs, *self.QDQ_NEEDS) if export.board else ()
            return tuple(dict.fromkeys((*self.board_needs(export), *hub)))
        if not on_hub(export, env):
            return self.board_needs(export)
        from qnn_ci.hub.options import QNN_CI

        qdq = self.QDQ_NEEDS if the_board_of(export, env).quantize == QNN_CI else ()
        return (*self.hub_needs, *qdq)

    def board_needs(self, export: ExportSpec) -> tuple[str, ...]:
        """The needs on a board with a shell."""
        return self.needs

    def possible_needs(self) -> tuple[str, ...]:
        hub = (*self.hub_needs, *self.QDQ_NEEDS) if self.runs_on_hub else ()
        return tuple(dict.fromkeys((*super().possible_needs(), *hub)))

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        return fingerprint(ctx)


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


def export_soc(export: ExportSpec, board: BoardConfig) -> SocInfo | None:
    """The SoC a board run is judged for: ``target.soc``, else the board's."""
    return find_soc(export.target.soc or board.soc or "")


def live_board_version(ctx: StageContext) -> str | None:
    """The board's QNN version, read from the board now (for a cache key that must
    change when the board's QNN does); "unreachable" when it cannot be read."""
    from qnn_ci.boards.netrun import SHORT_COMMAND_S
    from qnn_ci.boards.versions import read_board_version
    from qnn_ci.transport.base import TransportError
    from qnn_ci.transport.factory import open_transport

    board = the_board(ctx)
    try:
        transport = open_transport(board)
        try:
            found = read_board_version(transport, board,
                                       timeout=min(board.timeout_s, SHORT_COMMAND_S))
        finally:
            transport.close()
    except (TransportError, OSError) as exc:
        log.info("board %s: QNN version not read for the cache key: %s", board.name, exc)
        return "unreachable"
    return found.version or "unknown"


def soc_mismatch_result(stage: str, board: BoardConfig, message: str) -> StageResult:
    return StageResult(stage, Status.FAILED, message,
                       [Finding("board.soc_mismatch", message, subject=board.name)],
                       properties={"board": board.name, "board_soc": board.soc or ""})



def board_error_result(stage: str, board: BoardConfig, exc: Exception) -> StageResult:
    """A failed result for a board that could not be reached, stayed locked, or
    refused a file operation before qnn-net-run ran."""
    from qnn_ci.boards.lock import BoardLockedError
    from qnn_ci.transport.base import DiskFullError, TransportError

    text = str(exc)
    if isinstance(exc, BoardLockedError):
        check = "board.locked"
    elif isinstance(exc, TransportError):
        check = "board.unreachable"
        if not text.startswith(f"board {board.name}"):
            text = f"board {board.name} unreachable: {text}"
    else:
        check = "board.disk_full" if isinstance(exc, DiskFullError) else "board.error"
        if f"board {board.name}" not in text:
            text = f"board {board.name}: {text}"
    return finish(StageResult(stage, Status.FAILED, text,
                              [Finding(check, text, subject=board.name)],
                              properties={"board": board.name}))


def may_not_repeat(findings: list[Finding], nr: NetRunResult | None = None) -> bool:
    """The board was unreachable, locked or full, or qnn-net-run timed out or was
    killed (by a signal, or its connection dropped)."""
    if any(f.check in TRANSIENT_CHECKS and f.severity == Severity.ERROR for f in findings):
        return True
    return nr is not None and any(
        not o.ok and (o.timed_out or (o.exit_code is not None and o.exit_code < 0))
        for o in nr.backends.values())


def finish(result: StageResult, nr: NetRunResult | None = None) -> StageResult:
    """``result``, with ``data[NO_CACHE]`` set on a failure that may not repeat, so
    the engine never reuses it (whatever the stage's ``cache_failures``)."""
    if result.status == Status.FAILED and may_not_repeat(result.findings, nr):
        result.data[NO_CACHE] = True
    return result


def native_expectations(net_json: str | None, outputs: dict[str, int | None]
                        ) -> tuple[dict[str, NativeType], list[ExpectedOutput], list[Finding]]:
    """For ``native_outputs``: each output's native type from the converter's
    ``_net.json``, the expected native files (element counts from ``outputs``, graph
    output name -> count), and an error finding per output that cannot be read."""
    from qnn_ci.boards.native_outputs import native_types
    from qnn_ci.boards.result_files import ExpectedOutput
    from qnn_ci.compare.outputs import sanitize

    if not net_json or not Path(net_json).is_file():
        text = ("native_outputs: the converter's _net.json is missing (convert artefact "
                "net_json), so the native outputs' data types are unknown; compare float "
                "outputs instead (native_outputs: false)")
        return {}, [], [Finding("board.native_type", text)]
    types, findings = native_types(Path(net_json), list(outputs))
    expected = [ExpectedOutput(name, sanitize(name), count,
                               types[name].dtype.str if name in types else None)
                for name, count in outputs.items()]
    return types, expected, findings


def net_json_outputs(net_json: str | None) -> dict[str, int | None]:
    """Graph outputs (app-read tensors) of a _net.json and their element counts."""
    from qnn_ci.sdk.net_json import read_net_json

    if not net_json or not Path(net_json).is_file():
        return {}
    return {t.name: (math.prod(t.dims) if t.dims is not None else None)
            for t in read_net_json(Path(net_json)).tensors if t.type_code == 1}


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



def htp_config_writer(export: ExportSpec, soc: SocInfo | None,
                      cpp: Path | None) -> Callable[[Path, str], Path] | None:
    """``write(folder, inner remote path) -> wrapper`` for the export's ``htp_config``
    (None when it gives none: the SDK's defaults then apply). The graph names come
    from the converter's ``.cpp``."""
    if not export.htp_config.given:
        return None
    from qnn_ci.sdk.htp_config import graph_names_from_cpp

    graphs = graph_names_from_cpp(cpp) if cpp is not None and cpp.is_file() else []
    if not graphs:
        raise UserError("htp_config: the converter's .cpp names no graph, so the HTP config "
                        "cannot name it (the SDK would ignore it); rerun convert",
                        file=export.manifest, line=export.line, key="htp_config")
    return graphs_config_writer(export, soc, graphs)


def graphs_config_writer(export: ExportSpec, soc: SocInfo | None, graphs: list[str]
                         ) -> Callable[[Path, str], Path] | None:
    """``write(folder, inner remote path) -> wrapper`` for the export's ``htp_config``
    naming ``graphs``; None when the export gives no ``htp_config``."""
    if not export.htp_config.given:
        return None
    from qnn_ci.sdk.htp_config import write_htp_config

    def write(folder: Path, inner_remote: str) -> Path:
        return write_htp_config(export.htp_config, soc, graphs, folder,
                                inner_path_text=inner_remote)
    return write


def run_context(ctx: StageContext, stage: str, board: BoardConfig, binary: Path, *,
                input_list: Path, names: list[str], native: bool,
                expected: list[Any] | None,
                htp_config: Callable[[Path, str], Path] | None) -> NetRunResult | StageResult:
    """``qnn-net-run --retrieve_context <binary>`` on the HTP of ``board`` (locked), timed
    as the export asks; a board that cannot be reached, stays locked or is full is the
    stage's failed result instead."""
    from qnn_ci.boards.latency_run import request_for
    from qnn_ci.boards.netrun import run_on_board
    from qnn_ci.boards.session import board_session
    from qnn_ci.errors import ToolError
    from qnn_ci.transport.base import TransportError

    try:
        with board_session(board, ctx.env.environ) as transport:
            return run_on_board(transport, board, library=None, context=binary,
                                input_list=input_list, input_names=names, backends=("htp",),
                                workdir=ctx.workdir, native=native,
                                expected_outputs=expected or None,
                                latency=request_for(ctx.export, ctx.env), htp_config=htp_config)
    except (TransportError, ToolError) as exc:
        return board_error_result(stage, board, exc)


def context_latency(nr: NetRunResult, workdir: Path
                    ) -> tuple[dict[str, Any], float | None, Path | None]:
    """What a context-binary run measured: its ``latency.*`` properties plus
    ``load.init_ms`` (the profile's Init stats, where the viewer gives them), the load
    time in ms, and the profile file when the latency came from one."""
    from qnn_ci.boards.latency import init_ms

    props = nr.latency.properties() if nr.latency is not None else {}
    profile = workdir / "latency" / "profile.txt"
    load = init_ms(profile.read_text(encoding="utf-8", errors="replace")) \
        if profile.is_file() else None
    if load is not None:
        props["load.init_ms"] = round(load, 4)
    return props, load, profile if nr.latency is not None and profile.is_file() else None


MAX_CALIBRATION_SAMPLES = 8      # compared when no held-out samples exist


def board_samples(cal: StageResult, names: list[str]
                  ) -> tuple[str, list[Any], list[Finding]]:
    """The samples a board comparison runs: the calibration stage's held-out samples,
    else (with a warning) at most ``MAX_CALIBRATION_SAMPLES`` calibration samples.
    Returns (which: "held-out" | "calibration", the samples, findings)."""
    from qnn_ci.boards.netrun import select_samples

    held = cal.artefacts.get("held_out_list")
    if held and Path(held).is_file():
        _, samples = select_samples(Path(held), names, None)
        return "held-out", samples, []
    _, samples = select_samples(Path(cal.artefacts["input_list"]), names,
                                MAX_CALIBRATION_SAMPLES)
    return "calibration", samples, [Finding(
        "board.no_held_out", "no held-out samples: compared on calibration samples, "
        "which flatters the quantized model (keep some back: calibration.held_out)",
        Severity.WARNING)]
