"""Cut a long list for a message: keep the WORST entries, say how many were left out.

``shown(items, limit, key=...)`` returns the ``limit`` entries that sort first by
``key`` (the worst first; without a key, the given order is taken as worst
first) and the count left out. ``more_text(n)`` is the tail every such message
uses, ``" (+3 more)"``; ``cut_text`` joins the kept entries and adds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def shown(items: Iterable[T], limit: int, key: Callable[[T], Any] | None = None
          ) -> tuple[list[T], int]:
    """The first ``limit`` items by ``key`` (ascending: give a key that puts the
    worst first; ties keep their order) and how many more there are."""
    seq = list(items)
    if key is not None:
        seq = sorted(seq, key=key)
    limit = max(0, limit)
    return seq[:limit], max(0, len(seq) - limit)


def more_text(more: int, *, word: str = "more") -> str:
    """``" (+3 more)"``; empty when nothing was left out."""
    return f" (+{more} {word})" if more > 0 else ""


def cut_text(items: Iterable[T], limit: int, *, key: Callable[[T], Any] | None = None,
             render: Callable[[T], str] = str, sep: str = ", ", word: str = "more") -> str:
    """``"a, b, c (+4 more)"``: the worst ``limit`` items rendered and joined."""
    kept, more = shown(items, limit, key)
    return sep.join(render(i) for i in kept) + more_text(more, word=word)

