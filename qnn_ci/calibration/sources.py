"""Where calibration samples come from: an existing input list, a Python
generator of real input arrays, or the real outputs of another export run in
onnxruntime (never random tensors)."""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.calibration.input_list import read_raw, write_raw
from qnn_ci.calibration.project_modules import import_closure, refresh, remember
from qnn_ci.errors import UserError

log = logging.getLogger(__name__)

if TYPE_CHECKING:   # numpy only when samples are made (cached runs skip it)
    import numpy as np

Sample = dict[str, "np.ndarray"]


@dataclass(frozen=True)
class Expected:
    """What a model input expects of a calibration sample: name, dtype, shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@contextmanager
def _on_path(folder: Path) -> Iterator[None]:
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _evict_foreign(module_name: str, base_dir: Path) -> None:
    """When the manifest's folder holds the generator's top-level module, forget a
    same-named module imported earlier from elsewhere (another manifest's folder in
    the same pytest run), so each manifest gets its own."""
    top = module_name.split(".")[0]
    if not ((base_dir / f"{top}.py").is_file() or (base_dir / top).is_dir()):
        return
    base = base_dir.resolve()
    for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
        file = getattr(sys.modules[name], "__file__", None)
        if file and not Path(file).resolve().is_relative_to(base):
            del sys.modules[name]


def load_generator(spec: str, base_dir: Path, *, key: str = "calibration.generator") -> Any:
    """Import ``package.module:function``; the manifest's folder is on sys.path. Any
    error in the user's module is bad input, reported in one line."""
    module_name, _, func_name = spec.partition(":")
    _evict_foreign(module_name, base_dir)
    closure = import_closure(module_name, base_dir)
    with _on_path(base_dir):
        if closure is not None:
            refresh(closure)    # an edited project module is imported afresh
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise UserError(f"cannot import {module_name!r} for generator {spec!r}: {exc} "
                            f"(looked in {base_dir} and sys.path)", key=key) from None
        except Exception as exc:
            raise UserError(f"generator module {module_name!r} failed to import: "
                            f"{_describe(exc)}", key=key) from None
    if closure is not None:
        remember(closure)
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UserError(f"{module_name} has no function {func_name!r}", key=key)
    return func


def _describe(exc: BaseException) -> str:
    """`Type: message (file:line)` of the innermost frame in user code."""
    tb = exc.__traceback__
    where = ""
    while tb is not None:
        if "importlib" not in tb.tb_frame.f_code.co_filename:
            where = f" ({tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}:{exc.lineno})"
    return f"{type(exc).__name__}: {exc}{where}"


def generate(spec: str, base_dir: Path, count: int, *,
             key: str = "calibration.generator") -> Iterator[Sample]:
    """Up to ``count`` samples from a generator function. It may take the sample
    count as its one argument, or none; it returns an iterable of dicts."""
    func = load_generator(spec, base_dir, key=key)
    params = [p for p in inspect.signature(func).parameters.values()
              if p.default is inspect.Parameter.empty
              and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    with _on_path(base_dir):
        try:
            produced = func(count) if params else func()
        except Exception as exc:
            raise UserError(f"generator {spec!r} raised {_describe(exc)}", key=key) from None
    if not isinstance(produced, Iterable):
        raise UserError(f"generator {spec!r} returned {type(produced).__name__}, expected an "
                        "iterable of {input name: array} dicts", key=key)
    iterator = iter(produced)
    for i in range(count):
        try:
            sample = next(iterator)
        except StopIteration:
            return
        except Exception as exc:
            raise UserError(f"generator {spec!r} raised {_describe(exc)} at sample {i}",
                            key=key) from None
        if not isinstance(sample, dict):
            raise UserError(f"generator {spec!r} sample {i} is a {type(sample).__name__}, "
                            "expected a dict {input name: array}", key=key)
        yield sample


def check_sample(sample: dict[str, Any], expected: list[Expected], *, where: str,
                 key: str | None = None) -> Sample:
    """Arrays in exactly the expected dtype and shape, or a UserError naming the input,
    what was expected and what came."""
    names = [e.name for e in expected]
    missing = [n for n in names if n not in sample]
    extra = [n for n in sample if n not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected {', '.join(map(str, extra))}")
        raise UserError(f"{where}: {'; '.join(parts)} (graph inputs: {', '.join(names)})",
                        key=key)
    import numpy as np

    out: Sample = {}
    for e in expected:
        arr = np.asarray(sample[e.name])
        if arr.dtype != np.dtype(e.dtype):
            raise UserError(f"{where}: input {e.name!r} expected dtype {e.dtype}, got "
                            f"{arr.dtype.name}", key=key)
        if tuple(arr.shape) != tuple(e.shape):
            raise UserError(f"{where}: input {e.name!r} expected shape {list(e.shape)}, got "
                            f"{list(arr.shape)}", key=key)
        out[e.name] = arr
    return out


def write_sample(sample: Sample, expected: list[Expected], folder: Path,
                 index: int) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for e in expected:
        p = folder / f"{_safe(e.name)}_{index}.raw"
        write_raw(sample[e.name], p, e.dtype)
        paths[e.name] = p.resolve()
    return paths


def load_sample(paths: dict[str, Path], expected: list[Expected]) -> Sample:
    return {e.name: read_raw(paths[e.name], e.dtype, e.shape) for e in expected}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "input"


class UpstreamRunner:
    """Runs an upstream export's model in onnxruntime and hands its real outputs,
    renamed through the manifest's name map, to the downstream export."""

    def __init__(self, model: Path, upstream_inputs: list[Expected],
                 name_map: dict[str, str]) -> None:
        import onnxruntime as ort

        from qnn_ci.util.cores import limit_threads

        so = limit_threads(ort.SessionOptions())
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        self.upstream_inputs = upstream_inputs
        outputs = [o.name for o in self.session.get_outputs()]
        self.name_map = name_map or {o: o for o in outputs}
        unknown = [o for o in self.name_map if o not in outputs]
        if unknown:
            raise UserError(f"upstream model {model.name} has no output(s) "
                            f"{', '.join(unknown)}; its outputs: {', '.join(outputs)}",
                            key="calibration.from.outputs")
        self.fetch = list(self.name_map)

    def run(self, paths: dict[str, Path]) -> Sample:
        feeds = load_sample(paths, self.upstream_inputs)
        values = self.session.run(self.fetch, feeds)
        return {self.name_map[n]: v for n, v in zip(self.fetch, values, strict=True)}
