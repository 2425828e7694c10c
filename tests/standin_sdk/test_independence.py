"""The stand-in is built from the formats page, not from qnn-ci's parsers: its
modules must not import qnn_ci."""

from __future__ import annotations

import ast
from pathlib import Path

import fixtures.qairt_standin as standin

# net_run.py (the qnn-net-run stand-in) has its own owner and tests.
OWN_MODULES = sorted(p for p in Path(standin.__file__).parent.glob("*.py")
                     if p.name != "net_run.py")


def test_standin_modules_do_not_import_qnn_ci() -> None:
    assert len(OWN_MODULES) >= 15
    for path in OWN_MODULES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "qnn_ci" or n.startswith("qnn_ci.") for n in names), path
