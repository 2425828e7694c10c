"""Tell ``qnn-context-binary-generator`` failures apart (formats page, sections 4 and 8),
wherever it ran: on a board (the classic route's ``context_binary``) or on the host
(the DLC route's ``dlc_context_binary``).

Each class is one line that says what failed, in the tool's own words where it
gave any, and what to do:

- ``context.fp16_abort``: killed by SIGABRT (exit 134; over SSH a death by signal
  with no status) on an HTP without FP16 — what an FP16 op does on v68. The FP16
  tensors of the converter's output are named.
- ``context.abort``: the same death where FP16 does not explain it.
- ``context.vtcm_overflow``: ``Requires 0x… bytes of TCM, which is greater than the
  TCM size of 0x…``: the VTCM asked for and the VTCM allowed.
- ``context.finalize``: ``Failed to finalize graph … err 1002`` / ``Graph Finalize
  failure`` / ``RouterHexagon graph prepare failed`` without a TCM line.
- ``context.op_refused``: ``validateOpConfig`` / op validator ``3110``: the op named
  where the tool names it.
- ``context.serialize``: ``Failed to get serialized binary`` / ``0x7532`` (seen with
  FP16 on SM8450).
- ``context.timeout``, ``context.generator_missing``, ``context.generator_failed``
  (anything else, with the tool's lines).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.tables import SocInfo
from qnn_ci.transport.base import CommandResult
from qnn_ci.util.listing import shown

SIGABRT_STATUS = 134            # 128 + SIGABRT, as a shell or adbd reports it
_TCM = re.compile(r"Requires\s+(0x[0-9a-fA-F]+|\d+)\s+bytes of TCM, which is greater than "
                  r"the TCM size of\s+(0x[0-9a-fA-F]+|\d+)")
_FINALIZE = re.compile(r"Failed to finalize graph[^\n]*?err(?:or)?\s*:?\s*(\d+)|"
                       r"Graph Finalize failure|RouterHexagon graph prepare failed|"
                       r"Context binary size calculation failed")
_OP_REFUSED = re.compile(r"validateOpConfig|op validator|validateNativeOps|\b3110\b")
_OP_NAME = re.compile(
    r"(?:validateNativeOps|[Nn]ode|[Oo]p(?:eration)?(?: name)?)\s*[:=]?\s*['\"]?"
    r"([A-Za-z_/][\w./:-]*)['\"]?")
_NOT_NAMES = {"validator", "config", "configs", "package", "failed", "validation", "type"}
_SERIALIZE = re.compile(r"Failed to get serialized binary|\b0x7532\b")
_DROPPED = "[qnn-ci] connection to board"
_ERROR_LINE = re.compile(r"\[\s*ERROR\s*\]\s*(.*)|^ERROR:?\s*(.*)")
HOST = "the host"


def tool_lines(result: CommandResult, limit: int = 3) -> str:
    """A QNN tool's own error lines (``[ ERROR ]``), else its last non-empty lines."""
    text = f"{result.stdout}\n{result.stderr}"
    errors = []
    for line in text.splitlines():
        m = _ERROR_LINE.search(line.strip())
        if m:
            errors.append((m[1] or m[2] or "").strip())
    chosen = [e for e in errors if e] or [ln.strip() for ln in text.splitlines()
                                          if ln.strip() and not ln.startswith("qnn-net-run pid:")]
    return " | ".join(chosen[-limit:])


def _names(names: Sequence[str], limit: int = 5) -> str:
    first, more = shown(names, limit)
    return ", ".join(first) + (f" and {more} more" if more else "")


