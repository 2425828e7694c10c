"""Read a ``qnn-onnx-converter --dry_run`` log.

A dry run exits 0 even when it lists unsupported ops, so the exit status alone
proves nothing. After ``Proceeding with model evaluation...`` it prints either
``Model ops, op attributes, inputs and outputs have been evaluated`` (clean) or
a table ``| Layers | Ops | Inputs | Outputs | Attributes |`` whose rows are the
problems: cells ending in `` unsupported in Converter``, `` unsupported in ONNX
schema``, `` unsupported version``, `` unsupported value``, `` invalid value``
or `` wrong type``. The table may be wrapped in ANSI colour codes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
PROBLEM_SUFFIXES: tuple[str, ...] = (
    "unsupported in Converter", "unsupported in ONNX schema", "unsupported version",
    "unsupported value", "invalid value", "wrong type",
)
# "\s*(?:[.,;]\s*)?$", not "\s*[.,;]?\s*$" (two adjacent \s* are quadratic in a blank
# run); "(?<!\s)\s+" tries a blank run once, from its start.
_PROBLEM_RE = re.compile(r"(?:^|\s)(?:" + "|".join(re.escape(s) for s in PROBLEM_SUFFIXES)
                         + r")\s*(?:[.,;]\s*)?$")
_SUFFIX_RE = re.compile(r"(?<!\s)\s+(?:" + "|".join(re.escape(s) for s in PROBLEM_SUFFIXES)
                        + r")\s*(?:[.,;]\s*)?$")
CLEAN_LINE = "Model ops, op attributes, inputs and outputs have been evaluated"
EVALUATING_LINE = "Proceeding with model evaluation"
HEADER_CELLS = ("layers", "ops", "inputs", "outputs", "attributes")


@dataclass(frozen=True)
class DryRunProblem:
    """One problem row of a dry run's table: the layer, op, column and problem text."""

    layer: str
    op: str
    column: str          # "Ops" | "Inputs" | "Outputs" | "Attributes"
    text: str

    def message(self) -> str:
        where = f"layer {self.layer or '?'} ({self.op or '?'})"
        return f"{where}: {self.column}: {self.text}"


@dataclass
class DryRunReport:
    """What a converter dry-run log says: the problems listed, and the markers seen."""

    problems: list[DryRunProblem] = field(default_factory=list)
    clean: bool = False            # the "have been evaluated" line was seen
    evaluated: bool = False        # "Proceeding with model evaluation" was seen
    table: bool = False            # the problem table header was seen
    unrecognised_rows: list[str] = field(default_factory=list)

    def passed(self, exit_code: int | None) -> bool:
        return exit_code == 0 and not self.problems


def node_op_types(model: onnx.ModelProto) -> dict[str, str]:
    """Layer name -> ONNX op type for every node: its name as written, as the
    converter sanitises it (non-word runs become ``_``), and ``<Op>_<index>`` for a
    node without a name."""
    ops: dict[str, str] = {}
    for index, node in enumerate(model.graph.node):
        names = [node.name, re.sub(r"\W+", "_", node.name)] if node.name else \
            [f"{node.op_type}_{index}"]
        for name in names:
            ops.setdefault(name, node.op_type)
    return ops


def fill_ops(report: DryRunReport, op_types: Mapping[str, str]) -> None:
    """Give rows whose Ops cell is empty (an attribute, input or output problem
    on a supported op) the op type of their layer, from ``node_op_types``."""
    report.problems = [
        p if p.op else dataclasses.replace(p, op=op_types.get(p.layer, ""))
        for p in report.problems]


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def _cells(line: str) -> list[str] | None:
    start = line.find("|")
    end = line.rfind("|")
    if start < 0 or end <= start:
        return None
    return [c.strip() for c in line[start + 1:end].split("|")]


def _is_separator(line: str) -> bool:
    body = line.strip()
    return bool(body) and set(body) <= set("+-=|: ")


def parse_dry_run(text: str) -> DryRunReport:
    report = DryRunReport()
    columns: list[str] | None = None
    last_layer, last_op = "", ""
    for raw in strip_ansi(text).splitlines():
        if EVALUATING_LINE in raw:
            report.evaluated = True
        if CLEAN_LINE in raw:
            report.clean = True
        if _is_separator(raw) and ("|" in raw or "+" in raw or columns is not None):
            continue
        cells = _cells(raw)
        if cells is not None and [c.lower() for c in cells[:5]] == list(HEADER_CELLS):
            columns = cells
            report.table = True
            continue
        if columns is None:
            continue
        if cells is None:
            last_layer, last_op = "", ""    # a log line between rows
            continue
        cells += [""] * (len(columns) - len(cells))
        row = dict(zip(columns, cells, strict=False))
        layer, op = row.get(columns[0], ""), _SUFFIX_RE.sub("", row.get(columns[1], ""))
        if not layer and not op:
            layer, op = last_layer, last_op     # a wrapped continuation row
        last_layer, last_op = layer, op
        found = False
        for column in columns[1:]:
            cell = row.get(column, "")
            if cell and _PROBLEM_RE.search(cell):
                report.problems.append(DryRunProblem(layer, op, column, cell))
                found = True
        if not found and any(cells):
            report.unrecognised_rows.append(" | ".join(c for c in cells if c))
    return report
