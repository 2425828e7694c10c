"""Load YAML and remember the line of every key, so errors can name it.

The loader expects hostile files: whatever the bytes, it returns data or raises one
``UserError`` naming the file and line. It reads UTF-8 (a BOM is fine), refuses files
over ``MAX_BYTES``, nesting deeper than ``MAX_DEPTH``, more than ``MAX_NODES`` values
once aliases are expanded ("billion laughs"), recursive aliases, duplicate keys, keys
that are not strings, and tags other than the plain JSON-like ones. Merge keys
(``<<: *defaults``) work; a key written in the mapping wins over a merged one, and a
merged key keeps the line it is written on.

PyYAML's Python composer is hooked so that every node is checked as it is composed
(tags, keys, duplicate keys, merge keys, depth, expanded size); a walk over the
composed nodes records each key's line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from qnn_ci.errors import UserError
from qnn_ci.util.safe_read import read_bytes

KeyPath = tuple[str | int, ...]

MAX_BYTES = 1 << 20        # 1 MiB: a manifest is a few KiB
MAX_DEPTH = 64             # a manifest nests about 6 levels (and an input value's rank)
MAX_NODES = 50_000         # values (keys included) once aliases are expanded


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


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """(data, {key path: line}) for a YAML file; UserError on a read or syntax error."""
    return parse(_read(path), path)


def load_yaml_text(text: str, path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """``load_yaml_with_lines`` for text already read (e.g. a file at a git revision);
    ``path`` names it in errors. The same limits (aliases, depth, sizes) apply."""
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


# -- parsing (PyYAML) ------------------------------------------------------------

_T = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ, _MERGE = _T + "str", _T + "map", _T + "seq", _T + "merge"
# Scalar tags a manifest may hold; dates and `=` read as plain text.
_SCALAR_TAGS = {_STR, _T + "int", _T + "float", _T + "bool", _T + "null", _T + "timestamp",
                _T + "value", _MERGE}
_KINDS = {_T + "int": "an integer", _T + "float": "a number", _T + "bool": "a boolean",
          _T + "null": "null"}


def _tag(tag: str) -> str:
    return "!!" + tag[len(_T):] if tag.startswith(_T) else tag


def _kind(node: Node) -> str:
    return {ScalarNode: "text", SequenceNode: "list", MappingNode: "mapping"}.get(
        type(node), "value")


class _Checks:
    """Checks every node as it is composed (bottom-up): tags, keys, duplicate keys,
    merge keys, nesting depth and expanded size. Mixed into a loader whose composer
    is PyYAML's Python one (the only one that can be hooked)."""

    anchors: dict[str, Node]
    check_event: Any
    peek_event: Any
    yaml_constructors: dict[str, Any]

    def _setup(self, name: str) -> None:
        self.name = name
        self._depth = 0
        self._size: dict[int, int] = {}    # id(node) -> values below it, aliases expanded
        self._deep: dict[int, int] = {}    # id(node) -> levels below it, aliases expanded
        self._aliases = 0
        self._last_alias = ("", 0)

    def _error(self, node_or_mark: Any, message: str) -> UserError:
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        return UserError(message, file=self.name, line=mark.line + 1 if mark else None)

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):  # type: ignore[no-untyped-call]
            event = self.peek_event()  # type: ignore[no-untyped-call]
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._size:
                raise self._error(event, f"alias *{event.anchor} sits inside the value it "
                                         f"names (&{event.anchor}), so it never ends: "
                                         "remove the recursive alias")
            self._aliases += 1
            self._last_alias = (event.anchor, event.start_mark.line + 1)
            return super().compose_node(parent, index)  # type: ignore[misc,no-any-return]
        if self._depth >= MAX_DEPTH:
            raise self._error(self.peek_event(),  # type: ignore[no-untyped-call]
                              f"nested more than {MAX_DEPTH} levels deep: a manifest needs "
                              "only a few levels; flatten it")
        aliases_before = self._aliases
        self._depth += 1
        try:
            node: Node = super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1
        self._check(node, self._aliases > aliases_before)
        return node

    def _check(self, node: Node, has_aliases: bool) -> None:
        if isinstance(node, ScalarNode):
            self._check_scalar(node)
            self._size[id(node)] = 1
            self._deep[id(node)] = 1
            return
        want = _SEQ if isinstance(node, SequenceNode) else _MAP
        if node.tag != want:
            raise self._error(node, f"tag {_tag(node.tag)} cannot be used on a "
                                    f"{_kind(node)} in a manifest: remove it")
        if isinstance(node, MappingNode):
            self._check_keys(node)
            self._merge(node)
            children = [n for pair in node.value for n in pair]
        else:
            children = list(node.value)
        size = 1 + sum(self._size[id(c)] for c in children)
        deep = 1 + max((self._deep[id(c)] for c in children), default=0)
        via = ""
        if has_aliases:
            via = (f" once aliases are expanded (e.g. *{self._last_alias[0]} at line "
                   f"{self._last_alias[1]})")
        if size > MAX_NODES:
            raise self._error(node, f"this {_kind(node)} holds more than {MAX_NODES:,} "
                                    f"values{via}; a manifest may hold at most {MAX_NODES:,}"
                                    f": use fewer (nested) aliases or split the manifest")
        if deep > MAX_DEPTH:
            raise self._error(node, f"nested more than {MAX_DEPTH} levels deep{via}: a "
                                    "manifest needs only a few levels; flatten it")
        self._size[id(node)] = size
        self._deep[id(node)] = deep

    def _check_scalar(self, node: ScalarNode) -> None:
        if node.tag not in _SCALAR_TAGS:
            raise self._error(node, f"tag {_tag(node.tag)} cannot be used in a manifest "
                                    f"(on {node.value[:40]!r}): remove it")
        kind = _KINDS.get(node.tag)
        if kind is None or node.tag == _T + "null":
            return
        constructor = self.yaml_constructors[node.tag]
        try:
            constructor(self, node)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            what = "has too many digits" if "digits" in str(exc) else f"is not {kind}"
            raise self._error(node, f"{node.value[:40]!r} {what}: fix it, or quote it to "
                                    "make it text") from None

    def _check_keys(self, node: MappingNode) -> None:
        seen: dict[str, int] = {}
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag == _MERGE:
                continue
            if not isinstance(key, ScalarNode):
                raise self._error(key, f"a key here is a {_kind(key)}; keys are names: "
                                       "write a plain name")
            if key.tag not in (_STR, _T + "value", _T + "timestamp"):
                kind = _KINDS.get(key.tag, "a value")
                raise self._error(key, f"key {key.value!r} must be a string (YAML reads it "
                                       f"as {kind}): quote it, \"{key.value}\"")
            line = key.start_mark.line + 1
            if key.value in seen:
                raise self._error(key, f"duplicate key {key.value!r} (first at line "
                                       f"{seen[key.value]})")
            seen[key.value] = line

    def _merge(self, node: MappingNode) -> None:
        """Resolve `<<` merge keys in place: written keys win, then earlier merges."""
        own: list[tuple[Node, Node]] = []
        sources: list[MappingNode] = []
        for key, value in node.value:
            if not (isinstance(key, ScalarNode) and key.tag == _MERGE):
                own.append((key, value))
                continue
            for src in (value.value if isinstance(value, SequenceNode) else [value]):
                if not isinstance(src, MappingNode):
                    raise self._error(src, f"`<<` merges a mapping (or a list of mappings), "
                                           f"not {_kind(src)}: give an alias like *defaults")
                sources.append(src)
        if len(own) == len(node.value):
            return
        seen = {k.value for k, _ in own}
        merged: list[tuple[Node, Node]] = []
        for src in sources:      # already merged itself: checked bottom-up
            for key, value in src.value:
                if key.value not in seen:
                    seen.add(key.value)
                    merged.append((key, value))
        node.value = merged + own


