"""Pages of memory-mapped inputs: mapped ahead of the fold and dropped behind it.

The first touch of each page of a memory-mapped file is a page fault, and keeping
the resident set small means dropping pages once they are read (MADV_DONTNEED;
the page cache keeps them). Over 2 x 1 GB of float32 the two took about a third
of the folding thread's time. With a second core for this process
(``qnn_ci.util.cores.share_of_cores``, on Linux) a helper thread does both: while
step i is folded it maps step i+1 in one call (MADV_POPULATE_READ, Linux 5.14+;
an older kernel refuses it and the pages are faulted in as before) and drops
step i-1. It calls madvise(2) through ctypes, which lets go of the GIL for the
call; ``mmap.madvise`` keeps it, and the folding thread, which needs the GIL
between its numpy calls, would wait out every call. Otherwise pages are dropped
in the calling thread with ``mmap.madvise``.

Only ranges inside a file mapping are ever advised, and dropping a page of a
read-only file mapping loses nothing: a page dropped too early is read again.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import queue
import sys
import threading
from collections.abc import Callable, Sequence

import numpy as np

from qnn_ci.util.cores import share_of_cores

log = logging.getLogger(__name__)

MADV_POPULATE_READ = 22          # <linux/mman.h>; the mmap module does not name it
PENDING = 2                      # steps queued for the helper before the caller waits
THREAD_NAME = "qnn-ci pages"

_Job = tuple[int, int, int] | None          # (advice, start, stop) in elements


class _Mapped:
    """One 1-D array's place in its file mapping (byte offsets)."""

    def __init__(self, arr: np.ndarray, mm: mmap.mmap) -> None:
        self.mm = mm
        self.length = len(mm)
        self.base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        self.offset = arr.ctypes.data - self.base
        self.itemsize = arr.itemsize

    def span(self, start: int, stop: int, *, whole_pages_only: bool) -> tuple[int, int]:
        """Byte range in the mapping for elements [start, stop): page-aligned,
        outward (to populate) or only the pages wholly inside (to drop)."""
        page = mmap.PAGESIZE
        lo = self.offset + start * self.itemsize
        hi = min(self.length, self.offset + stop * self.itemsize)
        if whole_pages_only:
            lo -= lo % page          # the page before start was read by the step before
            hi -= hi % page          # the page holding stop is read by the next step
        else:
            lo -= lo % page
            hi = min(self.length, hi + (-hi) % page)
        return lo, hi


def _mapping(arr: np.ndarray) -> mmap.mmap | None:
    mm = getattr(arr, "_mmap", None)
    if (isinstance(mm, mmap.mmap) and arr.ndim == 1 and arr.flags.c_contiguous
            and not mm.closed):
        return mm
    return None


class Pager:
    """Maps steps ahead and drops them behind, for equally long 1-D arrays (those
    that are not memory-mapped are left alone). ``threaded``: use the helper
    thread (None: when this process has a second core and runs on Linux).
    ``close()`` must follow (it waits for the helper)."""

    def __init__(self, arrays: Sequence[np.ndarray], *, threaded: bool | None = None) -> None:
        self._maps: list[_Mapped] = []
        for arr in arrays:
            mm = _mapping(arr)
            if mm is None:
                continue
            try:
                self._maps.append(_Mapped(arr, mm))
            except (TypeError, ValueError, BufferError):  # not exportable: left alone
                continue
        if threaded is None:
            threaded = sys.platform.startswith("linux") and share_of_cores() >= 2
        self._jobs: queue.Queue[_Job] | None = None
        self._thread: threading.Thread | None = None
        if threaded and self._maps:
            self._madvise = _libc_madvise()
            if self._madvise is not None:
                self._jobs = queue.Queue(maxsize=2 * PENDING)
                self._thread = threading.Thread(target=self._work, name=THREAD_NAME,
                                                daemon=True)
                self._thread.start()

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def ahead(self, start: int, stop: int) -> None:
        """Elements [start, stop) will be read next: map them now (helper only)."""
        if self._jobs is not None:
            self._jobs.put((MADV_POPULATE_READ, start, stop))

    def behind(self, start: int, stop: int) -> None:
        """Elements [start, stop) are done: drop their pages."""
        if self._jobs is not None:
            self._jobs.put((mmap.MADV_DONTNEED, start, stop))
            return
        for m in self._maps:
            lo, hi = m.span(start, stop, whole_pages_only=True)
            if hi > lo:
                try:
                    m.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                except (OSError, ValueError) as exc:  # pragma: no cover - platform specific
                    log.debug("madvise failed (%s); pages stay resident", exc)

    def close(self) -> None:
        if self._thread is None or self._jobs is None:
            return
        self._jobs.put(None)
        self._thread.join()
        self._thread = None
        self._jobs = None

    def _work(self) -> None:
        assert self._jobs is not None
        while (job := self._jobs.get()) is not None:
            advice, start, stop = job
            try:
                for m in self._maps:
                    lo, hi = m.span(start, stop, whole_pages_only=advice == mmap.MADV_DONTNEED)
                    if hi > lo and self._madvise(m.base + lo, hi - lo, advice) != 0:
                        # EINVAL: a kernel without MADV_POPULATE_READ; the fold faults instead.
                        log.debug("madvise(%d) failed: errno %d", advice, ctypes.get_errno())
            except Exception:      # pages only cost speed: the caller must never hang on them
                log.debug("page advice failed", exc_info=True)


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    madvise: Callable[[int, int, int], int] = fn
    return madvise
