"""Map the files ``qnn-net-run --debug`` writes back to ONNX tensor names.

The converter renames tensors and the board names each layer's file after the
converter's name, so the ONNX name of a file is found by applying the converter's
sanitiser to every tensor name of the pinned ONNX model and inverting it. Two
sanitiser readings are in use (docs/board-runs.md cites both):

- ``qnn_ci.compare.sanitize``: every run of non-word characters -> ``_``, a
  leading digit gets a ``_`` (what real 2.31 ``.cpp`` / ``_net.json`` files show);
- per character (QAIRT's accuracy debugger, ``santize_node_name``): every
  non-word character -> ``_``, a first character that is neither a letter nor
  ``_`` gets a ``_`` in front.

Layouts accepted (not confirmed for ``--debug`` itself): flat sanitised files
``Result_N/<name>.raw``; sub-folders made by a ``/`` in the ONNX name
(``Result_N/feat/map_0.raw``); and a ``<graph name>/`` level. Matching is tiered
(exact forms first, then the key without its first folder, then the forms with
edge underscores stripped); at each tier a file that fits several ONNX names, or
an ONNX name several files fit, is a collision: counted and named, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from qnn_ci.compare.outputs import NATIVE_SUFFIX, sanitize

_NON_WORD_CHAR = re.compile(r"\W")


def sanitize_chars(name: str) -> str:
    """The per-character reading of the converter's rule."""
    out = _NON_WORD_CHAR.sub("_", name)
    if out and not out[0].isalpha() and out[0] != "_":
        out = "_" + out
    return out


def _nested(name: str) -> str:
    """``/a/b.c:0`` -> ``a/b_c_0``: a ``/`` made folders, each part sanitised."""
    return "/".join(sanitize(p) for p in name.split("/") if p)


def name_forms(name: str) -> set[str]:
    """Every file key (below ``Result_N``, no ``.raw``) the converter may give ``name``."""
    forms = {sanitize(name), sanitize_chars(name), _nested(name),
             "/".join(p for p in name.split("/") if p)}
    return {f for f in forms if f}


def _loose(key: str) -> str:
    return sanitize(key).strip("_")


@dataclass
class NameMap:
    """``--debug`` file keys mapped to ONNX tensor names, and the files left out and why."""

    matched: dict[str, str] = field(default_factory=dict)        # file key -> ONNX name
    collisions: dict[str, list[str]] = field(default_factory=dict)  # file key -> candidates
    unmatched: list[str] = field(default_factory=list)           # file keys, no ONNX name
    native_skipped: list[str] = field(default_factory=list)      # <tensor>_native files

    def notes(self, shown: int = 5) -> list[str]:
        out = []
        if self.collisions:
            items = sorted(self.collisions.items())
            text = "; ".join(f"{k} -> {', '.join(v)}" for k, v in items[:shown])
            more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
            out.append(f"{len(items)} --debug file(s) left out as ambiguous (several ONNX "
                       f"tensors fit, or several files fit one tensor): {text}{more}")
        if self.unmatched:
            names = sorted(self.unmatched)
            more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
            out.append(f"{len(names)} --debug file(s) match no tensor of the ONNX model "
                       f"(converter-made tensors): {', '.join(names[:shown])}{more}")
        if self.native_skipped:
            out.append(f"{len(self.native_skipped)} native-type file(s) ignored "
                       "(float32 files are compared)")
        return out


def map_debug_files(onnx_names: Sequence[str], keys: Iterable[str]) -> NameMap:
    """ONNX tensor name for each ``--debug`` file key (path below ``Result_N``
    without ``.raw``)."""
    result = NameMap()
    pending: list[str] = []
    for key in keys:
        if key.endswith(NATIVE_SUFFIX) and len(key) > len(NATIVE_SUFFIX):
            result.native_skipped.append(key)
        else:
            pending.append(key)
    exact: dict[str, set[str]] = {}
    loose: dict[str, set[str]] = {}
    for name in dict.fromkeys(onnx_names):
        for form in name_forms(name):
            exact.setdefault(form, set()).add(name)
            loose.setdefault(_loose(form), set()).add(name)

    def tiers(key: str) -> list[set[str]]:
        rest = key.split("/", 1)[1] if "/" in key else None
        found = [exact.get(key, set()), exact.get(rest, set()) if rest else set(),
                 loose.get(_loose(key), set()),
                 loose.get(_loose(rest), set()) if rest else set()]
        return found

    taken: set[str] = set()
    for tier in range(4):
        proposals: dict[str, str] = {}
        for key in list(pending):
            cands = tiers(key)[tier] - taken
            if len(cands) == 1:
                proposals[key] = next(iter(cands))
            elif len(cands) > 1:
                result.collisions[key] = sorted(cands)
                pending.remove(key)
        by_name: dict[str, list[str]] = {}
        for key, name in proposals.items():
            by_name.setdefault(name, []).append(key)
        for name, ks in by_name.items():
            if len(ks) == 1:
                result.matched[ks[0]] = name
                taken.add(name)
            else:
                for k in ks:
                    result.collisions[k] = [name]
            for k in ks:
                pending.remove(k)
    result.unmatched = pending
    return result
