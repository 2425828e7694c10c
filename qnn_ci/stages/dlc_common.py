"""What the DLC route's host stages (dlc_convert, dlc_quantize, dlc_contract,
dlc_fp16_gate, dlc_context_binary) share: the route, the SDK and its tools, each
tool's ``--help`` (read once per SDK, where it can be read), the cache fingerprint
that changes when the SDK does, and the DLC info ``dlc_quantize`` saved."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from qnn_ci.engine.results import Finding, Severity, StageResult
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.errors import ToolError, UserError
from qnn_ci.sdk.locate import DLC_CONVERTER, DLC_QUANTIZER, Sdk, find_sdk, sdk_unavailable
from qnn_ci.stages.sdk_common import cache_dir, file_stamp

if TYPE_CHECKING:   # the readers and help probes: when a stage runs
    from qnn_ci.sdk.converter_cmd import ConverterHelp
    from qnn_ci.sdk.dlc_info import DlcInfo

# The flag each tool's --help must list for the text to be that tool's help.
HELP_REQUIRES: dict[str, str] = {DLC_CONVERTER: "--input_network",
                                 DLC_QUANTIZER: "--input_dlc"}



class DlcStage(Stage):
    """Base of the DLC route's host stages: skipped only when no SDK is configured
    (a wrong one is an ERROR naming where it was configured), keyed by the SDK."""

    marker = "qnn_sdk"
    route = "dlc"
    tools: ClassVar[tuple[str, ...]] = ()        # under bin/x86_64-linux-clang
    libs: ClassVar[tuple[str, ...]] = ()         # under lib/x86_64-linux-clang

    def unavailable(self, export: ExportSpec, env: Environment) -> str | None:
        return sdk_unavailable(export, env)

    def sdk(self, ctx: StageContext) -> Sdk:
        """The SDK, with this stage's tools (one line naming the route when an SDK that
        is fine for the classic route lacks them)."""
        sdk = find_sdk(ctx.export, ctx.env, tools=())
        missing = [t for t in self.tools if not sdk.tool(t).is_file()]
        if missing:
            export = ctx.export
            raise UserError(f"{sdk.describe()} has no {missing[0]} in {sdk.tools_dir}: the "
                            "DLC route needs an SDK that ships the DLC tools (qairt-converter, "
                            "qairt-quantizer, qairt-dlc-info); use such an SDK or route: "
                            "classic", file=export.manifest, line=export.line, key="route")
        return sdk

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        sdk = self.sdk(ctx)
        fp: dict[str, Any] = {"sdk_root": str(sdk.root), "sdk_version": sdk.version,
                              "tools": {t: file_stamp(sdk.tool(t)) for t in self.tools},
                              "libs": {n: file_stamp(sdk.host_lib(n)) for n in self.libs}}
        for tool in self.tools:
            if tool in HELP_REQUIRES:
                help_, _ = tool_help(ctx, sdk, tool)
                fp[f"{tool}_help"] = help_.help_hash if help_ is not None else "unreadable"
        return fp


def tool_help(ctx: StageContext, sdk: Sdk, tool: str, stage: str = "dlc"
              ) -> tuple[ConverterHelp | None, Finding | None]:
    """The flags ``tool`` lists (None when its ``--help`` cannot be read: the newest
    spellings are passed then, with a warning saying so)."""
    from qnn_ci.sdk.converter_cmd import probe_help

    try:
        help_ = probe_help(sdk, tool, cache_dir(ctx.env), required=HELP_REQUIRES[tool],
                           timeout=min(ctx.export.sdk.timeout_s, 600))
    except ToolError as exc:
        first = str(exc).splitlines()[0]
        return None, Finding(f"{stage}.help", f"{first}: its flags are not checked "
                             "before it runs; the newest spellings are passed", Severity.WARNING,
                             subject=tool)
    if sdk.version is None and help_.version:
        sdk.version = help_.version
    return help_, None


def dlc_info_of(ctx: StageContext) -> DlcInfo:
    """The DLC info ``dlc_quantize`` saved (one UserError line when it is missing)."""
    from qnn_ci.sdk.dlc_info import read_dlc_info

    quantize = ctx.upstream["dlc_quantize"]
    path = quantize.artefacts.get("dlc_info")
    if not path:
        raise UserError("dlc_quantize left no qairt-dlc-info output; rerun it",
                        file=ctx.export.manifest, line=ctx.export.line,
                        key=f"exports.{ctx.export.name}")
    return read_dlc_info(Path(path))


def notes(stage: str, texts: list[str], severity: Severity) -> list[Finding]:
    return [Finding(f"{stage}.note" if severity == Severity.INFO else f"{stage}.not_expressed",
                    t, severity) for t in texts]




def with_sdk_version(result: StageResult, version: str | None) -> StageResult:
    result.properties.setdefault("sdk_version", version or "")
    result.data.setdefault("sdk_version", version)
    return result
