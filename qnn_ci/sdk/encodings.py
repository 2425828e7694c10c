"""AIMET ``.encodings`` files (the input to ``--quantization_overrides``).

Three layouts are read:

- 0.6.1: ``activation_encodings`` / ``param_encodings`` are objects keyed by
  tensor name, each a list of encodings (one per channel for per-channel
  params) with ``bitwidth``, ``dtype`` (``int``/``float``), ``is_symmetric``
  (the STRING ``"True"``/``"False"``), ``min``, ``max``, ``scale``, ``offset``.
- 1.0.0: the same two sections as lists of objects with ``name``,
  ``enc_type`` (PER_TENSOR, PER_CHANNEL, PER_BLOCK, LPBQ), ``dtype``
  (INT/FLOAT), ``bw``, ``is_sym`` and ``scale``/``offset`` arrays. No min/max.
- 2.0.0 (and the 2.1.0 superset): one ``encodings`` list of objects with
  ``name``, ``output_dtype`` (``int8``, ``uint16``, ``float8e4m3fn``, ...),
  ``y_scale``, optional ``y_zero_point``, ``axis``, ``block_size``. This layout
  does not say which tensors are activations and which are parameters: its
  entries land in ``Encodings.unclassified`` and ``coverage`` sorts them
  against the model.

Offsets follow QNN's convention, ``real = (q + offset) * scale``; a 2.0.0
``y_zero_point`` z is stored as ``offset = -z``.

Encodings name ONNX tensors. A name the model does not have is silently
ignored by the converter, so ``qnn_ci.sdk.encodings_coverage`` compares the file
with the graph.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.util.safe_read import MiB, load_json, read_text

log = logging.getLogger(__name__)

ENC_TYPES = ("PER_TENSOR", "PER_CHANNEL", "PER_BLOCK", "LPBQ")
_DTYPE_BITS = re.compile(r"^(u?int|float)([0-9]{1,3})(?![0-9])")
ENCODINGS_CAP = 1024 * MiB      # per-channel LLM exports reach hundreds of MB
ENCODINGS_HINT = ("quantization overrides must be an AIMET .encodings file (JSON with "
                  "activation_encodings/param_encodings, or encodings)")
MAX_LIST_DEPTH = 8              # scale/offset values nest at most a few levels


@dataclass
class Enc:
    """One AIMET encoding: bitwidth, dtype, scale/offset or min/max, per-channel/block axis."""

    bitwidth: int | None
    dtype: str = "int"                 # "int" | "float"
    scale: float | None = None
    offset: float | None = None        # QNN convention: real = (q + offset) * scale
    min: float | None = None
    max: float | None = None
    symmetric: bool | None = None
    axis: int | None = None            # per-channel / per-block axis when the file says
    enc_type: str = "PER_TENSOR"
    block_size: int | None = None
    axes: list[int] | None = None          # 2.0.0 block quantization: axis as a list
    block_shape: list[int] | None = None   # ... and block_size as a list

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Encodings:
    """An AIMET ``.encodings`` file read: its version and each section's encodings by name."""

    source: str
    version: str
    activations: dict[str, list[Enc]] = field(default_factory=dict)
    params: dict[str, list[Enc]] = field(default_factory=dict)
    unclassified: dict[str, list[Enc]] = field(default_factory=dict)  # 2.0.0 layout
    quantizer_args: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def bitwidths(self) -> set[int]:
        return {e.bitwidth for _, encs in self.entries() for e in encs
                if e.bitwidth is not None}

    def entries(self) -> Iterator[tuple[str, list[Enc]]]:
        yield from self.activations.items()
        yield from self.params.items()
        yield from self.unclassified.items()

    def names(self) -> set[str]:
        return set(self.activations) | set(self.params) | set(self.unclassified)

    def by_name(self) -> dict[str, list[Enc]]:
        return {n: e for n, e in self.entries()}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "version": self.version,
                "activations": len(self.activations), "params": len(self.params),
                "unclassified": len(self.unclassified),
                "bitwidths": sorted(self.bitwidths), "notes": list(self.notes)}


