"""Load YAML and remember the line of every key, so errors can name it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from qnn_ci.errors import UserError

KeyPath = tuple[str | int, ...]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if key in seen:
                raise UserError(
                    f"duplicate key {key!r} (first at line {seen[key]})",
                    file=self.name, line=key_node.start_mark.line + 1,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _walk(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[(*path, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*path, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines)


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[KeyPath, int]]:
    """(data, {key path: line}) for a YAML file; UserError on a read or syntax error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", file=path) from None
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror}", file=path) from None
    try:
        loader = _UniqueKeyLoader(text)
        loader.name = str(path)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise UserError(f"invalid YAML: {exc.problem or exc}", file=path, line=line) from None
    except yaml.YAMLError as exc:
        raise UserError(f"invalid YAML: {exc}", file=path) from None
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def line_of(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    """The line of ``path``, or of its nearest ancestor that has one."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return lines.get(())


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
