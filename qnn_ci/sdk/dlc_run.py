"""Run the DLC route's host tools and tell their failures apart.

- ``run_dlc_step``: ``qairt-converter`` / ``qairt-quantizer`` (the command from
  ``qnn_ci.sdk.dlc_cmd``): an op without a translation names the node and op, a flag
  the tool's era does not know names the flag and its manifest key, anything else
  gives the command and the log's last lines; exit 0 without the DLC is a failure too.
- ``run_dlc_info``: ``qairt-dlc-info -i <dlc>``, its output kept as a text file (what
  ``dlc_contract``, ``dlc_fp16_gate``, ``dlc_context_binary`` and ``context_run`` read).
- ``build_host_context``: ``qnn-context-binary-generator --model <SDK host
  lib>/libQnnModelDlc.so --dlc_path <dlc> --backend <SDK host lib>/libQnnHtp.so
  --binary_file <name> --output_dir <workdir>/ctx --config_file <wrapper>`` on the
  host, its failure classified as on a board (``qnn_ci.sdk.context_failures``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.sdk.context_failures import classify_generator
from qnn_ci.sdk.convert import explain_failure
from qnn_ci.sdk.dlc_cmd import unknown_flag_text, unknown_flags
from qnn_ci.sdk.locate import CONTEXT_GENERATOR, DLC_INFO, Sdk
from qnn_ci.sdk.toolrun import ToolRun, run_tool
from qnn_ci.tables import DLC_MODEL_LIB, HTP_BACKEND_LIB, SocInfo
from qnn_ci.transport.base import CommandResult
from qnn_ci.util.workfolder import open_new

log = logging.getLogger(__name__)

INFO_TIMEOUT_S = 600.0


@dataclass
class DlcStep:
    """One converter or quantizer run: the DLC it wrote, or why it failed."""

    run: ToolRun
    output: Path | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.output is not None and not any(
            f.severity == Severity.ERROR for f in self.findings)


def run_dlc_step(argv: list[str], *, sdk: Sdk, tool: str, stage: str, workdir: Path,
                 out_dlc: Path, timeout: float, model: Path | None = None,
                 help_read: bool = True) -> DlcStep:
    """Run ``argv`` (``tool``'s command for ``stage``) and check it wrote ``out_dlc``."""
    run = run_tool(argv, sdk=sdk, workdir=workdir, log_name=stage, timeout=timeout)
    step = DlcStep(run)
    if not run.ok:
        refused = unknown_flags(run.output) if not run.timed_out else []
        if refused:
            step.findings.append(Finding(
                f"{stage}.unknown_flag", unknown_flag_text(tool, refused, sdk.version,
                                                           help_read), subject=refused[0]))
            return step
        message, node, op = explain_failure(run, model, tool=tool)
        check = f"{stage}.unsupported_op" if op else f"{stage}.failed"
        step.findings.append(Finding(check, message, subject=node or op))
        return step
    if not Path(out_dlc).is_file():
        step.findings.append(Finding(
            f"{stage}.no_dlc", f"{tool} exited 0 but wrote no {Path(out_dlc).name} (expected "
            f"{out_dlc}); see its log {run.log_path}"))
        return step
    step.output = Path(out_dlc)
    return step


def run_dlc_info(sdk: Sdk, dlc: Path, workdir: Path, *, timeout: float = INFO_TIMEOUT_S
                 ) -> tuple[Path | None, ToolRun]:
    """``qairt-dlc-info -i <dlc>``; its output saved as ``<dlc stem>_info.txt`` (None
    when the tool failed)."""
    run = run_tool([str(sdk.tool(DLC_INFO)), "-i", str(Path(dlc).resolve())], sdk=sdk,
                   workdir=workdir, log_name="dlc_info", timeout=min(timeout, INFO_TIMEOUT_S))
    if not run.ok:
        return None, run
    text = Path(workdir) / f"{Path(dlc).stem}_info.txt"
    with open_new(text) as fh:
        fh.write(run.output.encode("utf-8"))
    return text, run


@dataclass
class HostContext:
    """One host generator run: the binary (None when it failed) and the finding."""

    run: ToolRun
    argv: list[str]
    binary: Path | None = None
    finding: Finding | None = None


def generator_argv(sdk: Sdk, dlc: Path, name: str, out_dir: Path,
                   config: Path | None) -> list[str]:
    argv = [str(sdk.tool(CONTEXT_GENERATOR)), "--model", str(sdk.host_lib(DLC_MODEL_LIB)),
            "--dlc_path", str(Path(dlc).resolve()), "--backend",
            str(sdk.host_lib(HTP_BACKEND_LIB)), "--binary_file", name,
            "--output_dir", str(Path(out_dir).resolve())]
    return argv + (["--config_file", str(Path(config).resolve())] if config else [])


def as_command_result(run: ToolRun) -> CommandResult:
    """A host run as the classifier reads a board's: a death by signal N as a shell
    reports it (128 + N)."""
    code = run.exit_code
    if code is None:
        code = -1
    elif code < 0:
        code = 128 - code
    return CommandResult(list(run.argv), code, run.output, "", run.timed_out, run.duration_s)


def build_host_context(sdk: Sdk, *, dlc: Path, name: str, workdir: Path,
                       config: Path | None, soc: SocInfo | None,
                       fp16_tensors: Sequence[str], vtcm_mb: int | None,
                       timeout: float) -> HostContext:
    """Run the generator on the host for ``dlc``; ``<workdir>/ctx/<name>.bin``."""
    out_dir = Path(workdir) / "ctx"
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = generator_argv(sdk, dlc, name, out_dir, config)
    run = run_tool(argv, sdk=sdk, workdir=workdir, log_name="context_binary", timeout=timeout)
    built = HostContext(run, argv)
    built.finding = classify_generator(
        as_command_result(run), board=None, generator=str(sdk.tool(CONTEXT_GENERATOR)),
        soc=soc, fp16_tensors=fp16_tensors, vtcm_mb=vtcm_mb, timeout=timeout,
        fp16_source="the DLC")
    if built.finding is not None:
        return built
    binary = out_dir / f"{name}.bin"
    if not binary.is_file():
        built.finding = Finding("context.no_binary", f"{CONTEXT_GENERATOR} on the host exited "
                                f"0 but wrote no {binary.name} in {out_dir}; see its log "
                                f"{run.log_path}", subject="host")
        return built
    built.binary = binary
    return built