# -- reading ---------------------------------------------------------------

class _Reader:
    """Typed access to JSON values that raises UserError naming the JSON path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, jpath: str, what: str) -> UserError:
        return UserError(what, file=self.path, key=jpath)

    def obj(self, v: Any, jpath: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(jpath, "expected an object")
        return v

    def lst(self, v: Any, jpath: str) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(jpath, "expected a list")
        return v

    def int_(self, d: dict[str, Any], key: str, jpath: str, *, required: bool = True
             ) -> int | None:
        if key not in d or d[key] is None:
            if required:
                raise self.fail(f"{jpath}.{key}", "missing (expected an integer)")
            return None
        v = d[key]
        if isinstance(v, bool) or not (isinstance(v, int) or
                                       (isinstance(v, float) and v.is_integer())):
            raise self.fail(f"{jpath}.{key}", f"expected an integer, got {_short(v)}")
        return int(v)

    def num(self, v: Any, jpath: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(jpath, f"expected a number, got {_short(v)}")
        try:
            return float(v)
        except OverflowError:
            raise self.fail(jpath, f"number too large ({len(str(v))} digits)") from None

    def opt_num(self, d: dict[str, Any], key: str, jpath: str) -> float | None:
        if key not in d or d[key] is None:
            return None
        return self.num(d[key], f"{jpath}.{key}")

    def flag(self, d: dict[str, Any], key: str, jpath: str) -> bool | None:
        if key not in d or d[key] is None:
            return None
        v = d[key]
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true"
        raise self.fail(f"{jpath}.{key}", f"expected True or False, got {_short(v)}")

    def string(self, d: dict[str, Any], key: str, jpath: str) -> str:
        v = d.get(key)
        if not isinstance(v, str) or not v:
            raise self.fail(f"{jpath}.{key}", "missing (expected a non-empty string)")
        return v

    def flat_numbers(self, v: Any, jpath: str, depth: int = 0) -> list[float]:
        if isinstance(v, list):
            if depth >= MAX_LIST_DEPTH:
                raise self.fail(jpath, f"lists nested more than {MAX_LIST_DEPTH} deep "
                                       "(expected numbers or lists of numbers)")
            out: list[float] = []
            for i, x in enumerate(v):
                out.extend(self.flat_numbers(x, f"{jpath}[{i}]", depth + 1))
            return out
        return [self.num(v, jpath)]


def _short(v: Any) -> str:
    """A JSON value for a message: its repr, at most 60 characters."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _dtype_word(v: Any) -> str:
    return "float" if isinstance(v, str) and v.strip().lower() == "float" else "int"


def _read_061(r: _Reader, section: Any, sname: str) -> dict[str, list[Enc]]:
    out: dict[str, list[Enc]] = {}
    for name, raw in r.obj(section, sname).items():
        base = f"{sname}[{_short(name)}]"
        items = [raw] if isinstance(raw, dict) else r.lst(raw, base)
        encs: list[Enc] = []
        for i, item in enumerate(items):
            jp = f"{base}[{i}]"
            d = r.obj(item, jp)
            encs.append(Enc(
                bitwidth=r.int_(d, "bitwidth", jp), dtype=_dtype_word(d.get("dtype")),
                scale=r.opt_num(d, "scale", jp), offset=r.opt_num(d, "offset", jp),
                min=r.opt_num(d, "min", jp), max=r.opt_num(d, "max", jp),
                symmetric=r.flag(d, "is_symmetric", jp),
                enc_type="PER_CHANNEL" if len(items) > 1 else "PER_TENSOR"))
        out[name] = encs
    return out