class _PyLoader(_Checks, yaml.SafeLoader):
    """Pure-Python scanner and parser."""

    def __init__(self, text: str, name: str) -> None:
        yaml.SafeLoader.__init__(self, text)
        self._setup(name)


_LOADERS: list[type] = [_PyLoader]
try:
    from yaml._yaml import CParser

    class _CLoader(_Checks, Composer, CParser, SafeConstructor, yaml.resolver.Resolver):
        """libyaml's scanner and parser (several times faster), PyYAML's composer
        (so `_Checks` sees every node) and safe constructor."""

        def __init__(self, text: str, name: str) -> None:
            CParser.__init__(self, text)
            Composer.__init__(self)  # type: ignore[no-untyped-call]
            SafeConstructor.__init__(self)  # type: ignore[no-untyped-call]
            yaml.resolver.Resolver.__init__(self)  # type: ignore[no-untyped-call]
            self._setup(name)

    _LOADERS.insert(0, _CLoader)
except ImportError:  # PyYAML built without libyaml
    pass


def _construct_text(loader: SafeConstructor, node: ScalarNode) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[no-untyped-call]


for _loader in _LOADERS:
    for _tag_name in ("timestamp", "value", "merge"):
        _loader.add_constructor(_T + _tag_name, _construct_text)  # type: ignore[attr-defined]


def parse(text: str, path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """(data, {key path: line}) of YAML text; ``path`` names it in errors."""
    if len(text) > MAX_BYTES:
        raise UserError(f"more than {MAX_BYTES} characters of YAML", file=path)
    try:
        loader = _LOADERS[0](text, str(path))
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = str(exc.problem or exc.context or exc)
        if "maximum nesting depth" in problem:    # libyaml's own limit (1000)
            problem = f"nested more than {MAX_DEPTH} levels deep: flatten it"
        raise UserError(f"invalid YAML: {problem}", file=path, line=line) from None
    except yaml.reader.ReaderError as exc:
        line = text[:exc.position].count("\n") + 1
        raise UserError(f"invalid YAML: character #x{exc.character:04x} is not allowed in "
                        "YAML text: remove it", file=path, line=line) from None
    except yaml.YAMLError as exc:
        raise UserError(f"invalid YAML: {exc}", file=path) from None
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def _walk(node: Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    """Lines of every key path. Bounded: the loader refused deep or huge documents."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, MappingNode):
        last = {key.value: (key, value) for key, value in node.value}  # merged: last wins
        for name, (key, value) in last.items():
            lines[(*path, name)] = key.start_mark.line + 1
            _walk(value, (*path, name), lines)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines)
