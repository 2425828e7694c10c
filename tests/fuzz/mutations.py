"""Hypothesis strategies that mutate real files: byte edits (flip, delete, insert,
duplicate, truncate) with tokens that matter to the format, and edits of a JSON
document's tree (replace any value with any JSON value)."""

from __future__ import annotations

import json
import random
from collections import deque
from typing import Any

from hypothesis import strategies as st

HUGE_INT = "9" * 5000            # more digits than int() converts by default

JSON_TOKENS = [b"[" * 300, b"{", b"}", b"[", b"]", b'"', b",", b":", b"1e999", b"-1e999",
               b"NaN", b"Infinity", b"null", b"true", HUGE_INT.encode(), b"\\ud800",
               b"\\u0000", b"\xff\xfe", b"\x00", b"-0", b"1.5", b"2147483648"]

OPS = ("flip", "delete", "insert", "duplicate", "truncate", "token")


class Files(dict):  # type: ignore[type-arg]
    """Real file contents by name, shown briefly in a failing example's report."""

    def __repr__(self) -> str:
        return f"<{len(self)} real files: {', '.join(self)}>"


def byte_edits(tokens: list[bytes]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """A list of edits; positions are fractions of the length so they fit any file."""
    return st.lists(st.tuples(st.sampled_from(OPS), st.floats(0, 1), st.integers(1, 4096),
                              st.binary(max_size=16), st.sampled_from(tokens)),
                    min_size=1, max_size=6)


def apply_edits(data: bytes, edits: list[tuple[Any, ...]]) -> bytes:
    buf = bytearray(data)
    for op, where, length, blob, token in edits:
        pos = min(int(where * len(buf)), len(buf))
        if op == "flip" and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] ^= 1 << (length % 8)
        elif op == "delete":
            del buf[pos:pos + length]
        elif op == "insert":
            buf[pos:pos] = blob
        elif op == "duplicate":
            buf[pos:pos] = buf[pos:pos + length]
        elif op == "truncate":
            del buf[pos:]
        elif op == "token":
            buf[pos:pos] = token
    return bytes(buf)


JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(10 ** 400), 10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["", "True", "False", "int8", "uint16", "float16", "float", "PER_BLOCK",
                     "LPBQ", "PER_CHANNEL", "x", "input", "534", "-1", "²", "٣", "1e999"]))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


def _paths(doc: Any, seed: int, limit: int = 400) -> list[tuple[Any, ...]]:
    """Paths to values in ``doc``: breadth first, at most 8 random children of each
    container, at most ``limit`` in all -- so deep values are reached too."""
    out: list[tuple[Any, ...]] = [()]
    queue: deque[tuple[tuple[Any, ...], Any]] = deque([((), doc)])
    rng = random.Random(seed)
    while queue and len(out) < limit:
        path, node = queue.popleft()
        children = (list(node.items()) if isinstance(node, dict)
                    else list(enumerate(node)) if isinstance(node, list) else [])
        if len(children) > 8:
            children = rng.sample(children, 8)
        for key, child in children:
            out.append((*path, key))
            queue.append(((*path, key), child))
    return out


@st.composite
def json_edits(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` (a parsed JSON document, not modified) with one to three values
    replaced, deleted or given an extra key."""
    doc = json.loads(json.dumps(doc))
    paths = _paths(doc, draw(st.integers(0, 1 << 16)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        value = draw(JSON_VALUES)
        if not path:
            return value
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(("replace", "delete", "add")))
            if action == "replace":
                parent[path[-1]] = value
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=8))] = value
            elif isinstance(parent, list):
                parent.append(value)
        except (KeyError, IndexError, TypeError):
            continue       # an earlier edit removed this path
    return doc
