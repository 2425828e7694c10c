"""Feeds for the simulator: samples read from an input list, or random ones
(only where the caller says so plainly: prepare checks without calibration data)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np
import onnx

from qnn_ci.calibration.input_list import read_input_list, read_raw
from qnn_ci.errors import UserError
from qnn_ci.model.onnx_io import graph_inputs

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class InputMeta:
    """One graph input of a model: its name, dtype and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def inputs_of(model: onnx.ModelProto, *, source: Path | None = None) -> list[InputMeta]:
    """Graph inputs with their static shapes; a dynamic input is a UserError
    pointing at the static-shape step."""
    metas: list[InputMeta] = []
    for io in graph_inputs(model):
        shape = io.static_shape
        if shape is None:
            dims = ",".join(str(d if d is not None else "?") for d in io.dims or ())
            raise UserError(f"input {io.name!r} has dynamic dims [{dims}]: pin it first "
                            f"(qnn-ci shapes / the static_shapes stage, or --dim "
                            f"{io.name}=d0,d1,...)", file=source)
        metas.append(InputMeta(io.name, io.dtype, shape))
    return metas


def inputs_from_data(data: dict[str, dict[str, object]]) -> list[InputMeta]:
    """The calibration stage's ``data["inputs"]``: {name: {"dtype", "shape"}}."""
    return [InputMeta(n, str(d["dtype"]), tuple(int(x) for x in d["shape"]))  # type: ignore[attr-defined]
            for n, d in data.items()]


class SampleList(Sequence[Feeds]):
    """Samples of an input list, checked up front, read from disk on access (a
    calibration set of a large model need not fit in memory)."""

    def __init__(self, rows: list[dict[str, Path]], inputs: list[InputMeta]) -> None:
        self._rows = rows
        self._by_name = {m.name: m for m in inputs}

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self) -> list[dict[str, Path]]:
        """The raw file of every input, per sample."""
        return list(self._rows)

    def metas(self) -> list[InputMeta]:
        return list(self._by_name.values())

    @overload
    def __getitem__(self, index: int) -> Feeds: ...
    @overload
    def __getitem__(self, index: slice) -> SampleList: ...

    def __getitem__(self, index: int | slice) -> Feeds | SampleList:
        if isinstance(index, slice):
            return SampleList(self._rows[index], list(self._by_name.values()))
        row = self._rows[index]
        return {n: read_raw(p, self._by_name[n].dtype, self._by_name[n].shape)
                for n, p in row.items()}


def samples_digest(samples: Sequence[Feeds]) -> str:
    """A digest of the samples' content, in order: the raw files' bytes for a
    ``SampleList`` (read from disk once, memoised), else the arrays' bytes."""
    from qnn_ci.engine.cache import digest, file_digest

    if isinstance(samples, SampleList):
        return digest({"inputs": [(m.name, m.dtype, list(m.shape))
                                  for m in samples.metas()],
                       "rows": [{n: file_digest(p) for n, p in sorted(row.items())}
                                for row in samples.rows()]})
    h = hashlib.sha256()
    for feeds in samples:
        for name in sorted(feeds):
            arr = np.ascontiguousarray(feeds[name])
            h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
            h.update(arr.tobytes())
    return h.hexdigest()


def load_samples(input_list: Path, inputs: list[InputMeta], *,
                 limit: int | None = None) -> SampleList:
    """The first ``limit`` samples of an input list; a missing or wrongly sized raw
    file, or a sample that misses an input, is a UserError naming it."""
    by_name = {m.name: m for m in inputs}
    lines = read_input_list(input_list, [m.name for m in inputs])
    if limit is not None:
        lines = lines[:limit]
    for number, line in enumerate(lines, start=1):
        missing = sorted(set(by_name) - set(line))
        if missing:
            raise UserError(f"sample {number} has no entry for input(s) {', '.join(missing)}",
                            file=input_list)
        for name, path in line.items():
            meta = by_name.get(name)
            if meta is None:
                raise UserError(f"sample {number} names {name!r}, which is not a graph input "
                                f"({', '.join(by_name)})", file=input_list)
            want = int(np.prod(meta.shape)) * np.dtype(meta.dtype).itemsize
            try:
                size = path.stat().st_size
            except OSError:
                raise UserError(f"sample {number}: raw file not found: {path}",
                                file=input_list) from None
            if size != want:
                raise UserError(f"sample {number}: {path} has {size} bytes, input {name!r} "
                                f"needs {want} ({meta.dtype} {list(meta.shape)})",
                                file=input_list)
    if not lines:
        raise UserError("the input list has no samples", file=input_list)
    return SampleList(lines, inputs)


def random_samples(inputs: list[InputMeta], count: int, *, seed: int = 0) -> list[Feeds]:
    """Uniform [0, 1) floats, small non-negative integers, random booleans."""
    rng = np.random.default_rng(seed)
    out: list[Feeds] = []
    for _ in range(count):
        feeds: Feeds = {}
        for m in inputs:
            dt = np.dtype(m.dtype)
            if dt.kind == "f":
                feeds[m.name] = rng.random(m.shape, dtype=np.float32).astype(dt)
            elif dt.kind == "b":
                feeds[m.name] = rng.random(m.shape) < 0.5
            else:
                feeds[m.name] = rng.integers(0, 4, m.shape).astype(dt)
        out.append(feeds)
    return out
