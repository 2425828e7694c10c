"""Content hashes for cache keys, and the on-disk store of stage results."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from qnn_ci.results import StageResult


@cache
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (memoised by path, size and mtime)."""
    st = path.stat()
    return _file_digest(str(path), st.st_size, st.st_mtime_ns)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return {"path": str(value), "sha256": file_digest(value)} if value.is_file() \
            else {"path": str(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    return value


def digest(parts: Any) -> str:
    """A stable hash of plain values, dataclasses and files (by content)."""
    text = json.dumps(_jsonable(parts), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class ResultStore:
    """``<stage dir>/result.json`` holding the result and the key it was made with."""

    FILE = "result.json"

    def load(self, stage_dir: Path, key: str, *, run_token: str | None = None,
             this_run: str = "") -> StageResult | None:
        """The stored result if its key matches; with ``run_token``, only one made by
        that run (``--qnn-no-cache`` under xdist: computed once per run, not reused).
        A result another worker of ``this_run`` just made is not called cached."""
        path = stage_dir / self.FILE
        try:
            payload = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if payload.get("key") != key:
            return None
        if run_token is not None and payload.get("run_token") != run_token:
            return None
        result = StageResult.from_dict(payload["result"])
        missing = [p for p in result.artefacts.values() if not Path(p).exists()]
        if missing:
            return None
        result.cached = not (this_run and payload.get("run_token") == this_run)
        return result

    def save(self, stage_dir: Path, key: str, result: StageResult, *,
             run_token: str = "") -> None:
        path = stage_dir / self.FILE
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        payload = {"key": key, "run_token": run_token, "result": result.to_dict()}
        tmp.write_text(json.dumps(payload, indent=1, default=str), "utf-8")
        os.replace(tmp, path)
