"""Tell qnn-net-run failures apart from its console text and exit status.

The exit status on failure is not confirmed (the open sample app returns 1), so
any non-zero status is a failure; the class comes from the tool's own messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qnn_ci.sdk.context_failures import tool_lines
from qnn_ci.transport.base import CommandResult

# (check id, patterns, what it means for the user) — first match wins.
_CLASSES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("board.disk_full", (r"No space left on device",),
     "the board ran out of space while writing outputs: free space under the work root "
     "or point work_root at a larger filesystem"),
    ("board.load_backend", (r"Could not load backend", r"Unable to load backend",
                            r"Failed to load skel", r"Transport layer setup failed",
                            r"Unsupported SoC model"),
     "the QNN backend library could not be loaded: check qnn_lib_dir, LD_LIBRARY_PATH "
     "and (for HTP) the skel libraries / ADSP_LIBRARY_PATH in the board's env"),
    ("board.context_version", (r"context from binary.*\berr(?:or)?\s*:?\s*5000\b",
                               r"Failed to get context binary info"),
     "the board's QNN runtime refused the context binary (error 5000): it was built by a "
     "newer QNN than the board's runtime, or for another device; build it with the "
     "board's own QNN (the context_binary stage does) or update the board's runtime"),
    ("board.context_load", (r"Could not create context from binary",
                            r"Failed to create context from binary", r"\b0x138d\b"),
     "the context binary could not be loaded (error 5005 / 0x138d): it was built for "
     "another HTP architecture or asks for more VTCM than this device has; check "
     "target.soc and htp_config.vtcm_mb, then rebuild it"),
    ("board.load_model", (r"Could not load model",),
     "the model library could not be loaded: check the lib target (-t) matches the "
     "board and that it was built with the board's QNN SDK"),
    ("board.input_list", (r"Could not readInputLists",),
     "qnn-net-run could not read the input list"),
    ("board.execution", (r"Failed to execute graph", r"Graph Finalize failure",
                         r"Failed to finalize graph"),
     "the model loaded but the graph failed to execute"),
)

@dataclass(frozen=True)
class NetRunFailure:
    """A qnn-net-run failure told apart: its check id, a one-line message, the tool's text."""

    check: str          # board.load_backend | board.load_model | board.execution | ...
    message: str        # one line: what failed, the tool's own words, what to do
    tool_text: str      # the tool's most relevant line(s)


def classify(result: CommandResult, *, backend: str, board: str, net_run: str,
             timeout: float) -> NetRunFailure | None:
    """None when the run succeeded (exit 0, not timed out)."""
    label = f"qnn-net-run ({backend.upper()} backend) on board {board}"
    if result.timed_out:
        return NetRunFailure("board.timeout",
                             f"{label} did not finish within {timeout:g} s and was killed",
                             tool_lines(result))
    if result.exit_code == 0:
        return None
    text = f"{result.stdout}\n{result.stderr}"
    said = tool_lines(result)
    started = "qnn-net-run pid:" in result.stdout
    if not started and (result.exit_code in (126, 127) or re.search(
            r"not found|No such file or directory|Permission denied", result.stderr)):
        return NetRunFailure("board.net_run_missing",
                             f"{label}: {net_run} could not be started ({said or 'exit 127'}); "
                             "set net_run in the board declaration to the tool's path",
                             said)
    for check, patterns, advice in _CLASSES:
        for pat in patterns:
            if re.search(pat, text):
                return NetRunFailure(check, f"{label} failed: {said} — {advice}", said)
    if result.exit_code < 0:
        return NetRunFailure("board.execution",
                             f"{label} was killed by a signal or the connection dropped"
                             f"{': ' + said if said else ''}", said)
    return NetRunFailure("board.execution",
                         f"{label} exited with status {result.exit_code}"
                         f"{': ' + said if said else ''}", said)
