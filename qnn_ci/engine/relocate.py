"""A work folder that travels: stored stage results name the folders they were made
in by token (``${workdir}``, ``${project}``), not by absolute path, so a work folder
restored on another runner, or used from a clone at another path, is reused.

- ``tokenize`` / ``detokenize`` rewrite every string in a JSON-able value: a root
  folder (at a path boundary) becomes its token and back.
- Cache keys and content digests see tokenized values (``qnn_ci.engine.pipeline``), so they
  hold no absolute path of the work folder or the project.
- A few artefacts are text files that themselves hold absolute paths (the input
  lists the calibration stage writes: the QAIRT tools want absolute paths). When a
  result is read at another location they are rewritten in place for the new one
  (``RELOCATABLE``), before anything reads them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WORKDIR = "${workdir}"
PROJECT = "${project}"
RELOCATABLE = frozenset({"input_list", "held_out_list"})   # artefact names (text files)
_MAX_REWRITE = 64 << 20


@dataclass(frozen=True)
class Roots:
    """The work folder and project folder a stored path is written relative to."""

    workdir: str
    project: str | None = None

    @classmethod
    def of(cls, workdir: Path, project: Path | None) -> Roots:
        return cls(str(workdir.resolve()), str(project.resolve()) if project else None)

    def pairs(self) -> list[tuple[str, str]]:
        """(folder, token), longest folder first (a work folder inside the project is
        replaced as the work folder)."""
        out = [(self.workdir, WORKDIR)]
        if self.project:
            out.append((self.project, PROJECT))
        return sorted(out, key=lambda p: -len(p[0]))

    def as_dict(self) -> dict[str, str | None]:
        return {"workdir": self.workdir, "project": self.project}


def git_top(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` holding a ``.git``, or None."""
    folder = folder.resolve()
    for f in (folder, *folder.parents):
        if (f / ".git").exists():
            return f
    return None


def project_root(folder: Path) -> Path:
    """The project a manifest belongs to: its git repository's top folder (the
    nearest folder above with a ``.git``), else the manifest's own folder."""
    return git_top(folder) or folder.resolve()


def _replace_folder(text: str, folder: str, token: str) -> str:
    """``folder`` -> ``token`` where it is a whole path prefix (followed by ``/``, an
    end of string or a non-path character), not a prefix of a longer name."""
    if folder not in text or folder in ("", "/"):
        return text
    out: list[str] = []
    i = 0
    while (j := text.find(folder, i)) >= 0:
        end = j + len(folder)
        nxt = text[end:end + 1]
        if nxt == "" or nxt == os.sep or not (nxt.isalnum() or nxt in "._-~"):
            out.append(text[i:j] + token)
        else:
            out.append(text[i:end])
        i = end
    out.append(text[i:])
    return "".join(out)


def map_strings(value: Any, fn: Any) -> Any:
    """``fn`` on every string of a plain value; dicts and lists rebuilt, keys kept."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [map_strings(v, fn) for v in value]
    return value


def token_replacer(roots: Roots) -> Callable[[str], str]:
    """What ``tokenize`` does to each string: every root folder (at a path boundary)
    becomes its token, the longest folder first."""
    pairs = roots.pairs()

    def fn(text: str) -> str:
        for folder, token in pairs:
            text = _replace_folder(text, folder, token)
        return text
    return fn


def tokenize(value: Any, roots: Roots) -> Any:
    return map_strings(value, token_replacer(roots))


def _untokenizer(workdir: str, project: str | None) -> Callable[[str], str]:
    """Each token of a string replaced: the work folder's, then the project's."""
    def fn(text: str) -> str:
        if "${" not in text:
            return text
        text = text.replace(WORKDIR, workdir)
        return text.replace(PROJECT, project) if project else text
    return fn


def detokenize(value: Any, roots: Roots) -> Any:
    return map_strings(value, _untokenizer(roots.workdir, roots.project))


def detokenize_json(text: str, roots: Roots) -> str:
    """``detokenize`` on a JSON document's text, before it is parsed: each token
    becomes its folder, escaped as a JSON string holds it (one pass over the text
    instead of a walk of the parsed values). Tokens are only ever written inside
    string values; a dict key holding a token's text literally is replaced too."""
    project = json.dumps(roots.project)[1:-1] if roots.project else None
    return _untokenizer(json.dumps(roots.workdir)[1:-1], project)(text)


def rewrite_files(artefacts: dict[str, str], old: Roots, new: Roots) -> None:
    """Rewrite the relocatable text artefacts made under ``old`` for ``new``."""
    if old == new:
        return
    for name, path_text in artefacts.items():
        if name not in RELOCATABLE:
            continue
        path = Path(path_text)
        try:
            if not path.is_file() or path.stat().st_size > _MAX_REWRITE:
                continue
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        moved = detokenize(tokenize(text, old), new)
        if moved != text:
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            tmp.write_text(moved, "utf-8")
            os.replace(tmp, path)
            log.info("relocated %s for %s", path, new.workdir)
