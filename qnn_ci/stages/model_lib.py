"""Stage `model_lib`: ``qnn-model-lib-generator`` for the manifest's explicit
``target.lib_target`` (checked against the tool's own list), with the eSDK
sourced before the SDK for cross targets; the library must exist and its ELF
machine must match the target.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.sdk.locate import CONVERTER, LIB_GENERATOR, find_sdk, sdk_unavailable
from qnn_ci.sdk.model_lib import (
    board_target_warning,
    build_model_lib,
    choose_target,
    library_name,
    needs_esdk,
    probe_lib_targets,
)
from qnn_ci.stages.sdk_common import mark_transient, sdk_fingerprint

log = logging.getLogger(__name__)

TOOLS = (CONVERTER, LIB_GENERATOR)


class ModelLibStage(Stage):
    name = "model_lib"
    settings = ("board", "target", "sdk")
    needs = ("convert",)
    marker = "qnn_sdk"
    route = "classic"

    def unavailable(self, export: ExportSpec, env: Environment) -> str | None:
        # Skip only when no SDK (or, for a Linux cross target, no eSDK) is configured.
        return sdk_unavailable(export, env, need_esdk=needs_esdk(export.target.lib_target))

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        return sdk_fingerprint(ctx, tools=TOOLS,
                               need_esdk=needs_esdk(ctx.export.target.lib_target))

    def run(self, ctx: StageContext) -> StageResult:
        export = ctx.export
        sdk = find_sdk(export, ctx.env, tools=TOOLS,
                       need_esdk=needs_esdk(export.target.lib_target))
        targets = probe_lib_targets(sdk, ctx.workdir,
                                    timeout=min(export.sdk.timeout_s, 600))
        target = choose_target(export, targets)
        converted = ctx.upstream["convert"]
        cpp = Path(converted.artefacts["cpp"])
        bin_path = Path(converted.artefacts["bin"]) if converted.artefacts.get("bin") else None
        outcome = build_model_lib(sdk=sdk, cpp=cpp, bin_path=bin_path, target=target,
                                  lib_name=library_name(export.name), workdir=ctx.workdir,
                                  timeout=export.sdk.timeout_s)
        sdk_version = converted.data.get("sdk_version") or sdk.version
        artefacts = {"log": str(outcome.run.log_path)}
        if outcome.library is not None:
            artefacts["library"] = str(outcome.library)
        elf_machine = outcome.elf.machine if outcome.elf else None
        findings = [Finding("model_lib.failed", msg, Severity.ERROR, target)
                    for msg in outcome.failures]
        warning = board_target_warning(export)
        if warning:
            findings.append(Finding("model_lib.target", warning, Severity.WARNING, target))
        if outcome.ok:
            assert outcome.elf is not None and outcome.library is not None
            status = Status.PASSED
            summary = (f"{outcome.library.name} for {target}: {outcome.elf.describe()}")
        else:
            status = Status.FAILED
            summary = outcome.failures[0].splitlines()[0]
        return mark_transient(StageResult(
            self.name, status, summary, findings,
            properties={"target": target, "elf_machine": elf_machine or "",
                        "sdk_version": sdk_version or "",
                        "duration_s": round(outcome.run.duration_s, 3)},
            artefacts=artefacts,
            data={"target": target, "elf_machine": elf_machine, "sdk_version": sdk_version},
        ), outcome.run)
