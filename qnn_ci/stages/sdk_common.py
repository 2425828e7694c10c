"""What the QAIRT SDK stages (dry_run, convert, model_lib) share: finding the
SDK, the converter's flag set (probed once per SDK), and the cache fingerprint
that changes when the SDK does."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.pipeline import NO_CACHE
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.errors import ToolError
from qnn_ci.sdk.locate import CONVERTER, Sdk, find_sdk, sdk_unavailable
from qnn_ci.util.workfolder import refuse_links

if TYPE_CHECKING:   # the converter's help probe and tool runs: when a stage runs
    from qnn_ci.sdk.converter_cmd import ConverterHelp
    from qnn_ci.sdk.toolrun import ToolRun

log = logging.getLogger(__name__)

CACHE_SUBDIR = Path(".cache") / "sdk"


def cache_dir(env: Environment) -> Path:
    """Shared per-run cache folder for SDK probes (``<workdir>/.cache/sdk``); a
    symbolic link on the way is a ``UserError`` (``qnn_ci.util.workfolder``)."""
    root = Path(env.workdir).resolve()
    path = root / CACHE_SUBDIR
    refuse_links(root, path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def converter_help(ctx: StageContext, sdk: Sdk) -> ConverterHelp:
    from qnn_ci.sdk.converter_cmd import probe_converter

    help_ = probe_converter(sdk, cache_dir(ctx.env), timeout=min(ctx.export.sdk.timeout_s, 600))
    if sdk.version is None and help_.version:
        sdk.version = help_.version
    return help_


def file_stamp(path: Path) -> str:
    """A tool's identity in a cache key: size and mtime, or 'missing'."""
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}"


def sdk_fingerprint(ctx: StageContext, *, tools: tuple[str, ...] = (CONVERTER,),
                    need_esdk: bool = False) -> dict[str, Any]:
    """SDK root + version + the converter's flag set and help hash (+ tool stamps)."""
    sdk = find_sdk(ctx.export, ctx.env, tools=tools, need_esdk=need_esdk)
    fp: dict[str, Any] = {"sdk_root": str(sdk.root),
                          "tools": {t: file_stamp(sdk.tool(t)) for t in tools}}
    try:
        help_ = converter_help(ctx, sdk)
        fp["converter_help"] = help_.help_hash
        fp["converter_flags"] = sorted(help_.flags)
    except ToolError as exc:
        fp["converter_probe_error"] = str(exc)
    fp["sdk_version"] = sdk.version
    if need_esdk and sdk.esdk_env is not None:
        fp["esdk_env"] = {"path": str(sdk.esdk_env), "stamp": file_stamp(sdk.esdk_env)}
    return fp


def tool_failure(stage: str, exc: ToolError, check: str) -> StageResult:
    """A FAILED result for an SDK tool that could not even be probed."""
    from qnn_ci.sdk.toolrun import ToolRunError

    text = str(exc)
    result = StageResult(stage, Status.FAILED, text.splitlines()[0],
                         [Finding(check, text, Severity.ERROR)])
    return mark_transient(result, exc.run if isinstance(exc, ToolRunError) else None)


def mark_transient(result: StageResult, run: ToolRun | None) -> StageResult:
    """A failure caused by a timeout or a signal may not repeat: the engine must
    not reuse it from its cache (``NO_CACHE``), the next run tries again."""
    if result.status == Status.FAILED and run is not None and run.transient:
        result.data[NO_CACHE] = True
    return result


class ConverterStage(Stage):
    """Base of the stages that run qnn-onnx-converter (dry_run, convert)."""

    marker = "qnn_sdk"
    route = "classic"

    def unavailable(self, export: ExportSpec, env: Environment) -> str | None:
        # Skip only when no SDK is configured; a wrong one is an ERROR (find_sdk).
        return sdk_unavailable(export, env)

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        return sdk_fingerprint(ctx)

    def prepare(self, ctx: StageContext) -> tuple[Sdk, ConverterHelp, Path] | StageResult:
        """The SDK, the flags its converter accepts and the pinned model; a FAILED
        result when the converter cannot even be probed."""
        sdk = find_sdk(ctx.export, ctx.env)
        try:
            help_ = converter_help(ctx, sdk)
        except ToolError as exc:
            return tool_failure(self.name, exc, f"{self.name}.tool")
        return sdk, help_, Path(ctx.upstream["static_shapes"].artefacts["model"])
