"""How much memory this process may still use, from the kernel and its cgroup.

The per-layer sweep sizes its batches of exposed tensors from this, and a
simulator worker killed by the kernel's OOM killer is reported with it
(``qnn_ci.sim.parallel``). The answer is the smallest of:

- ``MemAvailable`` from ``/proc/meminfo`` (what the kernel could give without
  swapping);
- the room left in this process's memory cgroup and each of its parents:
  cgroup v2 ``memory.max`` minus ``memory.current``; v1 ``memory.limit_in_bytes``
  minus ``memory.usage_in_bytes`` (``max``, or a v1 limit near 2^63, is no limit).
  The cgroup comes from ``/proc/self/cgroup``; a container that mounts its own
  cgroup at the root of ``/sys/fs/cgroup`` is read there.

``QNN_CI_MEMORY`` sets the answer outright (bytes, or with a K/M/G/T suffix,
powers of 1024: ``512M``, ``1.5G``); for tests and for machines whose limits
are set elsewhere. None: nothing could be read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV_MEMORY = "QNN_CI_MEMORY"
MiB = 1024 * 1024
GiB = 1024 * MiB
_NO_LIMIT = 1 << 60           # a v1 "unlimited" is 2^63 rounded down to a page
_SUFFIX = {"": 1, "K": 1024, "M": MiB, "G": GiB, "T": 1024 * GiB}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """``"512M"`` -> 536870912; bytes when there is no suffix; None when not a size."""
    m = _SIZE.match(text)
    if m is None:
        return None
    return int(float(m[1]) * _SUFFIX[m[2].upper()])


def meminfo_available(text: str) -> int | None:
    """``MemAvailable`` (bytes) from the text of ``/proc/meminfo``."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * (1024 if unit == "kb" else 1)
    return None


def cgroup_paths(text: str) -> tuple[str | None, str | None]:
    """(the v2 cgroup, the v1 memory cgroup) of a process, from ``/proc/<pid>/cgroup``."""
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        ident, controllers, path = parts
        if ident == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _NO_LIMIT
    return int(text) if text.isdigit() else None


def _room(folder: Path, limit_file: str, usage_file: str, top: Path) -> int | None:
    """The least room (limit - usage) in ``folder`` and its parents up to ``top``."""
    least: int | None = None
    while True:
        limit, usage = _read_int(folder / limit_file), _read_int(folder / usage_file)
        if limit is not None and limit < _NO_LIMIT and usage is not None:
            room = max(0, limit - usage)
            least = room if least is None else min(least, room)
        if folder == top or top not in folder.parents:
            return least
        folder = folder.parent


def cgroup_room(proc_cgroup: Path = Path("/proc/self/cgroup"),
                root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The room left in this process's memory cgroup (v2, else v1); None: no limit
    found."""
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return None
    v2, v1 = cgroup_paths(text)
    found: list[int] = []
    for rel, top, files in ((v2, root, ("memory.max", "memory.current")),
                            (v1, root / "memory",
                             ("memory.limit_in_bytes", "memory.usage_in_bytes"))):
        if rel is None:
            continue
        folder = top / rel.lstrip("/")
        if not folder.is_dir():       # a container: its own cgroup is the mount's root
            folder = top
        room = _room(folder, *files, top)
        if room is not None:
            found.append(room)
    return min(found) if found else None


def available_bytes(environ: Mapping[str, str] | None = None, *,
                    meminfo: Path = Path("/proc/meminfo"),
                    proc_cgroup: Path = Path("/proc/self/cgroup"),
                    cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The bytes this process may still use (see the module text); None: unknown."""
    env = os.environ if environ is None else environ
    asked = env.get(ENV_MEMORY, "").strip()
    if asked:
        size = parse_size(asked)
        if size is not None:
            return size
    try:
        avail = meminfo_available(meminfo.read_text())
    except OSError:
        avail = None
    room = cgroup_room(proc_cgroup, cgroup_root)
    known = [v for v in (avail, room) if v is not None]
    return min(known) if known else None


def human(n: float) -> str:
    """``3.1 GiB``, ``170 MiB``, ``12 KiB``: a byte count for a message."""
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.0f} MiB"
    return f"{max(0.0, n) / 1024:.0f} KiB"
