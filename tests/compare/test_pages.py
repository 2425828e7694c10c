"""Pages of memory-mapped inputs (qnn_ci.compare.pages): dropped behind the fold,
mapped ahead of it on the helper thread, the same numbers either way. Residency
is read from /proc/self/smaps (the mapping's own Rss)."""

from __future__ import annotations

import mmap
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.compare.metrics import compute_metrics, iter_chunks
from qnn_ci.compare.pages import THREAD_NAME, Pager, _Mapped

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(),
                                reason="needs Linux /proc/self/smaps")

N = 1 << 20                      # 4 MiB per float32 file
CHUNK = 1 << 16


def resident_kib(arr: np.ndarray) -> int:
    """Rss of the mapping that holds ``arr``'s first byte."""
    addr = arr.ctypes.data
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            inside = int(head[1], 16) <= addr < int(head[2], 16)
        elif inside and line.startswith("Rss:"):
            return int(line.split()[1])
    raise AssertionError("mapping not found")


def _files(tmp_path: Path) -> tuple[np.memmap, np.memmap]:
    rng = np.random.default_rng(11)
    ref = rng.standard_normal(N).astype(np.float32)
    (ref + np.float32(0.01) * rng.standard_normal(N).astype(np.float32)).tofile(
        tmp_path / "t.raw")
    ref.tofile(tmp_path / "r.raw")
    return (np.memmap(tmp_path / "r.raw", dtype=np.float32, mode="r"),
            np.memmap(tmp_path / "t.raw", dtype=np.float32, mode="r"))


def _pages_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == THREAD_NAME]


@pytest.mark.parametrize("threaded", [False, True])
def test_pages_are_dropped_once_read(tmp_path, threaded):
    r, t = _files(tmp_path)
    for _start, (x, y) in iter_chunks([r, t], chunk=CHUNK, pager_thread=threaded):
        float(x.sum() + y.sum())                   # touch every page
    assert resident_kib(r) <= 8 and resident_kib(t) <= 8
    assert not _pages_threads()


def test_without_release_every_page_stays(tmp_path):
    r, t = _files(tmp_path)
    for _start, (x, _y) in iter_chunks([r, t], chunk=CHUNK, release_pages=False):
        float(x.sum())
    assert resident_kib(r) >= N * 4 // 1024 - 8


def test_ahead_maps_pages_before_they_are_read(tmp_path):
    r, t = _files(tmp_path)
    pager = Pager([r, t], threaded=True)
    assert pager.threaded
    pager.ahead(0, N // 2)
    pager.close()                                  # waits for the helper
    if resident_kib(r) == 0:
        pytest.skip("this kernel has no MADV_POPULATE_READ (Linux < 5.14)")
    half = N * 4 // 2 // 1024
    assert half <= resident_kib(r) <= half + 8 and half <= resident_kib(t) <= half + 8
    dropper = Pager([r, t], threaded=False)
    dropper.behind(0, N)
    dropper.close()
    assert resident_kib(r) == 0


def test_dropping_and_mapping_pages_never_changes_what_is_read(tmp_path):
    r, t = _files(tmp_path)
    want = (np.add.reduceat(np.asarray(r, np.float64), range(0, N, CHUNK)),
            np.add.reduceat(np.asarray(t, np.float64), range(0, N, CHUNK)))
    for threaded in (False, True):
        got = list(zip(*[(x.sum(dtype=np.float64), y.sum(dtype=np.float64)) for _s, (x, y)
                         in iter_chunks([r, t], chunk=CHUNK, pager_thread=threaded)],
                       strict=True))
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    fast = compute_metrics(r, t, chunk=CHUNK, float32_from=0)
    again = compute_metrics(r, t, chunk=CHUNK, float32_from=0)
    assert fast.to_dict() == again.to_dict()


def test_an_abandoned_iteration_stops_the_helper(tmp_path):
    r, t = _files(tmp_path)
    chunks = iter_chunks([r, t], chunk=CHUNK, pager_thread=True)
    next(chunks)
    assert _pages_threads() == [THREAD_NAME]
    chunks.close()
    assert not _pages_threads()


def test_arrays_in_memory_are_left_alone():
    a = np.ones(N, np.float32)
    pager = Pager([a, a.copy()], threaded=True)
    assert not pager.threaded                      # nothing mapped: no helper
    pager.behind(0, N)
    pager.close()
    assert float(a.sum()) == N


def test_spans_stay_inside_the_mapping_and_keep_the_boundary_pages(tmp_path):
    page = mmap.PAGESIZE
    path = tmp_path / "h.npy"
    np.save(path, np.arange(3 * page, dtype=np.float32))      # a 128-byte header first
    arr = np.load(path, mmap_mode="r")
    m = _Mapped(arr, arr._mmap)
    assert m.offset == 128 and m.length == 128 + 3 * page * 4
    # Elements [0, page): bytes [128, 128 + 4 page). Drop: whole pages up to the one
    # holding the end (still needed by the next step); populate: outward.
    assert m.span(0, page, whole_pages_only=True) == (0, 4 * page)
    assert m.span(0, page, whole_pages_only=False) == (0, 5 * page)
    assert m.span(2 * page, 3 * page, whole_pages_only=False) == (8 * page, m.length)
