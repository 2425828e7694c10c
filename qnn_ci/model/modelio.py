"""Reading and writing the model without holding its weights in memory.

The model is loaded *without* its external data: every rewrite works on the
graph proto, weights stay in their files. onnxruntime sessions for the
intermediate models are made from files in a scratch folder and told where the
original external data lives; the output model gets its own ``<out>.data`` file,
copied tensor by tensor.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import onnx
import onnxruntime as ort

from qnn_ci.errors import UserError
from qnn_ci.model.onnx_io import (
    external_files,
    external_info,
    is_external,
    iter_tensors,
    load_model,
)
from qnn_ci.util.cores import limit_threads

log = logging.getLogger(__name__)

_EXT_DIR_KEY = "session.model_external_initializers_file_folder_path"
_CHUNK = 1 << 24


def load_proto(path: Path) -> onnx.ModelProto:
    """The model's protobuf, weights left in their external files (UserError when the
    file is missing, unreadable, not ONNX, or its external data is missing)."""
    model = load_model(path, external_data=False)
    if not model.HasField("graph") or not model.opset_import:
        raise UserError("not an ONNX model (no graph or no opset_import)", file=path)
    for t in iter_tensors(model.graph):
        if not is_external(t):
            continue
        info = {e.key: e.value for e in t.external_data}
        for key, value in info.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise UserError(f"tensor {t.name!r}: external_data {key!r} is not valid "
                                "UTF-8", file=path)
        for key in ("offset", "length"):
            if key in info and not (info[key].isascii() and info[key].isdigit()
                                    and len(info[key]) <= 19):
                raise UserError(f"tensor {t.name!r}: external_data {key} {info[key][:40]!r} "
                                "is not a byte count", file=path)
    for loc in sorted(external_files(model)):
        if not loc or "\0" in loc or os.path.isabs(loc) or ".." in Path(loc).parts:
            raise UserError(f"external data location {loc[:200]!r} must be a relative path "
                            "inside the model's folder", file=path)
        if not (path.parent / loc).is_file():
            raise UserError(f"external data file {loc[:200]!r} not found next to the model",
                            file=path)
    return model


def _session_options(*, optimize: bool, external_dir: Path | None) -> ort.SessionOptions:
    so = limit_threads(ort.SessionOptions())
    so.log_severity_level = 4   # errors come back as exceptions; keep stderr clean
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if external_dir is not None:
        so.add_session_config_entry(_EXT_DIR_KEY, str(external_dir))
    return so


def open_session(path: Path, *, optimize: bool = True,
                 external_dir: Path | None = None) -> ort.InferenceSession:
    """A CPU onnxruntime session for the model file at ``path``."""
    return ort.InferenceSession(str(path), _session_options(optimize=optimize,
                                                            external_dir=external_dir),
                                providers=["CPUExecutionProvider"])


class Scratch:
    """A temporary folder for intermediate models of one analysis. Sessions made
    here find the original's external data in ``source_dir``."""

    def __init__(self, source: Path, model: onnx.ModelProto) -> None:
        self.source = source
        self.external = bool(external_files(model))
        self.dir = Path(tempfile.mkdtemp(prefix="qnn-ci-shapes-"))

    def save(self, model: onnx.ModelProto, label: str) -> Path:
        path = self.dir / f"{label}.onnx"
        onnx.save(model, str(path))
        return path

    def session(self, model: onnx.ModelProto, label: str, *,
                optimize: bool = True) -> ort.InferenceSession:
        path = self.save(model, label)
        return open_session(path, optimize=optimize,
                            external_dir=self.source.parent if self.external else None)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _copy_range(src: Path, offset: int, length: int | None, dst: BinaryIO) -> int:
    written = 0
    with open(src, "rb") as fh:
        fh.seek(offset)
        while length is None or written < length:
            want = _CHUNK if length is None else min(_CHUNK, length - written)
            chunk = fh.read(want)
            if not chunk:
                break
            dst.write(chunk)
            written += len(chunk)
    return written


def write_model(model: onnx.ModelProto, out_path: Path, *, source: Path) -> None:
    """Save ``model`` to ``out_path``. Weights the original kept in external files
    go to ``<out name>.data`` next to it (copied tensor by tensor, never all in
    memory); the files are replaced atomically, so ``out_path`` may be the source."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_model = out_path.with_name(out_path.name + ".tmp")
    if not external_files(model):
        onnx.save(model, str(tmp_model))
        os.replace(tmp_model, out_path)
        return
    out = onnx.ModelProto()
    out.CopyFrom(model)
    data_name = out_path.name + ".data"
    tmp_data = out_path.with_name(data_name + ".tmp")
    with open(tmp_data, "wb") as dst:
        for t in iter_tensors(out.graph):
            if not is_external(t):
                continue
            info = external_info(t)
            offset = dst.tell()
            length = int(info["length"]) if "length" in info else None
            n = _copy_range(source.parent / info["location"], int(info.get("offset", 0)),
                            length, dst)
            del t.external_data[:]
            for k, v in (("location", data_name), ("offset", str(offset)),
                         ("length", str(n))):
                entry = t.external_data.add()
                entry.key, entry.value = k, v
    onnx.save(out, str(tmp_model))
    os.replace(tmp_data, out_path.with_name(data_name))
    os.replace(tmp_model, out_path)
    log.info("wrote %s with external data %s", out_path, data_name)
