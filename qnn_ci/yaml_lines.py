"""Load YAML and remember the line of every key, so errors can name it.

The loader expects hostile files: whatever the bytes, it returns data or raises one
``UserError`` naming the file and line. It reads UTF-8 (a BOM is fine), refuses files
over ``MAX_BYTES``, nesting deeper than ``MAX_DEPTH``, more than ``MAX_NODES`` values
once aliases are expanded ("billion laughs"), recursive aliases, duplicate keys, keys
that are not strings, and tags other than the plain JSON-like ones. Merge keys
(``<<: *defaults``) work; a key written in the mapping wins over a merged one, and a
merged key keeps the line it is written on.

The parsing itself (PyYAML) lives in ``qnn_ci.yaml_loader``, imported only when a
text is parsed: given a memo folder, a text parsed before (same bytes, same loader
code, same PyYAML) is read back from the memo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.memo import Memo, code_digest, memo_key, package_sources
from qnn_ci.safe_read import read_bytes

KeyPath = tuple[str | int, ...]

MAX_BYTES = 1 << 20        # 1 MiB: a manifest is a few KiB
MAX_DEPTH = 64             # a manifest nests about 6 levels (and an input value's rank)
MAX_NODES = 50_000         # values (keys included) once aliases are expanded

_MEMO_KIND = "yaml"


def _read(path: Path) -> str:
    raw = read_bytes(path, cap=MAX_BYTES, what="YAML file",
                     hint="a manifest is a few KiB; split it")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        hint = " (it looks like UTF-16)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise UserError(f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
                        f"{hint}; save it as UTF-8", file=path, line=line) from None


def load_yaml_with_lines(path: Path, memo_dir: Path | None = None
                         ) -> tuple[Any, dict[KeyPath, int]]:
    """(data, {key path: line}) for a YAML file; UserError on a read or syntax error.

    ``memo_dir``: remember a successful parse there, keyed by the text and the code
    that parses it (so a cached re-run need not import PyYAML)."""
    return load_yaml_text(_read(path), path, memo_dir)


def _memoised(text: str, path: Path, memo_dir: Path) -> tuple[Any, dict[KeyPath, int]]:
    memo = Memo(memo_dir)
    key = memo_key(_MEMO_KIND, "1", _parser_code(), text)
    hit = _from_memo(memo.get(_MEMO_KIND, key))
    if hit is not None:
        return hit
    data, lines = _parse(text, path)
    memo.put(_MEMO_KIND, key, {"data": data,
                               "lines": [[list(k), v] for k, v in lines.items()]})
    return data, lines


def _parser_code() -> str:
    here = Path(__file__).resolve().parent
    return code_digest((here / "yaml_lines.py", here / "yaml_loader.py",
                        *package_sources("yaml")))


def _from_memo(value: Any) -> tuple[Any, dict[KeyPath, int]] | None:
    """A memo entry back as (data, lines); None when it is not one of ours."""
    if not isinstance(value, dict) or not isinstance(value.get("lines"), list):
        return None
    lines: dict[KeyPath, int] = {}
    for item in value["lines"]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
                and type(item[1]) is int):
            return None
        lines[tuple(item[0])] = item[1]
    return value.get("data"), lines


def load_yaml_text(text: str, path: Path, memo_dir: Path | None = None
                   ) -> tuple[Any, dict[KeyPath, int]]:
    """``load_yaml_with_lines`` for text already read (e.g. a file at a git revision);
    ``path`` names it in errors. The same limits (aliases, depth, sizes) apply; the
    same memo (keyed by the text) with ``memo_dir``."""
    if memo_dir is not None:
        return _memoised(text, path, memo_dir)
    return _parse(text, path)


def _parse(text: str, path: Path) -> tuple[Any, dict[KeyPath, int]]:
    from qnn_ci.yaml_loader import parse

    return parse(text, path)


def line_of(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """The line of ``path``, or of its nearest ancestor that has one."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return lines.get(())


def dotted(path: KeyPath) -> str:
    """``exports[0].inputs.x``; a key that is empty or holds line breaks or other
    unprintable characters is quoted (``inputs.'a\\nb'``): the message stays one line."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = str(part) if str(part).isprintable() and str(part) else repr(str(part))
        out += f".{name}" if out else name
    return out
