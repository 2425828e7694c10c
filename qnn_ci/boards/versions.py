"""Which QNN release a board's libraries are, and whether it matches the SDK a
model library was built with (a common cause of "loads, then fails" or of a
shadowed library on the board)."""

from __future__ import annotations

import logging
import posixpath
import re
from dataclasses import dataclass

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.transport.base import Transport
from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)

# QNN libraries carry their release as a build tag such as
# `v2.31.0.250130151446_114721` (generated model sources: `qaisw-v2.31.0...`).
GREP_PATTERN = r"(qaisw-)?v2\.[0-9]+\.[0-9]+(\.[0-9]+)?(_[0-9]+)?"
_TRIPLE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class BoardVersion:
    """The QNN release of a board's libraries, with the text and file it was read from."""

    version: str | None      # e.g. "2.31.0" (None: could not be read)
    raw: str                 # the matched text
    source: str              # the file or command it came from


def version_triple(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) from "2.31.0", "qaisw-v2.31.0.2409_1", "v2.31.0.250130"."""
    if not text:
        return None
    m = _TRIPLE.search(text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _pick(lines: list[str]) -> str | None:
    """The first full build tag (with its build number), else the first version."""
    full = [ln for ln in lines if "_" in ln or ln.count(".") >= 3]
    for ln in full + [ln for ln in lines if ln not in full]:
        if version_triple(ln):
            return ln
    return None


def read_board_version(transport: Transport, board: BoardConfig, *,
                       timeout: float, backend_libs: tuple[str, ...] = ("libQnnHtp.so",
                                                                        "libQnnCpu.so")
                       ) -> BoardVersion:
    """Scan the board's QNN backend libraries for a version string (`grep -a -o`),
    falling back to ``<net_run> --version``. Never raises for a missing tool."""
    for lib in backend_libs:
        path = posixpath.join(board.qnn_lib_dir, lib)
        res = transport.run(["grep", "-a", "-o", "-E", GREP_PATTERN, path], timeout=timeout)
        if res.exit_code == 0:
            found = _pick([ln.strip() for ln in res.stdout.splitlines() if ln.strip()])
            if found:
                triple = version_triple(found)
                assert triple is not None
                return BoardVersion(".".join(map(str, triple)), found, path)
    res = transport.run([board.net_run, "--version"], timeout=timeout)
    if res.exit_code == 0:
        found = _pick(re.findall(r"v?\d+\.\d+\.\d+[0-9A-Za-z._-]*", res.stdout))
        if found:
            triple = version_triple(found)
            assert triple is not None
            return BoardVersion(".".join(map(str, triple)), found, f"{board.net_run} --version")
    log.info("board %s: no QNN version string found in %s", board.name, board.qnn_lib_dir)
    return BoardVersion(None, "", board.qnn_lib_dir)


def version_findings(board: BoardConfig, found: BoardVersion,
                     sdk_version: str | None) -> list[Finding]:
    """A warning when the board's QNN libraries and the model library's SDK differ."""
    board_t, sdk_t = version_triple(found.version), version_triple(sdk_version)
    if board_t is None:
        return [Finding("board.version_unknown",
                        f"board {board.name}: could not read the QNN version of the "
                        f"libraries in {board.qnn_lib_dir}; check qnn_lib_dir",
                        Severity.INFO, subject=board.name)]
    if sdk_t is None or board_t == sdk_t:
        return []
    return [Finding(
        "board.version_mismatch",
        f"board {board.name}: QNN libraries {found.version} ({found.source}) but the model "
        f"library was built with SDK {sdk_version}; rebuild with SDK {found.version} or "
        f"install the {'.'.join(map(str, sdk_t))} libraries on the board",
        Severity.WARNING, subject=board.name)]
