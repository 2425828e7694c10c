"""Bounded, safe reading of files a user names.

Every reader of user files goes through here so that no bytes on disk can hang
or exhaust the process: a FIFO, device, socket or folder is refused with one
line before anything is read (a FIFO is opened non-blocking, so no writer is
waited for), a file larger than the reader's cap is refused naming the cap
(a sparse file or a symlink to ``/dev/zero`` included), and JSON nested deeper
than real files ever are is refused before the parser recurses.

All refusals are ``UserError`` (one line, naming the file).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from qnn_ci.errors import UserError

MiB = 1 << 20
MAX_JSON_DEPTH = 100          # real converter / AIMET JSON nests fewer than 10 levels
_BLOCK = 1 << 20              # bytes per read

_ESCAPE = re.compile(r"\\.", re.S)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def size_text(n: int) -> str:
    """``1536`` -> ``1.5 KiB``: a size for a message."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"   # pragma: no cover


def _kind(mode: int) -> str | None:
    """What a non-regular file is, None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse(path: Path, kind: str, what: str) -> UserError:
    return UserError(f"cannot read it: it is {kind}, not a file; pass the {what} "
                     "itself", file=path)


def check_regular(path: str | Path, *, what: str = "file",
                  missing: str = "file not found") -> os.stat_result:
    """The file's ``stat`` (symlinks followed); UserError when it is missing or is
    a folder, FIFO, device or socket. Opens nothing."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserError(missing, file=path) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the file ({_reason(exc)})", file=path) from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise _refuse(path, kind, what)
    return st


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


def _too_big(path: Path, size: int | None, cap: int, what: str, hint: str) -> UserError:
    have = f"{size_text(size)}, " if size is not None else ""
    tail = f"; {hint}" if hint else ""
    return UserError(f"{have}more than the {size_text(cap)} a {what} may have (the cap of "
                     f"this reader){tail}", file=path)


@contextmanager
def open_regular(path: str | Path, *, cap: int, what: str = "file", hint: str = "",
                 missing: str = "file not found") -> Iterator[IO[bytes]]:
    """Open a regular file for reading, after refusing a non-regular one or one
    larger than ``cap`` bytes. The FIFO check holds even if the path is swapped
    between the check and the open (the open does not block and is checked again)."""
    path = Path(path)
    st = check_regular(path, what=what, missing=missing)
    if st.st_size > cap:
        raise _too_big(path, st.st_size, cap, what, hint)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                     getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(missing, file=path) from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:      # a socket
            raise _refuse(path, "a socket", what) from None
        raise UserError(f"cannot read the file ({_reason(exc)})", file=path) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise _refuse(path, kind, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def read_bytes(path: str | Path, *, cap: int, what: str = "file", hint: str = "",
               missing: str = "file not found") -> bytes:
    """The whole file, at most ``cap`` bytes (a file that grows past the cap while
    read, or reports a wrong size, is refused too)."""
    path = Path(path)
    with open_regular(path, cap=cap, what=what, hint=hint, missing=missing) as fh:
        try:
            data = fh.read(cap + 1)
        except OSError as exc:
            raise UserError(f"cannot read the file ({_reason(exc)})", file=path) from None
    if len(data) > cap:
        raise _too_big(path, None, cap, what, hint)
    return data


def read_text(path: str | Path, *, cap: int, what: str = "file", hint: str = "",
              missing: str = "file not found") -> str:
    """``read_bytes`` decoded as UTF-8 (undecodable bytes replaced)."""
    return read_bytes(path, cap=cap, what=what, hint=hint,
                      missing=missing).decode("utf-8", errors="replace")


def iter_blocks(fh: IO[bytes], path: Path, *, cap: int, what: str,
                hint: str = "", block: int = _BLOCK) -> Iterator[bytes]:
    """The file in blocks of ``block`` bytes, refusing it once more than ``cap``
    bytes have been read."""
    total = 0
    while True:
        try:
            data = fh.read(block)
        except OSError as exc:
            raise UserError(f"cannot read the file ({_reason(exc)})", file=path) from None
        if not data:
            return
        total += len(data)
        if total > cap:
            raise _too_big(path, None, cap, what, hint)
        yield data


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (strings ignored), computed
    without recursion and at C speed for ordinary files."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return text.count("[") + text.count("{")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    if not brackets:
        return 0
    return max(0, max(accumulate(map(_DEPTH_STEP.__getitem__, brackets))))


def load_json(text: str, path: str | Path, *, hint: str,
              max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` whose every failure is one line naming the file: invalid
    JSON (with line and column), nesting deeper than ``max_depth``, a number too
    long to convert. ``hint`` says what the file should be."""
    depth = json_depth(text)
    if depth > max_depth:
        raise UserError(f"JSON nested {depth} levels deep, more than the {max_depth} this "
                        f"reader accepts; {hint}", file=path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                        f"{hint}", file=path) from None
    except RecursionError:
        raise UserError(f"JSON nested too deeply to read; {hint}", file=path) from None
    except (ValueError, MemoryError) as exc:   # e.g. an integer with 5,000 digits
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UserError(f"JSON that cannot be read ({first}); {hint}", file=path) from None


def safe_int(text: str, *, limit: int = 1 << 63) -> int | None:
    """``int(text)`` for an ASCII integer whose magnitude is below ``limit``, else None
    (no ValueError for 5,000-digit numbers or digits such as ``²``)."""
    s = text.strip()
    body = s[1:] if s[:1] in "+-" else s
    if not body or not body.isascii() or not body.isdigit() or len(body) > 40:
        return None
    value = int(s)
    return value if -limit <= value < limit else None
