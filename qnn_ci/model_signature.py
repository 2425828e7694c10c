"""A model's signature (graph inputs, outputs, external data files) without
importing onnx or numpy on a cached re-run.

``ModelSignature`` and ``TensorIO`` live here (light) and are re-exported by
``qnn_ci.onnx_io``, which computes signatures with the full, hardened loader.
``signature(path, memo_root)`` returns exactly what ``onnx_io.model_signature``
returns: from a disk memo keyed by the model file's full sha256 and the source of
the code (and the onnx release) that read it, else from ``onnx_io`` (whose errors,
one-line ``UserError``s, pass through and are never memoised).
"""

from __future__ import annotations

import logging
import stat
from functools import cache
from pathlib import Path
from typing import Any

from qnn_ci.cache import file_digest
from qnn_ci.errors import UserError
from qnn_ci.memo import Memo, code_digest, memo_key
from qnn_ci.records import dataclass

log = logging.getLogger(__name__)

Dim = int | str | None   # int: static (may be -1), str: dim_param, None: unknown
SigDims = tuple[int | None, ...] | None

KIND = "signature"
FORMAT = "1"


@dataclass(frozen=True)
class TensorIO:
    """A graph input or output: name, dtype and dims (symbolic dims as names)."""

    name: str
    dtype: str                     # numpy dtype name, "?" when undefined
    dims: tuple[Dim, ...] | None   # None: no shape at all

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        if self.dims is None or not all(isinstance(d, int) and d > 0 for d in self.dims):
            return None
        return tuple(int(d) for d in self.dims)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ModelSignature:
    """A model's graph inputs {name: (dims, dtype)} (dims: int, or None when not a
    fixed value) and output names, read without its weights."""

    inputs: dict[str, tuple[SigDims, str]]
    outputs: tuple[str, ...]
    external_data: tuple[str, ...] = ()      # external weight files, relative to the model

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [[n, None if d is None else list(d), t]
                           for n, (d, t) in self.inputs.items()],
                "outputs": list(self.outputs), "external_data": list(self.external_data)}

    @classmethod
    def from_json(cls, value: Any) -> ModelSignature | None:
        """The signature ``to_json`` wrote, or None for anything else."""
        if not isinstance(value, dict) or set(value) != {"inputs", "outputs", "external_data"}:
            return None
        inputs: dict[str, tuple[SigDims, str]] = {}
        raw_inputs, outputs, ext = value["inputs"], value["outputs"], value["external_data"]
        if not (isinstance(raw_inputs, list) and isinstance(outputs, list)
                and isinstance(ext, list)):
            return None
        for item in raw_inputs:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and isinstance(item[2], str) and item[0] not in inputs):
                return None
            dims = item[1]
            if dims is not None and not (isinstance(dims, list) and all(
                    d is None or (type(d) is int and d > 0) for d in dims)):
                return None
            inputs[item[0]] = (None if dims is None else tuple(dims), item[2])
        if not all(isinstance(o, str) for o in outputs) \
                or not all(isinstance(e, str) for e in ext):
            return None
        return cls(inputs, tuple(outputs), tuple(ext))


@cache
def _code() -> str:
    """The code a signature comes from: qnn-ci's readers and the onnx release."""
    from qnn_ci.memo import package_sources

    here = Path(__file__).resolve().parent
    ours = (here / "model_signature.py", here / "onnx_io.py", here / "safe_read.py",
            here / "shapes" / "modelio.py")
    onnx_files = tuple(p for p in package_sources("onnx") if p.name == "version.py")
    if not onnx_files:   # cannot tell the onnx release apart: no memo
        return ""
    return code_digest(ours + onnx_files)


def _read(path: Path) -> ModelSignature:
    from qnn_ci.onnx_io import model_signature  # onnx and numpy: only on a miss

    return model_signature(path)


_SEEN: dict[tuple[str, str], ModelSignature] = {}


def signature(path: Path, memo_root: Path | None = None) -> ModelSignature:
    """``onnx_io.model_signature(path)``, memoised on disk under ``memo_root`` (None:
    in this process only) by the file's content digest."""
    try:
        regular = stat.S_ISREG(path.stat().st_mode)   # a FIFO would block the hash
        content = file_digest(path) if regular else ""
    except FileNotFoundError:
        raise UserError("model not found", file=path) from None
    except (OSError, ValueError) as exc:
        log.debug("cannot hash %s (%s): reading it in full", path, exc)
        content = ""
    if not content:   # not a readable regular file: the full loader says why, in one line
        return _read(path)
    known = _SEEN.get((str(path), content))
    if known is not None:
        return known
    code = _code()
    memo = Memo(memo_root if code else None)
    key = memo_key(KIND, FORMAT, content, code)
    sig = ModelSignature.from_json(memo.get(KIND, key))
    if sig is None:
        sig = _read(path)
        try:
            unchanged = file_digest(path) == content
        except (OSError, ValueError):
            unchanged = False
        if not unchanged:   # rewritten while being read: nothing to remember
            return sig
        memo.put(KIND, key, sig.to_json())
    _SEEN[(str(path), content)] = sig
    return sig