def _bytes(text: str) -> int:
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB ({n:#x} bytes)"


def killed_by_abort(result: CommandResult) -> bool:
    """The tool died by SIGABRT: exit 134, or (SSH: the command is exec'd, so a death
    by signal comes back without a status) -1 with no timeout and no dropped link."""
    if result.exit_code == SIGABRT_STATUS:
        return True
    return (result.exit_code == -1 and not result.timed_out
            and _DROPPED not in result.stderr)


def _op_name(text: str) -> str | None:
    for line in text.splitlines():
        if not _OP_REFUSED.search(line):
            continue
        for m in _OP_NAME.finditer(line):
            name = m.group(1).strip(".:")
            if name and name.lower() not in _NOT_NAMES and not name.isdigit():
                return name
    return None


def classify_generator(result: CommandResult, *, board: str | None, generator: str,
                       soc: SocInfo | None, fp16_tensors: Sequence[str],
                       vtcm_mb: int | None, timeout: float,
                       fp16_source: str = "the converter's output") -> Finding | None:
    """None when the generator succeeded (exit 0, in time); else the one finding.
    ``board``: where it ran (None: on the host); ``soc``: the SoC it built for;
    ``fp16_tensors``: the FP16 tensors of what it was given (the converter's output or
    the DLC, named by ``fp16_source``); ``vtcm_mb``: what the HTP config asked for
    (None: not set)."""
    where = f"board {board}" if board is not None else HOST
    label = f"qnn-context-binary-generator on {where}"
    subject = board if board is not None else "host"
    said = tool_lines(result)
    if result.timed_out:
        raise_it = "the board's timeout" if board is not None else "sdk.timeout"
        return Finding("context.timeout", f"{label} did not finish within {timeout:g} s and "
                       f"was killed; a large graph at O=3 prepares slowly: raise {raise_it} "
                       "or try htp_config.O: 1", subject=subject)
    if result.exit_code == 0:
        return None
    text = f"{result.stdout}\n{result.stderr}"
    started = "pid:" in result.stdout or "[" in text
    if not started and (result.exit_code in (126, 127) or re.search(
            r"not found|No such file or directory|Permission denied", result.stderr)):
        todo = ("install the QNN tools on the board or put qnn-context-binary-generator "
                "beside the board's net_run" if board is not None else
                "check the SDK's bin/x86_64-linux-clang (sdk.root / QNN_SDK_ROOT)")
        return Finding("context.generator_missing",
                       f"{label}: {generator} could not be started ({said or 'exit 127'}); "
                       f"{todo}", subject=subject)
    if killed_by_abort(result):
        how = ("aborted (SIGABRT, exit 134)" if result.exit_code == SIGABRT_STATUS
               else "was killed by a signal (SIGABRT: exit 134 through a shell)")
        if soc is not None and not soc.fp16:
            where = f"{soc.name} (HTP {soc.arch_name}) has no FP16"
            if fp16_tensors:
                return Finding(
                    "context.fp16_abort",
                    f"FP16 op on {soc.arch_name}: {label} {how}; {where} and "
                    f"{fp16_source} has {len(fp16_tensors)} FP16 tensor(s): "
                    f"{_names(fp16_tensors)}; quantize them (no float_fallback, "
                    "W8A16) or target an SoC with FP16", subject=subject)
            return Finding("context.abort", f"{label} {how} on {where}, but {fp16_source} has "
                           f"no FP16 tensor{': ' + said if said else ''}; keep the log "
                           "(artefact log) and rerun with --log_level verbose",
                           subject=subject)
        return Finding("context.abort", f"{label} {how}{': ' + said if said else ''}",
                       subject=subject)
    tcm = _TCM.search(text)
    if tcm:
        need, have = _bytes(tcm.group(1)), _bytes(tcm.group(2))
        asked = (f"htp_config.vtcm_mb: {vtcm_mb}" if vtcm_mb else
                 "htp_config.vtcm_mb not set")
        room = (f"; the {soc.name} has {soc.vtcm_mb} MiB" if soc is not None and soc.vtcm_mb
                else "")
        return Finding("context.vtcm_overflow",
                       f"{label}: the graph needs {_mib(need)} of VTCM, more than the "
                       f"{_mib(have)} allowed ({asked}{room}); raise htp_config.vtcm_mb "
                       "(at most the SoC's VTCM) or make the graph's working set smaller "
                       "(smaller input tiles)", subject=subject)
    if _SERIALIZE.search(text):
        return Finding("context.serialize", f"{label} could not serialize the context "
                       f"({said}); seen with FP16 ops on HTPs that refuse them: quantize the "
                       "FP16 tensors (the FP16 gate lists them)", subject=subject)
    if _OP_REFUSED.search(text):
        op = _op_name(text)
        what = f"op {op}" if op else "an op"
        return Finding("context.op_refused", f"{label}: the HTP refused {what} (error "
                       f"3110: {said}); change that op's quantization (e.g. 8-bit weights, "
                       "16-bit activations) or replace it in the model", subject=subject)
    fin = _FINALIZE.search(text)
    if fin:
        code = fin.group(1) if fin.lastindex else None
        return Finding("context.finalize", f"{label}: graph finalize failed"
                       f"{f' (err {code})' if code else ''}: {said}; try htp_config.O: 1 or "
                       "a smaller htp_config.vtcm_mb, and keep the log", subject=subject)
    return Finding("context.generator_failed", f"{label} exited with status "
                   f"{result.exit_code}{': ' + said if said else ''}", Severity.ERROR,
                   subject=subject)
