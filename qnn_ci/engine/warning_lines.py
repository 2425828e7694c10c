"""Warnings for people: the same warning about another sample or line is one entry
with a count, the largest groups first, the first few shown with the total. Used by
the text output of `qnn-ci run`, pytest's "qnn-ci warnings" section and the JUnit
properties ``qnn.warnings.count`` / ``qnn.warnings.0`` .. ``qnn.warnings.4``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from qnn_ci.engine.results import Finding, Severity

SHOWN = 5
# A number standing alone ("sample 12", "line 3", "range 1.682", "-0.31", "1e-02")
# varies between otherwise identical warnings; one inside a name ("in_cache0") does not.
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\w)(?!\.\d)")
_CHECK = re.compile(r"^\[([^\]]+)\]")


@dataclass
class WarningGroup:
    """Warnings of one kind: the first one's text and how many there were."""

    text: str      # the first warning of the group, "[check] message"
    count: int


def warning_texts(findings: Iterable[Finding]) -> list[str]:
    """The warnings among ``findings`` as "[check] message"."""
    return [f"[{f.check}] {f.message}" for f in findings if f.severity == Severity.WARNING]


def group_warnings(texts: Iterable[str]) -> list[WarningGroup]:
    """Warnings that differ only in standalone numbers grouped, the largest groups
    first (ties in the order first seen)."""
    groups: dict[str, WarningGroup] = {}
    for text in texts:
        key = _NUMBER.sub("#", text)
        if key in groups:
            groups[key].count += 1
        else:
            groups[key] = WarningGroup(text, 1)
    return sorted(groups.values(), key=lambda g: -g.count)


def warning_lines(texts: Iterable[str], limit: int = SHOWN) -> list[str]:
    """The first ``limit`` groups, one line each ("... (+96 more like it)"), and a
    last line "+N more warning(s) of K other kind(s)" when groups were left out (a
    kind is a check id: "[compare.accuracy] ...")."""
    groups = group_warnings(texts)
    lines = [g.text + (f" (+{g.count - 1} more like it)" if g.count > 1 else "")
             for g in groups[:limit]]
    rest = groups[limit:]
    if rest:
        shown_kinds = {_kind(g.text) for g in groups[:limit]}
        kinds = {_kind(g.text) for g in rest}
        other = len(kinds - shown_kinds)
        what = (f"of {other} other kind(s)" if other == len(kinds) else
                f"of {len(kinds)} kind(s), {len(kinds) - other} of them shown above"
                if other else "of the kind(s) shown above")
        lines.append(f"+{sum(g.count for g in rest)} more warning(s) {what}")
    return lines


def _kind(text: str) -> str:
    m = _CHECK.match(text)
    return m.group(1) if m else _NUMBER.sub("#", text)


def warning_properties(texts: Iterable[str], limit: int = SHOWN) -> dict[str, Any]:
    """``warnings.count`` and ``warnings.0`` .. ``warnings.<limit-1>`` (the groups),
    nothing when there is no warning."""
    texts = list(texts)
    if not texts:
        return {}
    props: dict[str, Any] = {"warnings.count": len(texts)}
    for i, group in enumerate(group_warnings(texts)[:limit]):
        props[f"warnings.{i}"] = group.text + (f" (+{group.count - 1} more like it)"
                                               if group.count > 1 else "")
    return props


def warnings_report(items: Iterable[tuple[str, list[str]]], limit: int = SHOWN) -> list[str]:
    """Per labelled item ("export::stage") with warnings: "label: N warning(s)" and its
    first ``limit`` groups indented. Empty when no item has a warning."""
    out: list[str] = []
    for label, texts in items:
        if texts:
            out.append(f"{label}: {len(texts)} warning(s)")
            out += [f"  - {line}" for line in warning_lines(texts, limit)]
    return out