def _read_100(r: _Reader, section: Any, sname: str) -> dict[str, list[Enc]]:
    out: dict[str, list[Enc]] = {}
    for i, item in enumerate(r.lst(section, sname)):
        jp = f"{sname}[{i}]"
        d = r.obj(item, jp)
        name = r.string(d, "name", jp)
        enc_type = str(d.get("enc_type", "PER_TENSOR")).upper()
        if enc_type not in ENC_TYPES:
            raise r.fail(f"{jp}.enc_type", f"expected one of {', '.join(ENC_TYPES)}, "
                                           f"got {_short(d.get('enc_type'))}")
        dtype = _dtype_word(d.get("dtype"))
        bw = r.int_(d, "bw", jp)
        sym = r.flag(d, "is_sym", jp)
        block = r.int_(d, "block_size", jp, required=enc_type in ("PER_BLOCK", "LPBQ"))
        scales = r.flat_numbers(d["scale"], f"{jp}.scale") if "scale" in d else []
        offsets = r.flat_numbers(d["offset"], f"{jp}.offset") if "offset" in d else []
        if dtype == "int" and not scales:
            raise r.fail(f"{jp}.scale", "missing (an INT encoding needs scale values)")
        if offsets and len(offsets) != len(scales):
            raise r.fail(f"{jp}.offset", f"has {len(offsets)} values for "
                                         f"{len(scales)} scales")
        if not scales:
            out[name] = [Enc(bw, dtype, symmetric=sym, enc_type=enc_type, block_size=block)]
            continue
        out[name] = [Enc(bw, dtype, scale=s, offset=offsets[k] if offsets else None,
                         symmetric=sym, enc_type=enc_type, block_size=block)
                     for k, s in enumerate(scales)]
    return out


MAX_BLOCK_DIMS = 16     # a block shape has one entry per tensor dimension


def _int_or_list(r: _Reader, d: dict[str, Any], key: str, jpath: str
                 ) -> tuple[int | None, list[int] | None]:
    """(an integer, None) or, for block quantization, (None, a list of integers)."""
    v = d.get(key)
    if not isinstance(v, list):
        return r.int_(d, key, jpath, required=False), None
    if len(v) > MAX_BLOCK_DIMS:
        raise r.fail(f"{jpath}.{key}", f"block quantization {key} with {len(v)} entries "
                                       f"(expected at most {MAX_BLOCK_DIMS}, one per dimension)")
    out: list[int] = []
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int):
            raise r.fail(f"{jpath}.{key}[{i}]", f"block quantization {key}: expected an "
                                                f"integer, got {_short(x)}")
        out.append(x)
    return None, out


def _read_200(r: _Reader, section: Any, sname: str) -> dict[str, list[Enc]]:
    out: dict[str, list[Enc]] = {}
    for i, item in enumerate(r.lst(section, sname)):
        jp = f"{sname}[{i}]"
        d = r.obj(item, jp)
        name = r.string(d, "name", jp)
        odt = r.string(d, "output_dtype", jp)
        m = _DTYPE_BITS.match(odt.lower())
        if not m:
            raise r.fail(f"{jp}.output_dtype", f"unknown data type {_short(odt)} "
                                               f"(expected e.g. int8, uint16, int32)")
        dtype = "float" if m.group(1) == "float" else "int"
        bw = int(m.group(2))
        axis, axes = _int_or_list(r, d, "axis", jp)
        block, block_shape = _int_or_list(r, d, "block_size", jp)
        if "y_scale" in d and isinstance(d["y_scale"], dict):       # 2.1.0 meta encoding
            scales: list[float | None] = [None]
        elif "y_scale" in d:
            scales = list(r.flat_numbers(d["y_scale"], f"{jp}.y_scale"))
        elif "per_block_int_scale" in d:                           # 2.0.0 LPBQ
            scales = [None] * len(r.flat_numbers(d["per_block_int_scale"],
                                                 f"{jp}.per_block_int_scale"))
        else:
            raise r.fail(f"{jp}.y_scale", "missing (expected a number or a list)")
        zps = (r.flat_numbers(d["y_zero_point"], f"{jp}.y_zero_point")
               if d.get("y_zero_point") is not None else [])
        if zps and len(zps) not in (1, len(scales)):
            raise r.fail(f"{jp}.y_zero_point", f"has {len(zps)} values for "
                                               f"{len(scales)} scales")
        enc_type = ("LPBQ" if "per_block_int_scale" in d or isinstance(d.get("y_scale"), dict)
                    else "PER_BLOCK" if block or block_shape else
                    "PER_CHANNEL" if axis is not None or axes else "PER_TENSOR")
        encs = []
        for k, s in enumerate(scales):
            zp = zps[k if len(zps) > 1 else 0] if zps else 0.0
            encs.append(Enc(bw, dtype, scale=s, offset=(-zp if dtype == "int" else None),
                            axis=axis, enc_type=enc_type, block_size=block, axes=axes,
                            block_shape=block_shape))
        out[name] = encs
    return out


