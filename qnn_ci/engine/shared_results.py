"""Results keyed by content only, shared across the exports of a work folder.

Two exports that differ only in what a piece of work does not read (the export's
name, ``target.soc``) need its answer once: calibration data from the same model,
inputs and generator; the QDQ model from the same float model, calibration data
and quantization settings. The answer is stored once under
``<workdir>/.shared/<stage>/<key>/`` (files plus ``meta.json``) and hard-linked (or
copied, across file systems) into each export's own stage folder.

The key is the caller's: a digest of everything the answer depends on and nothing
else (never the export's name). A file lock per key makes two pytest-xdist
workers compute it once: the second waits and reuses. An entry is published
complete or not at all (built in a temporary folder, then renamed), and one whose
files are gone or changed size is ignored. With the cache off (``--qnn-no-cache``)
only entries made by this run (its run token, or this process) are reused.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnn_ci.engine.stage import Environment
from qnn_ci.util.workfolder import refuse_links

log = logging.getLogger(__name__)

SHARED_DIR = ".shared"
META = "meta.json"
MAX_META_BYTES = 64 << 20
_MADE_HERE: set[str] = set()       # entries this process published (for --qnn-no-cache)


def link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (a copy where links cannot be made)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@dataclass
class Claim:
    """The lock-holder's view of one key: ``meta`` is the stored entry (None: compute
    it, then ``publish``)."""

    folder: Path
    key: str
    meta: dict[str, Any] | None
    run_token: str
    export: str

    @property
    def hit(self) -> bool:
        return self.meta is not None

    def link_into(self, files: Mapping[str, Path]) -> None:
        """Link the entry's files (name in the entry -> destination) into place."""
        for name, dst in files.items():
            link_or_copy(self.folder / name, dst)

    def publish(self, files: Mapping[str, Path], meta: dict[str, Any]) -> None:
        """Store ``files`` (name in the entry -> source) and ``meta`` as this key's
        entry, replacing any older one. A store that fails (a full disk) only means
        the next export computes again: logged, never raised."""
        tmp = self.folder.with_name(f"{self.key}.tmp{os.getpid()}")
        full = {"key": self.key, "export": self.export, "run_token": self.run_token,
                "created": time.time(), "files": {}, "meta": meta}
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for name, src in files.items():
                link_or_copy(src, tmp / name)
                full["files"][name] = (tmp / name).stat().st_size
            (tmp / META).write_text(json.dumps(full, indent=1, default=str), "utf-8")
            if self.folder.exists():
                shutil.rmtree(self.folder)
            os.rename(tmp, self.folder)
        except OSError as exc:
            log.warning("could not store %s for other exports (%s); they will compute it "
                        "again", self.folder, exc)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        _MADE_HERE.add(str(self.folder))
        self.meta = full
        log.info("shared %s: published (computed for export %s)", self.folder, self.export)

    @property
    def files(self) -> list[str]:
        """The names of the entry's files."""
        return list((self.meta or {}).get("files") or {})

    @property
    def made_by(self) -> str:
        return str((self.meta or {}).get("export", "?"))

    @property
    def stored(self) -> dict[str, Any]:
        return dict((self.meta or {}).get("meta") or {})


def safe_name(name: object) -> bool:
    """A relative path inside an entry: no ``..``, not absolute, no empty part."""
    if not isinstance(name, str) or not name or "\0" in name or name.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def _read(folder: Path) -> dict[str, Any] | None:
    """The entry's meta when it holds up: every file it lists there, regular, with
    the size it was stored with; None for anything else (then it is recomputed)."""
    try:
        meta = folder / META
        if not meta.is_file() or meta.stat().st_size > MAX_META_BYTES:
            return None
        full = json.loads(meta.read_text("utf-8"))
        if not isinstance(full, dict) or not isinstance(full.get("meta"), dict):
            return None
        files = full["files"]
        if not isinstance(files, dict):
            return None
        for name, size in files.items():
            if not safe_name(name) or isinstance(size, bool) or not isinstance(size, int):
                return None
            path = folder / name
            if path.is_symlink() or not path.is_file() or path.stat().st_size != size:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return full


def _usable(full: dict[str, Any], folder: Path, env: Environment) -> bool:
    if env.use_cache:
        return True
    if env.run_token:
        return full.get("run_token") == env.run_token
    return str(folder) in _MADE_HERE        # no token: made by this process


@contextmanager
def claim(env: Environment, stage: str, key: str, export: str) -> Iterator[Claim]:
    """Hold the lock for ``key`` of ``stage`` while the caller reuses or computes. A
    symbolic link on the way (``.shared``, its folders, the entry, the lock) is a
    ``UserError``, before anything is read or written through it."""
    base = env.workdir / SHARED_DIR / stage
    refuse_links(env.workdir, base / key / META, base / f"{key}.lock")
    base.mkdir(parents=True, exist_ok=True)
    folder = base / key
    from filelock import FileLock  # only when work is claimed: a cached run needs none

    with FileLock(str(base / f"{key}.lock")):
        full = _read(folder)
        if full is not None and not _usable(full, folder, env):
            full = None
        yield Claim(folder, key, full, env.run_token, export)
