"""What QNN's input-list format can carry. Inputs are separated by whitespace, samples
by newlines, a name is marked by ``:=`` and a first line starting with ``#`` is a
header: a path or tensor name holding whitespace (any ``str.isspace`` character),
a name holding ``:=`` or starting with ``#`` cannot be written, and a list written
anyway is read back as something else (or injects a line)."""

from __future__ import annotations

from pathlib import Path

from qnn_ci.errors import UserError

_NAMED = {" ": "a space", "\t": "a tab", "\n": "a newline", "\r": "a carriage return"}

FORMAT = ("QNN's input list separates inputs by whitespace and samples by newlines")


class UnwritableInputList(UserError):
    """A path or tensor name an input list cannot hold (never a per-line finding:
    every line of such a list is wrong)."""


def _whitespace(text: str) -> str | None:
    for ch in text:
        if ch.isspace():
            return _NAMED.get(ch, f"whitespace {ch!r}")
    return None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot appear in an input list, or None."""
    if not name:
        return "is empty"
    ws = _whitespace(name)
    if ws:
        return f"contains {ws}"
    if ":=" in name:
        return "contains ':=' (the name/path separator)"
    if name.startswith("#"):
        return "starts with '#' (a header line)"
    return None


def path_problem(path: str | Path) -> str | None:
    ws = _whitespace(str(path))
    return f"contains {ws}" if ws else None


def check_names(names: list[str], *, file: str | Path | None = None,
                line: int | None = None) -> None:
    for name in names:
        problem = name_problem(name)
        if problem:
            raise UnwritableInputList(
                f"graph input {name!r} {problem}: {FORMAT}, so no input list can name it; "
                "rename the input in the model (e.g. with onnx.helper or "
                "onnx-graphsurgeon)", file=file, line=line)


def check_work_path(path: Path, *, file: str | Path | None = None,
                    line: int | None = None) -> None:
    """The folder qnn-ci writes raw files and input lists into."""
    problem = path_problem(path.resolve())
    if problem:
        raise UnwritableInputList(
            f"the work folder {str(path.resolve())!r} {problem}: {FORMAT}, so the raw files "
            "written there cannot be listed; use --workdir (qnn-ci run) or --qnn-workdir "
            "(pytest) on a path without whitespace", file=file, line=line)


def check_list_path(path: str | Path, *, file: str | Path | None = None,
                    line: int | None = None) -> None:
    """A raw file named in an input list (written or read)."""
    problem = path_problem(path)
    if problem:
        raise UnwritableInputList(
            f"path {str(path)!r} {problem}: {FORMAT}, so QNN reads it as two entries; "
            "move the raw files to a folder without whitespace", file=file, line=line)
