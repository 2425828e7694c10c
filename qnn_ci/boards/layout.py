"""Graph input/output layout on the board vs in ONNX.

qnn-onnx-converter moves rank-4 tensors to spatial-first order by default: an
ONNX input declared ``1,4,512,512`` (NCHW) is a ``{1, 512, 512, 4}`` (NHWC)
application tensor in a real 2.31 ``.cpp``. qnn-net-run then reads raw inputs
and writes raw outputs in THAT order. Feeding NCHW bytes to an NHWC input has
the right size, so nothing fails: the board computes on scrambled data — a fast
wrong answer. So the board run transposes inputs into the board's order before
pushing them and transposes outputs back to ONNX order after pulling them.

The board's order comes from the converter's ``_net.json`` (app-write tensors =
graph inputs, app-read = graph outputs, names sanitised). A tensor whose board
dims equal the ONNX dims with axis 1 moved last is spatial-first; equal dims are
kept as they are; when both readings fit (e.g. ``1,8,8,8``), rank 4 is taken as
spatial-first (the converter's default) and said so.

Files are transposed through a memory map a block at a time (``transpose_file``),
so memory stays bounded whatever the tensor's size.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qnn_ci.boards.result_files import match_outputs, result_files
from qnn_ci.calibration.sources import Expected
from qnn_ci.compare.outputs import sanitize
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.sdk.net_json import read_net_json

log = logging.getLogger(__name__)

APP_WRITE, APP_READ = 0, 1
CHUNK_BYTES = 16 * 1024 * 1024      # at most this much of a tensor in memory at once


def spatial_first(rank: int) -> tuple[int, ...]:
    """The permutation NC... -> N...C (axis 1 moved last)."""
    return (0, *range(2, rank), 1)


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(perm))


@dataclass
class IoLayout:
    """Permutations from ONNX order to the board's order (only tensors that move)."""

    perms: dict[str, tuple[int, ...]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def describe(self) -> str:
        if not self.perms:
            return "board I/O in ONNX order"
        return "transposed on the board: " + ", ".join(
            f"{n} {list(p)}" for n, p in sorted(self.perms.items()))


def _perm_for(name: str, onnx: tuple[int, ...], board: list[int],
              findings: list[Finding]) -> tuple[int, ...] | None:
    if len(onnx) < 3 or len(board) != len(onnx):
        if list(onnx) != board:
            findings.append(Finding(
                "board.layout_unknown", f"{name}: board dims {board} do not match ONNX "
                f"dims {list(onnx)}; its data is passed as is", Severity.WARNING, name))
        return None
    perm = spatial_first(len(onnx))
    moved = [onnx[i] for i in perm]
    if board == moved and moved != list(onnx):
        return perm
    if board == list(onnx) and moved != list(onnx):
        return None
    if board == list(onnx):            # both readings fit
        if len(onnx) == 4:
            findings.append(Finding(
                "board.layout_ambiguous", f"{name}: dims {list(onnx)} read the same in NCHW "
                "and NHWC; taken as NHWC on the board (the converter's default)",
                Severity.INFO, name))
            return perm
        return None
    findings.append(Finding(
        "board.layout_unknown", f"{name}: board dims {board} are neither the ONNX dims "
        f"{list(onnx)} nor their spatial-first order {moved}; its data is passed as is",
        Severity.WARNING, name))
    return None


def board_layout(net_json: Path | None, inputs: dict[str, tuple[int, ...]],
                 outputs: dict[str, tuple[int, ...] | None]) -> IoLayout:
    """Which graph inputs/outputs the board holds in another order than ONNX."""
    if net_json is None or not Path(net_json).is_file():
        layout = IoLayout()
        layout.findings.append(Finding(
            "board.layout_unknown", "no converter _net.json: board inputs and outputs are "
            "assumed to be in ONNX order", Severity.WARNING))
        return layout
    nj = read_net_json(Path(net_json))
    io = {t.name: list(t.dims) if t.dims is not None else None
          for t in nj.tensors if t.type_code in (APP_WRITE, APP_READ)}
    return layout_from_dims(io, inputs, outputs, str(net_json))


def layout_from_dims(io: dict[str, list[int] | None], inputs: dict[str, tuple[int, ...]],
                     outputs: dict[str, tuple[int, ...] | None], source: str) -> IoLayout:
    """``board_layout`` from the graph's I/O dims as a tool reported them (``io``: graph
    input/output name, as the tool spells it -> its dims on the device; ``source``
    names where they were read)."""
    layout = IoLayout()
    for name, shape in list(inputs.items()) + list(outputs.items()):
        if shape is None:
            continue
        dims = io.get(name, io.get(sanitize(name)))
        if dims is None:
            layout.findings.append(Finding(
                "board.layout_unknown", f"{name}: not found among the graph inputs/outputs "
                f"of {source}; its data is passed as is", Severity.WARNING, name))
            continue
        perm = _perm_for(name, tuple(shape), list(dims), layout.findings)
        if perm is not None:
            layout.perms[name] = perm
    return layout


def _blocks(shape: tuple[int, ...], itemsize: int, chunk_bytes: int
            ) -> Iterator[tuple[int | slice, ...]]:
    """Index tuples that cover an array of ``shape`` in C order, each block at most
    ``chunk_bytes`` (or one innermost row when a row alone is larger)."""
    inner, k = itemsize, len(shape)
    while k > 0 and inner * shape[k - 1] <= chunk_bytes:
        inner *= shape[k - 1]
        k -= 1
    if k == 0:
        yield ()
        return
    step = max(1, chunk_bytes // inner)
    for head in np.ndindex(*shape[: k - 1]):
        for start in range(0, shape[k - 1], step):
            yield (*head, slice(start, min(start + step, shape[k - 1])))


def transpose_file(src: Path, dst: Path, shape: tuple[int, ...], perm: tuple[int, ...],
                   itemsize: int, *, chunk_bytes: int = CHUNK_BYTES) -> None:
    """Write the C-order array of ``shape`` in ``src`` to ``dst`` (may be ``src``) as
    ``np.transpose(array, perm)``, reading through a memory map and holding at most
    about ``chunk_bytes`` of it in memory. Elements are opaque ``itemsize``-byte
    values, so any dtype (float32, native uint8/uint16, ...) works."""
    src, dst = Path(src), Path(dst)
    out_shape = tuple(shape[i] for i in perm)
    tmp = dst.with_name(f".{dst.name}.transposing")
    try:
        with tmp.open("wb") as fh:
            if math.prod(shape):
                data = np.memmap(src, dtype=np.dtype(f"V{itemsize}"), mode="r", shape=shape)
                view = data.transpose(perm)
                for block in _blocks(out_shape, itemsize, chunk_bytes):
                    np.ascontiguousarray(view[block]).tofile(fh)
                del view, data
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def board_inputs(samples: list[dict[str, Path]], inputs: list[Expected],
                 layout: IoLayout, out_dir: Path) -> list[dict[str, Path]]:
    """Samples with every moved input rewritten in the board's order (others as is)."""
    if not any(e.name in layout.perms for e in inputs):
        return samples
    out_dir.mkdir(parents=True, exist_ok=True)
    result = []
    for n, sample in enumerate(samples):
        new = dict(sample)
        for k, e in enumerate(inputs):
            perm = layout.perms.get(e.name)
            if perm is None:
                continue
            target = out_dir / f"s{n}_i{k}.raw"
            itemsize = np.dtype(e.dtype).itemsize
            size = sample[e.name].stat().st_size
            if size != math.prod(e.shape) * itemsize:
                raise UserError(f"{size} bytes, but input {e.name} {list(e.shape)} {e.dtype} "
                                f"needs {math.prod(e.shape) * itemsize}; regenerate the "
                                "sample", file=sample[e.name])
            transpose_file(sample[e.name], target, tuple(e.shape), perm, itemsize)
            new[e.name] = target
        result.append(new)
    return result


def outputs_to_onnx_order(out_dir: Path, outputs: dict[str, tuple[int, ...] | None],
                          layout: IoLayout, *, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Transpose moved outputs in ``out_dir/Result_N`` back to ONNX order, in place
    (float and native files alike, found as ``qnn_ci.compare`` finds them; a file of
    the wrong size is left for the size checks to report). Returns the number of
    files rewritten."""
    done = 0
    moved = [n for n, shape in outputs.items() if shape is not None and n in layout.perms]
    for files in result_files(out_dir).values():
        for native in (False, True):
            for name, key in match_outputs(moved, files, native=native).items():
                shape = outputs[name]
                assert shape is not None
                perm = layout.perms[name]
                path, count = files[key], math.prod(shape)
                size = path.stat().st_size
                if count == 0 or size == 0 or size % count:
                    continue
                transpose_file(path, path, tuple(shape[i] for i in perm), inverse(perm),
                               size // count, chunk_bytes=chunk_bytes)
                done += 1
    return done
