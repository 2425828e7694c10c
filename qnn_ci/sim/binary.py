"""What a QNN context binary says it was built for.

The HTP preparer writes its settings into the binary as plain text, e.g.
``...;soc_type=QCS6490;arch=68;num_nsps=1;...;vtcm_size=2097152;...``. The
fields are not adjacent, so each is read after the first ``soc_type=``.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

_SOC = re.compile(rb"soc_type=([A-Za-z0-9_]+);")
_ARCH = re.compile(rb";arch=(\d+);")
_VTCM = re.compile(rb";vtcm_size=(\d+);")
_WINDOW = 4096   # the fields sit within a few hundred bytes after soc_type


@dataclass(frozen=True)
class ContextInfo:
    """What a QNN context binary says it was built for: SoC type, HTP arch, VTCM size."""

    soc_type: str | None
    arch: int | None
    vtcm_size: int | None
    soc_types: tuple[str, ...] = ()     # every soc_type found (one per graph)

    @property
    def arch_name(self) -> str | None:
        return f"v{self.arch}" if self.arch is not None else None


def read_context_info(path: Path) -> ContextInfo:
    with path.open("rb") as fh:
        if path.stat().st_size == 0:
            return ContextInfo(None, None, None)
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            socs = [m for m in _SOC.finditer(data)]
            if not socs:
                return ContextInfo(None, None, None)
            first = socs[0]
            window = data[first.end(): first.end() + _WINDOW]
            arch = _ARCH.search(b";" + window)
            vtcm = _VTCM.search(b";" + window)
            names = tuple(dict.fromkeys(m.group(1).decode() for m in socs))
            return ContextInfo(first.group(1).decode(),
                               int(arch.group(1)) if arch else None,
                               int(vtcm.group(1)) if vtcm else None, names)
