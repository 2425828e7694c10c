"""Content hashes for cache keys, and the on-disk store of stage results."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qnn_ci.engine.relocate import (
    Roots,
    detokenize_json,
    map_strings,
    rewrite_files,
    token_replacer,
    tokenize,
)
from qnn_ci.engine.results import StageResult

# A file whose mtime is this close to now may still change without its mtime or
# size changing (the clock ticks coarser than writes): not memoised ("racy git").
_RACY_S = 2.0
_MEMO: dict[tuple[str, int, int, int, int], str] = {}


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, memoised by path, inode, size, mtime and ctime once the
    file is older than a couple of seconds (so a same-size rewrite within one clock
    tick is never hidden)."""
    st = path.stat()
    memo_key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _MEMO.get(memo_key)
    if known is not None:
        return known
    value = _hash_file(path)
    if time.time() - max(st.st_mtime, st.st_ctime) > _RACY_S:
        _MEMO[memo_key] = value
    return value


def jsonable(value: Any, roots: Roots | None = None) -> Any:
    """Plain JSON values: dataclasses as dicts, files by content (``digest``'s input).
    With ``roots``, every string is tokenized too: ``tokenize(jsonable(value), roots)``
    in one walk (a stage's cache key is made so)."""
    return _jsonable(value, None if roots is None else token_replacer(roots))


_PLAIN = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names in order (as ``dataclasses.fields``); None for others."""
    try:
        return _FIELDS[cls]
    except KeyError:
        pass
    names = (tuple(f.name for f in dataclasses.fields(cls))
             if dataclasses.is_dataclass(cls) else None)
    _FIELDS[cls] = names
    return names


def _jsonable(value: Any, fn: Callable[[str], str] | None) -> Any:
    kind = type(value)
    if kind in _PLAIN:       # the common leaves first: keys are hashed per stage
        return fn(value) if fn is not None and kind is str else value
    names = _field_names(kind)
    if names is not None and not isinstance(value, type):
        return {name: _jsonable(getattr(value, name), fn) for name in names}
    if isinstance(value, Path):
        # A file by its content only: the same bytes at another path (another clone,
        # another runner) are the same input. Other paths (folders) as written.
        plain = {"sha256": file_digest(value)} if value.is_file() else {"path": str(value)}
        return plain if fn is None else {k: fn(v) for k, v in plain.items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v, fn) for k, v in value.items()}
    if isinstance(value, set | frozenset):   # in the order of the plain values' reprs
        items = sorted([_jsonable(v, None) for v in value], key=repr)
        return items if fn is None else [map_strings(v, fn) for v in items]
    if isinstance(value, list | tuple):
        return [_jsonable(v, fn) for v in value]
    return fn(value) if fn is not None and isinstance(value, str) else value


def digest(parts: Any) -> str:
    """A stable hash of plain values, dataclasses and files (by content)."""
    return plain_digest(_jsonable(parts, None))


def plain_digest(plain: Any) -> str:
    """``digest`` of what ``jsonable`` already made plain (the same hash, one walk less)."""
    text = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class ResultStore:
    """``<stage dir>/result.json`` holding the result and the key it was made with."""

    FILE = "result.json"

    def load(self, stage_dir: Path, key: str, *, run_token: str | None = None,
             this_run: str = "", roots: Roots | None = None) -> StageResult | None:
        """The stored result if its key matches; with ``run_token``, only one made by
        that run (``--qnn-no-cache`` under xdist: computed once per run, not reused).
        A result another worker of ``this_run`` just made is not called cached.
        ``roots``: where the work folder and project are now (a result saved with
        roots elsewhere is relocated: ``qnn_ci.engine.relocate``)."""
        path = os.path.join(stage_dir, self.FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            if roots is not None:     # tokens are written only with the roots
                text = detokenize_json(text, roots)
            payload = json.loads(text)
        except (OSError, ValueError):
            return None
        if payload.get("key") != key:
            return None
        if run_token is not None and payload.get("run_token") != run_token:
            return None
        stored = payload.get("roots")
        result = StageResult.from_dict(payload["result"])
        if not all(os.path.exists(p) for p in result.artefacts.values()):
            return None
        if roots is not None and isinstance(stored, dict) and stored.get("workdir"):
            rewrite_files(result.artefacts, Roots(str(stored["workdir"]), stored.get("project")),
                          roots)
        result.cached = not (this_run and payload.get("run_token") == this_run)
        return result

    def save(self, stage_dir: Path, key: str, result: StageResult, *,
             run_token: str = "", roots: Roots | None = None) -> None:
        path = stage_dir / self.FILE
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        payload: dict[str, Any] = {"key": key, "run_token": run_token,
                                   "result": result.to_dict()}
        if roots is not None:
            payload["result"] = tokenize(payload["result"], roots)
            payload["roots"] = roots.as_dict()
        tmp.write_text(json.dumps(payload, indent=1, default=str), "utf-8")
        os.replace(tmp, path)
