"""Two float32 reductions numpy does in several passes, from numpy's own OpenBLAS
in one: Σ|x| (``sasum``) and max |x| (``samax``, an OpenBLAS extension).

numpy's wheels ship OpenBLAS beside the package (``numpy.libs/`` on Linux and
Windows, ``numpy/.dylibs/`` on macOS), with every symbol prefixed ``scipy_`` and,
for the 64-bit-integer build, suffixed ``64_``. The library is already loaded by
numpy itself; opening it again here only looks its functions up. When numpy was
built against another BLAS (a distribution's numpy, MKL, Accelerate) nothing is
found and ``kernels()`` is None: the fold then does the same with numpy's passes
(``np.abs``, a dot with ones, ``np.maximum.reduce``), to the same numbers.

``QNN_CI_NUMPY_REDUCTIONS=1`` ignores the library (the tests run both ways).

Both functions read a contiguous float32 buffer, write nothing and hold no
reference to it; the caller keeps the array alive across the call.

``asum`` calls ``sasum`` once per ``PIECE`` elements and adds the float32 results
up in float64. OpenBLAS runs a ``sasum`` of more than 10000 elements on its
thread pool, and waking the pool once per block of the fold cost more than the
second core gave back: the whole ``qnn-ci compare`` of 2 x 1 GB took 0.43 s with
256 Ki-element calls against 0.34 s with pieces (and 0.39 s without OpenBLAS).
``samax`` is never threaded by OpenBLAS and takes a block in one call.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ENV_OFF = "QNN_CI_NUMPY_REDUCTIONS"
# (symbol prefix, suffix, C integer type) of the builds numpy's wheels have shipped.
PIECE = 8192                 # elements per sasum call: under OpenBLAS's threading threshold
_SPELLINGS = (("scipy_cblas_", "64_", ctypes.c_int64),
              ("scipy_cblas_", "", ctypes.c_int32),
              ("cblas_", "64_", ctypes.c_int64))

Reduction = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class Kernels:
    """``asum(x)`` = Σ|x| and ``amax(x)`` = max |x| of a C-contiguous float32 array."""

    asum: Reduction
    amax: Reduction
    library: str


def _candidates() -> list[Path]:
    here = Path(np.__file__).resolve().parent
    found: list[Path] = []
    for folder, pattern in ((here.parent / "numpy.libs", "*openblas*"),
                            (here / ".dylibs", "*openblas*")):
        if folder.is_dir():
            found.extend(sorted(folder.glob(pattern)))
    return [p for p in found if p.suffix in (".so", ".dylib", ".dll") or ".so." in p.name]


def _function(lib: ctypes.CDLL, name: str, integer: type) -> Any:
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    fn.argtypes = [integer, ctypes.c_void_p, integer]
    fn.restype = ctypes.c_float
    return fn


def _kernels(sasum: Any, samax: Any, library: str) -> Kernels:
    width = np.dtype(np.float32).itemsize

    def asum(x: np.ndarray) -> float:
        start = x.ctypes.data
        stop = start + x.size * width
        whole = stop - (x.size % PIECE) * width
        total = sum([sasum(PIECE, p, 1) for p in range(start, whole, PIECE * width)])
        return total + sasum(x.size % PIECE, whole, 1) if whole < stop else total

    def amax(x: np.ndarray) -> float:
        return float(samax(x.size, x.ctypes.data, 1))

    return Kernels(asum, amax, library)


def _load(path: Path) -> Kernels | None:
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return None
    for prefix, suffix, integer in _SPELLINGS:
        sasum = _function(lib, f"{prefix}sasum{suffix}", integer)
        samax = _function(lib, f"{prefix}samax{suffix}", integer)
        if sasum is not None and samax is not None:
            return _kernels(sasum, samax, path.name)
    return None


@functools.cache
def _found() -> Kernels | None:
    for path in _candidates():
        kernels = _load(path)
        if kernels is not None and _sane(kernels):
            return kernels
    return None


def _sane(k: Kernels) -> bool:
    """The functions answer a known case (a wrong integer width would not)."""
    probe = np.array([1.0, -3.0, 2.0] * 7000, dtype=np.float32)
    return k.asum(probe) == 42000.0 and k.amax(probe) == 3.0 and k.asum(probe[:0]) == 0.0


def kernels() -> Kernels | None:
    """numpy's OpenBLAS reductions, or None (not found, or turned off by ``ENV_OFF``)."""
    if os.environ.get(ENV_OFF, "").strip() not in ("", "0"):
        return None
    if sys.platform == "emscripten":     # pragma: no cover - no shared libraries there
        return None
    return _found()