def read_encodings(path: Path) -> Encodings:
    """Read an AIMET ``.encodings`` file (0.6.1, 1.0.0, 2.0.0/2.1.0).
    Malformed content raises UserError naming the file and the JSON path."""
    path = Path(path)
    text = read_text(path, cap=ENCODINGS_CAP, what="AIMET .encodings file",
                     hint=ENCODINGS_HINT, missing="encodings file not found")
    r = _Reader(path)
    raw = load_json(text, path, hint=ENCODINGS_HINT)
    data = r.obj(raw, "(top level)")
    if _torch_sidecar(data, path):
        raise UserError(TORCH_SIDECAR, file=path)
    version = data.get("version")
    notes: list[str] = []
    acts, params = data.get("activation_encodings"), data.get("param_encodings")
    enc = Encodings(source=str(path), version=str(version) if version is not None else "?")
    qa = data.get("quantizer_args")
    enc.quantizer_args = qa if isinstance(qa, dict) else {}
    if "encodings" in data and acts is None and params is None:
        layout = "2.0.0"
        enc.unclassified = _read_200(r, data["encodings"], "encodings")
    elif acts is None and params is None:
        raise UserError("not an AIMET encodings file: none of activation_encodings, "
                        "param_encodings, encodings", file=path)
    elif isinstance(acts, list) or isinstance(params, list):
        layout = "1.0.0"
        enc.activations = _read_100(r, acts if acts is not None else [], "activation_encodings")
        enc.params = _read_100(r, params if params is not None else [], "param_encodings")
    else:
        layout = "0.6.1"
        enc.activations = _read_061(r, acts if acts is not None else {}, "activation_encodings")
        enc.params = _read_061(r, params if params is not None else {}, "param_encodings")
    if version is None:
        foreign = [k for k in ("inputs", "outputs") if k in data]
        if foreign:
            entries = len(enc.activations) + len(enc.params) + len(enc.unclassified)
            raise UserError(
                f"no version key and {'/'.join(foreign)} section(s): not an AIMET "
                f".encodings layout (0.6.1, 1.0.0, 2.0.0); read as {layout} it would give "
                f"{entries} entries and ignore those sections; pass the AIMET export "
                f"itself", file=path)
        enc.version = layout
        notes.append(f"no version key; read as the {layout} layout")
    elif not str(version).startswith(layout.split(".")[0] + "."):
        notes.append(f"version {version} with the {layout} layout; read by layout")
    enc.notes = notes
    return enc


TORCH_SIDECAR = ("this is AIMET's PyTorch sidecar (keyed by module names, not ONNX tensor "
                 "names), not an input of qnn-onnx-converter; pass the .encodings file "
                 "exported beside it")


def _torch_sidecar(data: dict[str, Any], path: Path) -> bool:
    """AIMET for PyTorch writes ``<name>_torch.encodings`` beside the real export: its
    activation entries are modules, each ``{"input": {...}, "output": {...}}``."""
    acts = data.get("activation_encodings")
    if isinstance(acts, dict):
        for value in list(acts.values())[:MAX_SNIFF]:
            if isinstance(value, dict) and value and set(value) <= {"input", "output"}:
                return True
    return path.name.endswith("_torch.encodings") and "encodings" not in data and \
        not isinstance(acts, list)


MAX_SNIFF = 50
