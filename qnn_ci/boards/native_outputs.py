"""qnn-net-run's native output files (``--use_native_output_files``): each output
as ``<tensor>_native.raw`` in the graph's own data type instead of float32.

The type of each graph output comes from the converter's ``<name>_net.json``
(app-read tensors: ``data_type`` code, ``quant_params``). Quantized outputs
(``*FIXED_POINT_*`` with a defined scale/offset encoding) are dequantized with
``real = (q + offset) * scale`` (offsets are stored negative); other types are
converted as they are. The result is written next to the native file as the
float32 ``<tensor>.raw`` qnn-net-run would have written, a block at a time, so
the comparison reads both backends the same way and memory stays bounded.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qnn_ci.boards.result_files import match_outputs, result_files
from qnn_ci.compare.outputs import NATIVE_SUFFIX, match_names
from qnn_ci.engine.results import Finding
from qnn_ci.sdk.net_json import NetTensor, read_net_json

log = logging.getLogger(__name__)

APP_READ = 1
DEFINED = 1                      # quant_params.definition: QNN_DEFINITION_DEFINED
SCALE_OFFSET_ENCODINGS = (0, 2)  # scale-offset and its bitwidth variant (not per axis)
CHUNK_ELEMENTS = 4 * 1024 * 1024
_TYPE = re.compile(r"QNN_DATATYPE_(?:(?P<int>U?INT)|(?P<fixed>[SU])FIXED_POINT|"
                   r"(?P<float>FLOAT)|(?P<bool>BOOL))_(?P<bits>\d+)\Z")


@dataclass(frozen=True)
class NativeType:
    """A graph output's type in its native file: QNN data type, numpy dtype, scale/offset."""

    tensor: str                  # the tensor's name in _net.json
    data_type: str               # QNN_DATATYPE_*
    dtype: np.dtype              # how the file stores it (little-endian)
    scale: float | None = None   # set for quantized outputs
    offset: int | None = None

    @property
    def quantized(self) -> bool:
        return self.scale is not None

    def describe(self) -> str:
        kind = self.data_type.removeprefix("QNN_DATATYPE_")
        if self.quantized:
            return f"{kind} (scale {self.scale:g}, offset {self.offset})"
        return kind


def storage_dtype(data_type: str) -> np.dtype | None:
    """The numpy storage of a ``QNN_DATATYPE_*`` name, None when it has none."""
    m = _TYPE.match(data_type)
    if m is None:
        return None
    bits = int(m["bits"])
    if m["float"]:
        return np.dtype(f"<f{bits // 8}") if bits in (16, 32, 64) else None
    if bits not in (8, 16, 32, 64):
        return None
    if m["bool"]:
        return np.dtype("u1") if bits == 8 else None
    unsigned = (m["int"] == "UINT") if m["int"] else m["fixed"] == "U"
    return np.dtype(f"<{'u' if unsigned else 'i'}{bits // 8}")


def _native_type(t: NetTensor) -> NativeType | str:
    """The tensor's type, or why its native file cannot be read."""
    if t.data_type is None:
        return f"its data_type {t.data_type_code!r} is not a known QNN data type"
    dtype = storage_dtype(t.data_type)
    if dtype is None:
        return f"{t.data_type} has no numeric storage qnn-ci can read"
    if "FIXED_POINT" not in t.data_type:
        return NativeType(t.name, t.data_type, dtype)
    q = t.quant
    if q.get("definition") != DEFINED:
        return f"{t.data_type} without a defined encoding: no scale/offset to dequantize with"
    if q.get("encoding") not in SCALE_OFFSET_ENCODINGS or "scale" not in q:
        return (f"{t.data_type} with encoding {str(q.get('encoding'))[:40]!r} (per-axis?): "
                "only scale/offset encodings are dequantized")
    scale, offset = _number(q["scale"]), _number(q.get("offset", 0))
    if scale is None or not scale > 0:
        return (f"{t.data_type} with scale {str(q['scale'])[:40]!r}: not a positive finite "
                "number")
    if offset is None or not offset.is_integer():
        return f"{t.data_type} with offset {str(q.get('offset'))[:40]!r}: not an integer"
    return NativeType(t.name, t.data_type, dtype, scale, int(offset))


def _number(v: object) -> float | None:
    """A finite JSON number as float, None for anything else."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def native_types(net_json: Path, outputs: Iterable[str]
                 ) -> tuple[dict[str, NativeType], list[Finding]]:
    """{graph output name: its native type} from ``net_json``, and an error finding
    for every output whose native file cannot be read."""
    nj = read_net_json(Path(net_json))
    app_read = {t.name: t for t in nj.tensors if t.type_code == APP_READ}
    names = list(outputs)
    found = match_names(names, app_read)
    types: dict[str, NativeType] = {}
    findings: list[Finding] = []
    for name in names:
        tensor = app_read.get(found.get(name, ""))
        why = (_native_type(tensor) if tensor is not None
               else f"it is not among the graph outputs of {net_json}")
        if isinstance(why, NativeType):
            types[name] = why
        else:
            findings.append(Finding(
                "board.native_type", f"native_outputs: output {name}: {why}; compare "
                "float outputs instead (native_outputs: false)", subject=name))
    return types, findings


def quant_steps(net_json: Path | None, outputs: Iterable[str]) -> dict[str, float]:
    """{graph output name: its quantization step (scale)} for the outputs the
    converter quantized with one scale/offset; the comparison needs it to tell a
    near-zero reference from a real signal. Empty when unknown."""
    if net_json is None or not Path(net_json).is_file():
        return {}
    try:
        types, _ = native_types(Path(net_json), outputs)
    except Exception as exc:  # an unreadable _net.json is reported by other stages
        log.info("no quantization steps from %s: %s", net_json, exc)
        return {}
    return {n: t.scale for n, t in types.items() if t.scale}


def dequantize_file(native: Path, target: Path, t: NativeType, *,
                    chunk: int = CHUNK_ELEMENTS) -> None:
    """Write ``target`` as float32 from the native file, ``chunk`` elements at a time."""
    count = native.stat().st_size // t.dtype.itemsize
    tmp = target.with_name(f".{target.name}.dequantizing")
    try:
        with tmp.open("wb") as fh:
            if count:
                data = np.memmap(native, dtype=t.dtype, mode="r", shape=(count,))
                for start in range(0, count, chunk):
                    block = np.asarray(data[start:start + chunk], dtype=np.float64)
                    if t.quantized:
                        assert t.scale is not None and t.offset is not None
                        block = (block + t.offset) * t.scale
                    block.astype("<f4").tofile(fh)
                del data
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def dequantize_outputs(out_dir: Path, types: dict[str, NativeType], *,
                       chunk: int = CHUNK_ELEMENTS) -> int:
    """For every ``Result_N/<key>_native.raw`` of an output in ``types`` write the
    float32 ``Result_N/<key>.raw`` beside it. A file that is not a whole number of
    elements is skipped (the result checks name it). Returns the files written."""
    done = 0
    for files in result_files(out_dir).values():
        for name, key in match_outputs(types, files, native=True).items():
            path, t = files[key], types[name]
            if path.stat().st_size % t.dtype.itemsize:
                continue
            target = path.with_name(path.name[: -len(NATIVE_SUFFIX + ".raw")] + ".raw")
            if target.exists() and not target.is_file():
                continue          # a folder (or device) in the way: the result checks name it
            dequantize_file(path, target, t, chunk=chunk)
            done += 1
    log.debug("dequantized %d native output file(s) in %s", done, out_dir)
    return done
