"""Stage `dlc_context_binary` (route: dlc): build the context binary ON THE HOST from the
quantized DLC, for ``target.soc``:

``qnn-context-binary-generator --model <SDK>/lib/x86_64-linux-clang/libQnnModelDlc.so
--dlc_path <export>_q.dlc --backend <SDK>/lib/x86_64-linux-clang/libQnnHtp.so
--binary_file <export> --output_dir <stage>/ctx --config_file <wrapper>``.

The wrapper is always written (``qnn_ci.sdk.htp_config``): on the host the HTP config's
``devices`` entry is what names the SoC (``target.soc``); the manifest's ``htp_config``
graph settings name the graphs ``qairt-dlc-info`` names. When the dump names none and
graph settings are given, the name is read from a first build's binary (without them),
never guessed, and the final binary must hold that graph.

A failure is told apart as on a board (``qnn_ci.sdk.context_failures``: FP16 on v68 by
SIGABRT, VTCM overflow with both sizes, finalize err 1002, op refused 3110, ...), and
the binary is checked as the classic route's ``context_binary`` checks its own
(``qnn_ci.sdk.context_info.check_context``: SoC, arch, VTCM, graph I/O against the DLC's).
``dlc_fp16_gate`` gates it: an FP16 DLC on v68 is stopped before the generator aborts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.results import Finding, Severity, StageResult, first_error, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.errors import UserError
from qnn_ci.sdk.locate import CONTEXT_GENERATOR, HOST_LIB_DIR
from qnn_ci.stages import dlc_common
from qnn_ci.tables import DLC_MODEL_LIB, HTP_BACKEND_LIB, SocInfo, get_soc

if TYPE_CHECKING:
    from qnn_ci.sdk.context_info import ContextInfo, ExpectedTensor
    from qnn_ci.sdk.dlc_info import DlcInfo
    from qnn_ci.sdk.dlc_run import HostContext
    from qnn_ci.sdk.locate import Sdk


class DlcContextBinaryStage(dlc_common.DlcStage):
    name = "dlc_context_binary"
    needs = ("dlc_quantize",)
    gates = ("dlc_fp16_gate",)        # an FP16 DLC on v68 aborts: the gate already says why
    settings = ("target", "htp_config", "sdk")
    tools = (CONTEXT_GENERATOR,)
    libs = (DLC_MODEL_LIB, HTP_BACKEND_LIB)

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        from qnn_ci.stages.context_common import utility_stamp

        return super().fingerprint(ctx) | {"host_utility": utility_stamp(ctx)}

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.sdk.dlc_run import build_host_context
        from qnn_ci.sdk.model_lib import library_name
        from qnn_ci.stages.context_common import record_binary
        from qnn_ci.stages.sdk_common import mark_transient

        export = ctx.export
        soc = self._soc(ctx)
        sdk = self.sdk(ctx)
        for lib in self.libs:
            if not sdk.host_lib(lib).is_file():
                raise UserError(f"{lib} not found in {sdk.root / HOST_LIB_DIR}: the DLC route "
                                "builds context binaries with the SDK's host libraries; use "
                                "an SDK that ships them", file=export.manifest,
                                line=export.line, key="sdk.root")
        info = dlc_common.dlc_info_of(ctx)
        dlc = Path(ctx.upstream["dlc_quantize"].artefacts["dlc"])
        name = library_name(export.name)
        fp16 = [t.name for t in info.fp16_tensors()]
        findings: list[Finding] = []
        graphs = list(info.graph_names)
        if export.htp_config.graph_settings() and not graphs:
            learned = self._graph_names(ctx, sdk, dlc, name, soc, fp16)
            if isinstance(learned, StageResult):
                return learned
            graphs = learned
            findings.append(Finding("context.graph_names", f"qairt-dlc-info names no graph: "
                                    f"the HTP config names {', '.join(graphs)}, read from a "
                                    "first build's binary", Severity.INFO))
        config = _write_config(ctx, soc, graphs, ctx.workdir / "htp_config")
        built = build_host_context(sdk, dlc=dlc, name=name, workdir=ctx.workdir, config=config,
                                   soc=soc, fp16_tensors=fp16,
                                   vtcm_mb=export.htp_config.vtcm_mb,
                                   timeout=export.sdk.timeout_s)
        if built.finding is not None:
            findings.append(built.finding)
        properties: dict[str, Any] = {
            "built_on": "host", "generator.exit_code": "" if built.run.exit_code is None
            else built.run.exit_code, "generator.duration_s": round(built.run.duration_s, 3),
            "htp_config": "given" if export.htp_config.given else f"devices only ({soc.name})"}
        artefacts = {"log": str(built.run.log_path), "htp_config": str(config.parent)}
        data: dict[str, Any] = {"argv": built.argv, "soc": soc.name, "graphs": graphs}
        if built.binary is not None:
            read, found = _read_binary(ctx, sdk, built.binary, soc, info, graphs)
            findings += found
            record_binary(ctx.workdir, built.binary, read, artefacts=artefacts,
                          properties=properties, data=data)
        summary = first_error(findings) or _summary(built, data, soc)
        return mark_transient(dlc_common.with_sdk_version(StageResult(
            self.name, status_of(findings), summary, findings,
            properties=properties, artefacts=artefacts, data=data), sdk.version), built.run)

    def _soc(self, ctx: StageContext) -> SocInfo:
        export = ctx.export
        if not export.target.soc:
            raise UserError("target.soc is not set: the DLC route builds the context binary "
                            "on the host, for the SoC its HTP config names; set target.soc "
                            "(e.g. QCS6490)", file=export.manifest, line=export.line,
                            key="target.soc")
        return get_soc(export.target.soc, file=str(export.manifest), line=export.line,
                       key="target.soc")

    def _graph_names(self, ctx: StageContext, sdk: Sdk, dlc: Path, name: str, soc: SocInfo,
                     fp16: list[str]) -> list[str] | StageResult:
        """The graph names of a first binary built without the graph settings (the
        SoC's devices entry only), when qairt-dlc-info names none."""
        from qnn_ci.sdk.context_info import read_context_info
        from qnn_ci.sdk.dlc_run import build_host_context

        folder = ctx.workdir / "graph_name"
        config = _write_config(ctx, soc, [], folder / "htp_config", graph_settings=False)
        probe = build_host_context(sdk, dlc=dlc, name=name, workdir=folder, config=config,
                                   soc=soc, fp16_tensors=fp16, vtcm_mb=None,
                                   timeout=ctx.export.sdk.timeout_s)
        if probe.finding is not None or probe.binary is None:
            from qnn_ci.engine.results import Status
            from qnn_ci.stages.sdk_common import mark_transient

            text = (f"{probe.finding.message if probe.finding else 'no binary'} (a first "
                    "build without htp_config's graph settings, to learn the graph's name: "
                    "qairt-dlc-info names none)")
            check = probe.finding.check if probe.finding else "context.no_binary"
            return mark_transient(StageResult(
                self.name, Status.FAILED, text.splitlines()[0], [Finding(check, text)],
                artefacts={"log": str(probe.run.log_path)}), probe.run)
        try:
            names = [g.name for g in read_context_info(probe.binary).graphs if g.name]
        except UserError:
            names = []
        if not names:
            raise UserError("htp_config: neither qairt-dlc-info nor the context binary names "
                            "the graph, so the HTP config cannot name it (the SDK would "
                            "silently ignore its graph settings); remove vtcm_mb, O, "
                            "fp16_relaxed_precision, hvx_threads and dlbc",
                            file=ctx.export.manifest, line=ctx.export.line, key="htp_config")
        return names


def _write_config(ctx: StageContext, soc: SocInfo, graphs: list[str], folder: Path, *,
                  graph_settings: bool = True) -> Path:
    from qnn_ci.engine.spec import HtpConfigSpec
    from qnn_ci.sdk.htp_config import write_htp_config

    spec = ctx.export.htp_config if graph_settings else HtpConfigSpec()
    return write_htp_config(spec, soc, graphs, folder)


def expected_io(info: DlcInfo) -> list[ExpectedTensor]:
    """The DLC's graph inputs and outputs (names, data types, dims): what the binary
    must carry."""
    from qnn_ci.sdk.context_info import ExpectedTensor

    inputs = set(info.inputs)
    return [ExpectedTensor(t.name, t.data_type, t.dims, t.name in inputs)
            for t in info.io_tensors()]


def _aligned(expected: list[ExpectedTensor], read: ContextInfo) -> list[ExpectedTensor]:
    """The expected names as the binary spells them, where it holds only the
    converter's sanitised form of a name (qairt-dlc-info may print either)."""
    from dataclasses import replace

    from qnn_ci.compare.outputs import sanitize

    names = {t.name for g in read.graphs for t in [*g.inputs, *g.outputs]}
    out = []
    for e in expected:
        if e.name not in names and sanitize(e.name) != e.name and (
                sanitize(e.name) in names or (not names and read.mentions(sanitize(e.name)))):
            e = replace(e, name=sanitize(e.name))
        out.append(e)
    return out


def _read_binary(ctx: StageContext, sdk: Sdk, binary: Path, soc: SocInfo, info: DlcInfo,
                 graphs: list[str]) -> tuple[ContextInfo | None, list[Finding]]:
    from qnn_ci.sdk.context_info import (
        check_context,
        merge,
        read_context_info,
        run_context_utility,
    )

    try:
        read = read_context_info(binary)
    except UserError as exc:
        return None, [Finding("context.unreadable", f"{exc.oneline()}: the binary's SoC, "
                              "arch and I/O are not checked")]
    found: list[Finding] = []
    utility, problem = run_context_utility(sdk.root, binary, ctx.workdir,
                                           environ=ctx.env.environ)
    if problem:
        found.append(Finding("context.utility", problem, Severity.WARNING))
    read = merge(read, utility)
    found += check_context(read, soc=soc, expected=_aligned(expected_io(info), read),
                           runtime_qnn_version=None, subject=binary.name)
    have = {g.name for g in read.graphs}
    if ctx.export.htp_config.graph_settings() and have:
        missing = [g for g in graphs if g not in have]
        if missing:
            found.append(Finding(
                "context.graph_names", f"{binary.name} holds graph(s) {', '.join(sorted(have))}"
                f", but the HTP config named {', '.join(missing)}: its graph settings (htp_config) "
                "were ignored by the SDK", subject=binary.name))
    return read, found


def _summary(built: HostContext, data: dict[str, Any], soc: SocInfo) -> str:
    from qnn_ci.stages.context_common import describe_info

    if built.binary is None:
        return "no context binary"
    return (f"{built.binary.name} built on the host for {soc.name} in "
            f"{built.run.duration_s:.1f} s: {describe_info(data.get('context_info'))}")
