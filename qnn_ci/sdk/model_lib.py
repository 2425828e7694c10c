"""Run ``qnn-model-lib-generator`` for one explicit target and check the library.

The tool's ``-t`` list is fixed inside the tool and is not the eSDK's triple
(an eSDK with gcc 11.4 still needs ``aarch64-oe-linux-gcc11.2``). Its
``--help`` gives the list as one sentence wrapped over several lines, in any
order, then ``Default: [...]``. Without ``-t`` the tool builds its default
targets, none of which runs on an aarch64 Linux board, and exits 0 -- so a
target is always required and always passed. Exit 0 without the library is a
failure, and the library's ELF machine must match the target.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.errors import ToolError, UserError
from qnn_ci.sdk.locate import LIB_GENERATOR, Sdk
from qnn_ci.tables import LIB_GENERATOR_DEFAULT_TARGETS

if TYPE_CHECKING:   # running the tool and reading its library: when the stage runs
    from qnn_ci.sdk.elf import ElfHeader
    from qnn_ci.sdk.toolrun import ToolRun

log = logging.getLogger(__name__)

_SUPPORTED_RE = re.compile(r"Supported\s+targets\s*:?(?P<body>.*?)(?=Default\s*:|\n\s*\n|\Z)",
                           re.S | re.I)
_DEFAULT_RE = re.compile(r"Default\s*:\s*\[(?P<body>[^\]]*)\]", re.I)
_LIBRARY_LINE_RE = re.compile(r"Target:\s*(?P<target>\S+)\s+Library:\s*(?P<path>\S.*?)\s*$", re.M)
_TARGET_TOKEN_RE = re.compile(r"^[A-Za-z0-9][\w.+-]*$")


@dataclass
class LibTargets:
    """The library targets qnn-model-lib-generator says it supports, and its defaults."""

    supported: list[str]
    defaults: list[str] = field(default_factory=list)


def _join_wrapped(body: str) -> str:
    """Join help lines; a line ending in '-' was split at a hyphen by the wrapper."""
    out = ""
    for line in body.splitlines():
        piece = line.strip()
        if not piece:
            continue
        if out.endswith("-"):
            out += piece
        else:
            out += (" " if out else "") + piece
    return out


def parse_lib_targets(help_text: str) -> LibTargets:
    """Supported and default targets from ``qnn-model-lib-generator --help``."""
    supported: list[str] = []
    match = _SUPPORTED_RE.search(help_text)
    if match:
        # The sentence ends at a '.' followed by a space or the end (targets
        # contain dots, never ". ").
        sentence = re.split(r"\.(?:\s|$)", _join_wrapped(match.group("body")), maxsplit=1)[0]
        for token in re.split(r"[,\s]+", sentence):
            token = token.strip().rstrip(".")
            if token and _TARGET_TOKEN_RE.match(token) and token not in supported:
                supported.append(token)
    defaults: list[str] = []
    dmatch = _DEFAULT_RE.search(help_text)
    if dmatch:
        defaults = [t for t in re.split(r"[,\s'\"]+", _join_wrapped(dmatch.group("body"))) if t]
    return LibTargets(supported=supported, defaults=defaults)


def probe_lib_targets(sdk: Sdk, workdir: Path, *, timeout: float = 120.0) -> LibTargets:
    from qnn_ci.sdk.toolrun import run_tool

    run = run_tool([str(sdk.tool(LIB_GENERATOR)), "--help"], sdk=sdk, workdir=workdir,
                   log_name="lib-generator-help", timeout=timeout)
    targets = parse_lib_targets(run.output)
    if run.exit_code != 0 or not targets.supported:
        log.warning("could not read the supported targets from %s --help (exit %s); "
                    "the target is passed unchecked", LIB_GENERATOR, run.exit_code)
    return targets


def choose_target(export: ExportSpec, targets: LibTargets) -> str:
    """The export's ``target.lib_target``, checked against what the tool supports."""
    wanted = export.target.lib_target
    listed = ", ".join(targets.supported) if targets.supported else "(could not be read)"
    defaults = ", ".join(targets.defaults or LIB_GENERATOR_DEFAULT_TARGETS)
    if not wanted:
        raise UserError(
            f"is required: {LIB_GENERATOR} without -t builds its defaults ({defaults}), "
            f"which do not run on an aarch64 Linux board; set it to one of: {listed}",
            file=export.manifest, line=export.line, key="target.lib_target")
    if targets.supported and wanted not in targets.supported:
        nearest = difflib.get_close_matches(wanted, targets.supported, n=1, cutoff=0.0)
        hint = f" (nearest: {nearest[0]})" if nearest else ""
        raise UserError(
            f"{wanted!r} is not a target this SDK's {LIB_GENERATOR} supports{hint}; "
            f"supported: {listed}. The -t list is fixed inside the tool, not your eSDK's "
            f"triple: pick the nearest entry and confirm the library loads on the board",
            file=export.manifest, line=export.line, key="target.lib_target")
    return wanted


