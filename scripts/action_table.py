"""Print the README's tables of the Action's inputs and outputs, made from action.yml.

    python scripts/action_table.py          # the two Markdown tables

tests/core/test_action.py holds the README's tables equal to this output, so the
README cannot drift from action.yml.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def tables(action: Path = ROOT / "action.yml") -> str:
    doc = yaml.safe_load(action.read_text(encoding="utf-8"))
    rows = ["| input | default | what it does |", "|---|---|---|"]
    for name, spec in doc["inputs"].items():
        default = spec.get("default", "")
        shown = f"`{_cell(default)}`" if default != "" else "(empty)"
        rows.append(f"| `{name}` | {shown} | {_cell(spec.get('description', ''))} |")
    rows += ["", "| output | what it holds |", "|---|---|"]
    for name, spec in doc["outputs"].items():
        rows.append(f"| `{name}` | {_cell(spec.get('description', ''))} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(tables())
