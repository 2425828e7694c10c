"""Layout transposes: chunked and memory-mapped, checked against plain numpy."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.boards.layout import (
    IoLayout,
    inverse,
    outputs_to_onnx_order,
    spatial_first,
    transpose_file,
)


@pytest.mark.parametrize(("dtype", "shape", "chunk"), [
    ("float32", (1, 5, 7, 9), 64),           # many blocks, each a slice of one axis
    ("uint16", (2, 3, 11, 13), 100),         # a block boundary inside a row
    ("uint8", (1, 4, 6, 8, 3), 7),           # rows larger than the chunk
    ("float32", (1, 3, 4, 4), 1 << 20),      # the whole tensor in one block
])
def test_transpose_file_matches_numpy(tmp_path: Path, dtype: str, shape: tuple[int, ...],
                                      chunk: int) -> None:
    rng = np.random.default_rng(0)
    data = (rng.standard_normal(shape) * 1000).astype(dtype)
    src = tmp_path / "src.raw"
    data.tofile(src)
    assert src.stat().st_size > chunk or chunk == 1 << 20
    for perm in (spatial_first(len(shape)), inverse(spatial_first(len(shape))),
                 tuple(reversed(range(len(shape))))):
        out = tmp_path / "out.raw"
        transpose_file(src, out, shape, perm, data.itemsize, chunk_bytes=chunk)
        want = np.ascontiguousarray(np.transpose(data, perm))
        assert out.read_bytes() == want.tobytes()
    # in place, and back again
    perm = spatial_first(len(shape))
    transpose_file(src, src, shape, perm, data.itemsize, chunk_bytes=chunk)
    moved = tuple(shape[i] for i in perm)
    transpose_file(src, src, moved, inverse(perm), data.itemsize, chunk_bytes=chunk)
    assert src.read_bytes() == data.tobytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.raw", "src.raw"]


def test_memory_stays_bounded(tmp_path: Path) -> None:
    shape = (1, 16, 256, 256)                                    # 4 MiB of float32
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    src = tmp_path / "big.raw"
    data.tofile(src)
    chunk = 64 * 1024
    tracemalloc.start()
    try:
        transpose_file(src, src, shape, spatial_first(4), 4, chunk_bytes=chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * chunk + 256 * 1024, peak                # not the 4 MiB tensor
    want = np.ascontiguousarray(np.transpose(data, spatial_first(4)))
    assert np.array_equal(np.fromfile(src, np.float32), want.reshape(-1))


def test_outputs_back_to_onnx_order_in_any_result_layout(tmp_path: Path) -> None:
    """Float and native files, directly in Result_N, below a graph folder, or in
    sub-folders made by a `/` in the tensor name: all are found and transposed."""
    shape = (1, 4, 6, 5)
    perm = spatial_first(4)
    rng = np.random.default_rng(1)
    onnx_order = {n: rng.standard_normal(shape).astype(np.float32) for n in range(3)}
    out = tmp_path / "out"
    places = {0: "Result_0/feat_map_0", 1: "Result_1/cnn/feat_map_0",
              2: "Result_2/feat/map_0"}
    for n, key in places.items():
        path = out / f"{key}.raw"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.ascontiguousarray(onnx_order[n].transpose(perm)).tofile(path)
        codes = (onnx_order[n] * 100 + 1000).astype(np.uint16)
        np.ascontiguousarray(codes.transpose(perm)).tofile(out / f"{key}_native.raw")
    (out / "Result_0" / "logits.raw").write_bytes(b"\0" * 40)      # not moved: untouched
    layout = IoLayout(perms={"feat/map:0": perm})
    done = outputs_to_onnx_order(out, {"feat/map:0": shape, "logits": (1, 10)}, layout,
                                 chunk_bytes=32)
    assert done == 6
    for n, key in places.items():
        assert np.array_equal(np.fromfile(out / f"{key}.raw", np.float32).reshape(shape),
                              onnx_order[n])
        codes = np.fromfile(out / f"{key}_native.raw", np.uint16).reshape(shape)
        assert np.array_equal(codes, (onnx_order[n] * 100 + 1000).astype(np.uint16))
    assert (out / "Result_0" / "logits.raw").read_bytes() == b"\0" * 40
