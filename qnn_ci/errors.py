"""Errors a user can cause, reported as one clear line (exit status 2)."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """Bad input the user can fix: a bad manifest, a missing file, a wrong dtype.

    ``str()`` is one line: where (file, line, key) and what to do. The CLI prints
    it without a traceback and exits 2; the pytest plugin reports it as the
    item's failure text.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.key = key
        super().__init__(self.oneline())

    def oneline(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line:
                where += f":{self.line}"
        if self.key:
            where = f"{where}: {self.key}" if where else self.key
        text = " ".join(self.message.splitlines())
        return f"{where}: {text}" if where else text


class ToolError(Exception):
    """An external tool (SDK tool, board command) failed in a way we can describe."""
