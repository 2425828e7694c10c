"""``dataclass``: the standard library's, with the methods it writes compiled once per
install rather than once per process.

On CPython 3.11 ``dataclasses`` writes each generated method (``__init__``,
``__repr__``, ``__eq__``, and ``__hash__``/``__setattr__``/``__delattr__`` when frozen)
as source text and compiles it with ``exec``: ~1.2 ms per class, mostly compiling.
qnn-ci has a hundred-odd record classes, and a process imports ~35 of them (~40 ms of
every ``qnn-ci`` command's and every qnn-ci pytest session's start-up). This module
keeps the compiled code of those texts on disk, next to the package's ``.pyc`` files
(``__pycache__/records.<cache tag>.codes``, written as Python writes ``.pyc`` files,
not when ``sys.dont_write_bytecode``), keyed by the exact text and the interpreter's
bytecode magic number. The classes are made by ``dataclasses`` itself: only the
compiling is skipped, so each class is what ``dataclasses.dataclass`` makes.

A missing, unreadable or corrupt file is ignored (the code is compiled as usual);
the file is replaced atomically at exit when this process compiled something new.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import logging
import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any, TypeVar, dataclass_transform, overload

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_MAGIC = importlib.util.MAGIC_NUMBER
_LIMIT = 4000             # texts kept; a larger file starts over with this process's


class _Codes:
    """The compiled texts, read from disk on first use."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.codes: dict[str, CodeType] | None = None
        self.used: set[str] = set()
        self.new = False

    def load(self) -> dict[str, CodeType]:
        if self.codes is None:
            self.codes = _read(self.path) if self.path else {}
        return self.codes

    def compiled(self, text: str) -> CodeType:
        codes = self.load()
        code = codes.get(text)
        if code is None:
            # exactly what exec(text) in dataclasses compiles: its module has no
            # __future__ imports, so none are inherited
            code = codes[text] = compile(text, "<string>", "exec", dont_inherit=True)
            if not self.new and self.path and not sys.dont_write_bytecode:
                atexit.register(self.save)
            self.new = True
        self.used.add(text)
        return code

    def save(self) -> None:
        if not (self.new and self.path and self.codes is not None) or sys.dont_write_bytecode:
            return
        codes = self.codes
        if len(codes) > _LIMIT:
            codes = {t: c for t, c in codes.items() if t in self.used}
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(_MAGIC + marshal.dumps(codes))
            os.replace(tmp, self.path)
        except (OSError, ValueError) as exc:     # read-only install: compile each time
            log.debug("records: cannot save %s: %s", self.path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        self.new = False


def _read(path: Path) -> dict[str, CodeType]:
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if not data.startswith(_MAGIC):
        return {}
    try:
        codes = marshal.loads(memoryview(data)[len(_MAGIC):])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {t: c for t, c in codes.items() if isinstance(t, str) and isinstance(c, CodeType)}


def _default_path() -> Path | None:
    """Next to this package's ``.pyc`` files; None where Python keeps none (no cache
    tag) or the package is not a folder of files (a zip, a frozen application)."""
    tag = sys.implementation.cache_tag
    where = globals().get("__file__")
    if not tag or not where or not Path(where).is_file():
        return None
    # where Python writes this module's .pyc (``sys.pycache_prefix`` honoured)
    return Path(importlib.util.cache_from_source(str(Path(where).resolve()))).with_name(
        f"records.{tag}.codes")


_codes = _Codes(_default_path())


def _exec(text: Any, globals_: Any = None, locals_: Any = None) -> None:
    """``exec`` as ``dataclasses`` calls it, with ``text``'s code from the store."""
    source = _codes.compiled(text) if isinstance(text, str) else text
    exec(source, globals_, locals_)     # the text dataclasses wrote


@overload
def dataclass(cls: type[_T], /, **options: Any) -> type[_T]:
    ...


@overload
def dataclass(cls: None = None, /, **options: Any) -> Callable[[type[_T]], type[_T]]:
    ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(cls: type[_T] | None = None, /, **options: Any) -> Any:
    """``dataclasses.dataclass(cls, **options)``, its methods' code from the store."""
    def wrap(c: type[_T]) -> type[_T]:
        # dataclasses looks `exec` up in its module's globals first. Another thread
        # making a class meanwhile gets the same code either way (from the store, or
        # compiled when this call has already taken the name away again).
        dataclasses.exec = _exec  # type: ignore[attr-defined]
        try:
            return dataclasses.dataclass(c, **options)
        finally:
            vars(dataclasses).pop("exec", None)
    return wrap if cls is None else wrap(cls)