def needs_esdk(lib_target: str | None) -> bool:
    """Linux cross targets (``aarch64-oe-linux-*``, ``aarch64-ubuntu-*``) need the
    eSDK's toolchain; host (``x86_64-*``) targets do not, and Android targets
    (``*-android``) build with the Android NDK instead."""
    target = str(lib_target or "")
    return bool(target) and not target.startswith("x86_64") and not target.endswith("-android")


ANDROID_HINT = ("{target} builds with the Android NDK, not the Linux eSDK: set ANDROID_NDK_ROOT "
                "to an Android NDK (with ndk-build on PATH) in the runner's environment")


def board_target_warning(export: ExportSpec) -> str | None:
    """A warning when the export names a board or SoC but its lib_target builds a
    library that will not run on an aarch64 Linux board (Android or the host)."""
    target = export.target.lib_target or ""
    where = export.board or export.target.soc
    if not where:
        return None
    if target.endswith("-android"):
        built = "an Android library"
    elif target.startswith("x86_64"):
        built = "a library for the x86_64 host"
    else:
        return None
    return (f"lib_target {target} builds {built}: it will not run on an aarch64 Linux board "
            f"({where}); use the aarch64 Linux target nearest to the board's eSDK (e.g. "
            f"aarch64-oe-linux-gcc11.2) unless the board runs Android")


def library_name(export_name: str) -> str:
    name = re.sub(r"\W+", "_", export_name).strip("_")
    return name or "qnn_model"


@dataclass
class LibOutcome:
    """One qnn-model-lib-generator run for a target: the library built and what failed."""

    run: ToolRun
    target: str
    library: Path | None = None
    elf: ElfHeader | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def build_lib_argv(cpp: Path, bin_path: Path | None, out_dir: Path, target: str,
                   lib_name: str, tool: str | Path = LIB_GENERATOR) -> list[str]:
    argv = [str(tool), "-c", str(Path(cpp).resolve())]
    if bin_path is not None:
        argv += ["-b", str(Path(bin_path).resolve())]
    argv += ["-o", str(Path(out_dir).resolve()), "-t", target, "-l", lib_name]
    return argv


def build_model_lib(*, sdk: Sdk, cpp: Path, bin_path: Path | None, target: str, lib_name: str,
                    workdir: Path, timeout: float) -> LibOutcome:
    """Build ``lib<lib_name>.so`` for ``target`` under ``<workdir>/lib`` and check it."""
    from qnn_ci.sdk.elf import check_library, read_elf_header
    from qnn_ci.sdk.toolrun import run_tool

    workdir = Path(workdir).resolve()
    out_dir = workdir / "lib"
    if target in LIB_GENERATOR_DEFAULT_TARGETS and not target.startswith("x86_64"):
        log.info("building for %s, one of the tool's default targets: it runs on Android, "
                 "not on an aarch64 Linux board", target)
    argv = build_lib_argv(cpp, bin_path, out_dir, target, lib_name, sdk.tool(LIB_GENERATOR))
    run = run_tool(argv, sdk=sdk, workdir=workdir, log_name="model_lib", timeout=timeout,
                   need_esdk=needs_esdk(target))
    outcome = LibOutcome(run=run, target=target)
    if not run.ok:
        what = "timed out" if run.timed_out else "failed"
        if target.endswith("-android") and not run.timed_out:
            what += ": " + ANDROID_HINT.format(target=target)
        outcome.failures.append(f"{LIB_GENERATOR} {what}\n{run.describe()}")
        return outcome
    library = out_dir / target / f"lib{lib_name}.so"
    if not library.is_file():
        reported = [m.group("path") for m in _LIBRARY_LINE_RE.finditer(run.output)
                    if m.group("target") == target]
        elsewhere = f"; the tool reported {reported[-1]}" if reported else ""
        outcome.failures.append(
            f"{LIB_GENERATOR} exited 0 but {library} does not exist{elsewhere} (a relative "
            f"path or a cwd changed by the eSDK?)\n{run.describe()}")
        return outcome
    outcome.library = library
    try:
        outcome.elf = read_elf_header(library)
    except ToolError as exc:
        outcome.failures.append(str(exc))
        return outcome
    outcome.failures += [f"{library.name}: {p}" for p in check_library(outcome.elf, target)]
    return outcome
