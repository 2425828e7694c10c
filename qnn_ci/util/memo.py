"""A small on-disk memo: JSON values under keys derived from content.

What a cached re-run would otherwise recompute at start-up (a model's signature,
"this manifest passed the schema") is kept in ``<workdir>/.memo/<kind>/`` under a
key that is a sha256 of *everything* the value depends on: the full content
digest of the input and the source of the code that computed it. A memo is only
ever a shortcut: a missing, unreadable or malformed entry is a miss (the value is
recomputed), and a folder that cannot be written just means no memo. A symbolic
link on the way to an entry (``.memo``, a folder in it or the entry; left by a restored
cache archive) is refused with a ``UserError`` before anything is read or written
through it (``qnn_ci.util.workfolder``).

    memo = Memo(workdir / MEMO_DIR)
    key = memo_key("signature", content_sha256, code_digest(files))
    value = memo.get("signature", key)        # None: a miss
    memo.put("signature", key, {"inputs": ...})
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from qnn_ci.util.workfolder import refuse_links

log = logging.getLogger(__name__)

MEMO_DIR = ".memo"   # under the work folder; export names cannot start with "."
_MAX_BYTES = 1 << 20  # an entry bigger than this is not ours: a miss


def memo_key(*parts: str) -> str:
    """sha256 of the parts, each length-prefixed (no two part lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(f"{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()


@cache
def code_digest(files: tuple[Path, ...]) -> str:
    """sha256 over the bytes of source files (a missing one counts as missing), once
    per process: the code that computes a memoised value is part of its key."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f).encode("utf-8", "surrogatepass") + b"\0")
        try:
            data = f.read_bytes()
        except OSError:
            data = b"\0missing"
        h.update(f"{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()


@cache
def package_sources(package: str) -> tuple[Path, ...]:
    """The top-level ``.py`` files of an installed package (found without importing
    it), sorted; empty when it is not installed. Once per process, like
    ``code_digest`` of them."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return ()
    if spec is None or not spec.origin:
        return ()
    folder = Path(spec.origin).parent
    try:
        return tuple(sorted(folder.glob("*.py")))
    except OSError:
        return ()


class Memo:
    """JSON values in ``<root>/<kind>/<key[:2]>/<key>.json``; ``root`` None: no memo."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def _path(self, kind: str, key: str) -> Path | None:
        if self.root is None or not kind.isidentifier() or len(key) != 64 \
                or not all(c in "0123456789abcdef" for c in key):
            return None
        path = self.root / kind / key[:2] / f"{key}.json"
        # the memo folder is in the work folder: no link in it leads elsewhere
        refuse_links(self.root.parent, path)
        return path

    def get(self, kind: str, key: str) -> Any | None:
        """The value stored under ``key``, or None (a miss) whatever file is there;
        ``UserError`` for a symbolic link on the way to it."""
        path = self._path(kind, key)
        if path is None:
            return None
        try:
            with open(path, "rb") as fh:
                raw = fh.read(_MAX_BYTES + 1)
            if len(raw) > _MAX_BYTES:
                return None
            entry = json.loads(raw)
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or "value" not in entry:
            return None
        return entry["value"]

    def put(self, kind: str, key: str, value: Any) -> None:
        """Store ``value`` (atomically: a reader sees the old entry or the new one);
        a folder that cannot be written is logged and ignored, a symbolic link on the
        way to it is a ``UserError``."""
        path = self._path(kind, key)
        if path is None:
            return
        try:
            text = json.dumps({"key": key, "value": value}, separators=(",", ":"))
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except (OSError, ValueError, TypeError) as exc:
            log.debug("memo %s not written: %s", path, exc)
