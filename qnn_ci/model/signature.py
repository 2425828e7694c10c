"""A model's signature (graph inputs, outputs, external data files) without
importing onnx or numpy on a cached re-run.

The records (``ModelSignature``, ``TensorIO``) are in ``qnn_ci.model.tensors``;
``qnn_ci.model.onnx_io`` computes signatures with the full, hardened loader.
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

from qnn_ci.engine.cache import file_digest
from qnn_ci.errors import UserError
from qnn_ci.model.tensors import ModelSignature
from qnn_ci.util.memo import Memo, code_digest, memo_key

log = logging.getLogger(__name__)

KIND = "signature"
FORMAT = "1"


@cache
def _code() -> str:
    """The code a signature comes from: qnn-ci's readers and the onnx release."""
    from qnn_ci.util.memo import package_sources

    here = Path(__file__).resolve().parent
    ours = (here / "signature.py", here / "tensors.py", here / "onnx_io.py",
            here.parent / "util" / "safe_read.py")
    onnx_files = tuple(p for p in package_sources("onnx") if p.name == "version.py")
    if not onnx_files:   # cannot tell the onnx release apart: no memo
        return ""
    return code_digest(ours + onnx_files)


def _read(path: Path) -> ModelSignature:
    from qnn_ci.model.onnx_io import model_signature  # onnx and numpy: only on a miss

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
