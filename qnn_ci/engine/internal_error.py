"""Internal errors: bugs in qnn-ci itself, never the user's input.

The traceback goes to a log file (in the work folder, else a temporary file) and
the user gets one line naming the exception and that file. Exit status 3 for the
`qnn-ci` command, and for pytest (its ``ExitCode.INTERNAL_ERROR``) when a stage
crashed. A stage that crashed carries its crash log in ``result.data[INTERNAL_ERROR]``.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from qnn_ci import __version__
from qnn_ci.engine.results import StageResult

EXIT_INTERNAL = 3
INTERNAL_ERROR = "internal_error"    # StageResult.data key: the crash log of a crashed stage
TESTCASE = "qnn-ci::internal-error"  # the JUnit testcase naming an internal error of a run
_PREFIX = "qnn-ci-internal-error-"


class InternalError(Exception):
    """An internal error already reported (its traceback written to ``log``, the
    report updated): the CLI prints the one line and exits 3."""

    def __init__(self, exc: BaseException, log: Path | None) -> None:
        super().__init__(describe(exc))
        self.exc = exc
        self.log = log


def crash_log(result: StageResult) -> str | None:
    """The crash log of a stage that crashed (a bug in qnn-ci), else None."""
    value = result.data.get(INTERNAL_ERROR)
    return str(value) if value else None


def describe(exc: BaseException, limit: int = 300) -> str:
    """``TypeError: first line of the message``, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def log_text(exc: BaseException) -> str:
    head = (f"qnn-ci {__version__} internal error at {time.strftime('%Y-%m-%d %H:%M:%S %z')}\n"
            f"python {sys.version.split()[0]} on {sys.platform}\n"
            f"command: {' '.join(sys.argv)}\n\n")
    return head + "".join(traceback.format_exception(exc))


def write_log(exc: BaseException, workdir: Path | None) -> Path | None:
    """Write ``exc``'s traceback to ``<workdir>/qnn-ci-internal-error-<time>-<id>.log``
    (a temporary file when there is no usable work folder); None if nothing could
    be written anywhere."""
    text = log_text(exc)
    prefix = f"{_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-"
    folders: list[Path | None] = [workdir] if workdir is not None else []
    folders.append(None)   # the system's temporary folder
    import tempfile  # only when there is a crash to log

    for folder in folders:
        try:
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=prefix, suffix=".log",
                                        dir=str(folder) if folder is not None else None)
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
                fh.write(text)
            return Path(name).resolve()
        except OSError:
            continue
    return None


def oneline(command: str, exc: BaseException, log: Path | None) -> str:
    """``qnn-ci run: internal error: TypeError: ... (traceback in PATH; please report it)``"""
    where = f"traceback in {log}" if log else "traceback could not be saved"
    return f"{command}: internal error: {describe(exc)} ({where}; please report it)"
