"""The stage contract: typed inputs in, a typed ``StageResult`` out, artefacts
in the stage's own work folder. No hidden globals: everything a stage may use
is in its ``StageContext``.

A stage module under ``qnn_ci.stages`` defines one subclass of ``Stage``, named in
``STAGE_ORDER``; ``qnn_ci.stages.registry`` finds it, and the shells hand the
stages to the engine (``qnn_ci.engine.pipeline``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from qnn_ci.engine.results import StageResult
from qnn_ci.engine.spec import ExportSpec

# Every stage, in the order the pipeline runs them (the modules: qnn_ci.stages.registry).
STAGE_ORDER: tuple[str, ...] = (
    "static_shapes", "calibration", "matches_original", "encodings", "sim_npu",
    "sim_numerics", "dry_run", "convert", "contract", "fp16_gate", "model_lib", "so_load",
    "htp_vs_cpu", "context_binary", "dlc_convert", "dlc_quantize", "dlc_contract",
    "dlc_fp16_gate", "dlc_context_binary", "context_run", "regression",
)


@dataclass(frozen=True)
class Environment:
    """What this run has at its disposal, resolved once per run."""

    workdir: Path                                   # root of all work folders
    sdk_root: Path | None = None                    # --qnn-sdk-root / $QNN_SDK_ROOT (manifest wins)
    esdk_env: Path | None = None                    # $ESDK_ENV
    boards: dict[str, Any] = field(default_factory=dict)  # name -> board config (qnn_ci.boards)
    board_override: str | None = None               # --qnn-board
    use_cache: bool = True
    run_token: str = ""                             # shared by xdist workers of one run
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    # ^ where a long stage's progress lines go (the shell decides: stderr, or nothing)

    def export_dir(self, export: str) -> Path:
        return self.workdir / export


@dataclass
class StageContext:
    """What a stage run gets: its export, environment, work folder and upstream results."""

    export: ExportSpec
    env: Environment
    workdir: Path                                   # <workdir>/<export>/<stage>/, exists
    upstream: dict[str, StageResult]                # results of the stages in `needs`
    all_exports: dict[str, ExportSpec] = field(default_factory=dict)  # for `from:` chains
    peer_results: dict[str, dict[str, StageResult]] = field(default_factory=dict)
    # ^ other exports' results this stage depends on, e.g. {"det": {"calibration": ...}}


class Stage:
    """Base class. Subclasses set the class attributes and implement ``run``."""

    name: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ()           # upstream stages of the same export
    marker: ClassVar[str | None] = None             # "qnn_sdk" | "qnn_board" | "qnn_sim"
    version: ClassVar[int] = 1                      # bump to invalidate cached results
    cache_failures: ClassVar[bool] = True           # False for flaky resources (boards)
    # True when a skip from run() depends only on what the cache key covers (so a
    # cached run need not run the stage, nor take its lock, to skip it again)
    cache_skips: ClassVar[bool] = False
    peer_needs: ClassVar[tuple[str, ...]] = ()      # stages of the exports named by peers()
    gates: ClassVar[tuple[str, ...]] = ()
    # ^ stages of the same export that must not have failed (when planned) for this one
    #   to run; unlike needs, not inputs: their results are not part of the cache key
    reads: ClassVar[tuple[str, ...]] = ()
    # ^ stages of the same export whose results this one reads whatever their status
    #   (when planned; in ctx.upstream): they never block it (the regression check)
    settings: ClassVar[tuple[str, ...] | None] = None
    # ^ the ExportSpec fields the stage reads (its cache key); None: all of them
    route: ClassVar[str | None] = None
    # ^ the one ``ExportSpec.route`` the stage belongs to ("classic" | "dlc"); None:
    #   shared by both routes (docs/dlc-route.md)

    def applies(self, export: ExportSpec) -> bool:
        """False when the stage has nothing to do for this export (no item is made):
        a stage of the other route. An override calls this too."""
        return self.route is None or self.route == export.route

    def needs_for(self, export: ExportSpec, env: Environment | None = None
                  ) -> tuple[str, ...]:
        """The upstream stages of ``export`` this stage needs: ``needs``, unless they
        differ by export (``context_run`` reads another binary on each route) or by
        the board it runs on (an AI Hub board compiles from the pinned model). The
        engine reads needs only through this (planning, blocked-by, cache keys).
        ``env`` None: before the run's boards are known; a stage whose needs depend
        on them gives every need it may have."""
        return self.needs

    def possible_needs(self) -> tuple[str, ...]:
        """Every stage ``needs_for`` may name for some export (what a run of only
        some stages must load before any export is known)."""
        return self.needs

    def unavailable(self, export: ExportSpec, env: Environment) -> str | None:
        """A precise reason to skip (missing SDK, board, package), else None."""
        return None

    def peers(self, export: ExportSpec) -> tuple[str, ...]:
        """Other exports of the manifest whose ``peer_needs`` stages this stage reads
        (e.g. the upstream of a calibration ``from:`` chain)."""
        return ()

    def settled(self, ctx: StageContext) -> StageResult | None:
        """A result that follows from the export's settings and ``ctx.upstream`` alone
        (no file, tool or cache is read), known before a fingerprint or a cache key is
        made; None to go on. Not cached: finding it again costs nothing."""
        return None

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        """Extra inputs to the cache key beyond the export's settings and the
        upstream results: file hashes, tool versions, flags."""
        return {}

    def run(self, ctx: StageContext) -> StageResult:
        raise NotImplementedError
