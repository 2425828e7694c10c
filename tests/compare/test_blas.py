"""numpy's OpenBLAS reductions (qnn_ci.compare.blas): found in this numpy, equal
to numpy's own answers at every length, and turned off by the environment."""

from __future__ import annotations

import numpy as np
import pytest

from qnn_ci.compare import blas


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> blas.Kernels:
    monkeypatch.delenv(blas.ENV_OFF, raising=False)
    k = blas.kernels()
    if k is None:
        pytest.skip("numpy is not built with OpenBLAS")
    return k


@pytest.mark.parametrize("n", [0, 1, 31, blas.PIECE - 1, blas.PIECE, blas.PIECE + 1,
                               5 * blas.PIECE + 77])
def test_asum_and_amax_equal_numpy(kernels: blas.Kernels, rng, n: int) -> None:
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(np.float32)
    want = float(np.abs(x.astype(np.float64)).sum())
    assert kernels.asum(x) == pytest.approx(want, rel=1e-6, abs=0.0)
    if n:
        assert kernels.amax(x) == float(np.abs(x).max())      # a maximum is exact


def test_asum_reads_only_its_own_elements(kernels: blas.Kernels) -> None:
    """A slice in the middle of a buffer: nothing before or after it is summed."""
    buf = np.full(3 * blas.PIECE, 1000.0, np.float32)
    buf[100:100 + blas.PIECE + 3] = -1.0
    part = buf[100:100 + blas.PIECE + 3]
    assert kernels.asum(part) == blas.PIECE + 3
    assert kernels.amax(part) == 1.0


def test_the_environment_turns_it_off(kernels: blas.Kernels,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(blas.ENV_OFF, "1")
    assert blas.kernels() is None
    monkeypatch.setenv(blas.ENV_OFF, "0")               # "0" is not "off"
    assert blas.kernels() is kernels


def test_a_library_without_the_functions_gives_none(tmp_path) -> None:
    """A file that is not a BLAS (here: not a shared library at all) is passed over."""
    fake = tmp_path / "libscipy_openblas64_-fake.so"
    fake.write_bytes(b"not a library")
    assert blas._load(fake) is None
