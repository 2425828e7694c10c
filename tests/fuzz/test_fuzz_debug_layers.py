"""The board diagnosis fed anything a board can leave behind: ``--debug`` files with
any names (sanitised, nested, colliding), any sizes and bytes, and the reports fed
any diagnosis data or ``diagnosis.*`` properties. Each ends in a result: layers
read (or left out with a note), a summary, a failure text — never an exception."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.diagnose.board import read_debug_layers
from qnn_ci.diagnose.names import map_debug_files
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.report.diagnosis_summary import headline, markdown_block
from qnn_ci.report.summary import Row, markdown_summary, terminal_table

NAME = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
               max_size=12)
PART = st.text("ab_./:-1 ", min_size=1, max_size=6).filter(
    lambda s: s.strip("/") not in ("", ".", "..") and "//" not in s
    and not any(p in (".", "..", "") for p in s.strip("/").split("/")))
SHAPE = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)
JSONISH: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12)
DIAG_KEYS = ["attribution", "detail", "first_divergence", "worst_jumps", "recipes",
             "artefacts", "cost", "layers", "notes"]


@given(names=st.lists(NAME, max_size=8), keys=st.lists(NAME, max_size=8))
def test_any_names_map_or_are_named(names: list[str], keys: list[str]) -> None:
    result = map_debug_files(names, keys)
    placed = list(result.matched) + list(result.collisions) + result.unmatched \
        + result.native_skipped
    assert sorted(placed) == sorted(keys) or len(set(keys)) != len(keys)
    assert len(set(result.matched.values())) == len(result.matched)
    result.notes()


@given(tensors=st.lists(st.tuples(PART, SHAPE), min_size=1, max_size=5, unique_by=lambda t: t[0]),
       files=st.lists(st.tuples(PART, st.binary(max_size=80)), max_size=6),
       dims=st.dictionaries(PART, st.lists(st.integers(0, 5), max_size=5), max_size=3),
       others=st.lists(PART, max_size=3))
def test_any_debug_files_are_read_or_left_out(tensors: list[tuple[str, tuple[int, ...]]],
                                              files: list[tuple[str, bytes]],
                                              dims: dict[str, list[int]],
                                              others: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result_dir = Path(tmp) / "Result_0"
        result_dir.mkdir()
        for rel, data in files:
            path = result_dir / f"{rel.strip('/')}.raw"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                continue                  # a name that is already a folder / a file
        shapes = dict(tensors)
        layers = read_debug_layers(result_dir, shapes, dims, [*others, *shapes])
        for name, value in layers.values.items():
            assert value.shape == shapes[name] and value.size == math.prod(shapes[name])


@given(diag=st.dictionaries(st.sampled_from(DIAG_KEYS), JSONISH, max_size=6),
       props=st.dictionaries(st.sampled_from(["diagnosis.attribution", "diagnosis.headline",
                                              "diagnosis.recipe.0", "diagnosis.fix",
                                              "diagnosis.worst_jumps",
                                              "diagnosis.artefact.csv"]), JSONISH,
                             max_size=5),
       text=st.none() | TEXT, status=st.sampled_from(list(Status)))
def test_any_diagnosis_data_makes_the_reports(diag: dict[str, Any], props: dict[str, Any],
                                              text: str | None, status: Status) -> None:
    data: dict[str, Any] = {"diagnosis": diag}
    if text is not None:
        data["diagnosis_text"] = text
    for r in (StageResult("sim_numerics", status, "s", data=data, properties=props),
              StageResult("htp_vs_cpu", status, "s", properties=props)):
        markdown_block(r, root=Path("/work"))
        headline(r)
        r.failure_text()
        row = Row(Path("m.yaml"), "e", 1, r)
        terminal_table([row], width=100)
        markdown_summary([row], root=Path("/work"))
