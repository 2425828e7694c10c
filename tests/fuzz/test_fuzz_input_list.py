"""Fuzz the input-list readers: `parse_input_list`, `read_input_list` and
`validate_input_list` on arbitrary bytes and on mutated valid lists may only give a
result, findings, or a `UserError` — never another exception."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.calibration.input_list import parse_input_list, read_input_list, write_input_list
from qnn_ci.calibration.validate import validate_input_list
from qnn_ci.errors import UserError
from qnn_ci.model.onnx_io import TensorIO

INPUTS = [TensorIO("x", "float32", (1, 4)), TensorIO("ids", "int64", (1, 4))]
SHAPES = {"x": (1, 4), "ids": (1, 4)}
NAMES = [i.name for i in INPUTS]


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """Real raw files (and a folder with a space) the fuzzed lists can point at."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rng = np.random.default_rng(0)
        (root / "sp ace").mkdir()
        for d in (root, root / "sp ace"):
            for i in range(3):
                rng.normal(size=(1, 4)).astype(np.float32).tofile(d / f"x{i}.raw")
                np.arange(i, i + 4, dtype=np.int64).tofile(d / f"ids{i}.raw")
            (d / "zero.raw").write_bytes(bytes(16))
            (d / "short.raw").write_bytes(bytes(3))
        (root / "nan.raw").write_bytes(np.full(4, np.nan, np.float32).tobytes())
        yield root


def valid_list(folder: Path) -> str:
    rows = [{"x": folder / f"x{i}.raw", "ids": folder / f"ids{i}.raw"} for i in range(3)]
    out = folder / "valid.txt"
    write_input_list(out, rows, NAMES)   # type: ignore[arg-type]
    return out.read_text()


def check(path: Path) -> None:
    """Each reader ends in a result, findings, or one UserError line."""
    for call in (lambda: parse_input_list(path), lambda: read_input_list(path, NAMES),
                 lambda: validate_input_list(path, INPUTS, SHAPES)):
        try:
            result = call()
        except UserError as exc:
            assert "\n" not in exc.oneline()
            continue
        assert result is not None


TOKENS = st.sampled_from([
    " ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028",
    ":=", "x:=", "ids:=", "#", "#header", "sp ace/", "x0.raw", "ids1.raw", "zero.raw",
    "short.raw", "nan.raw", "/", "..", "nope.raw", "\x00", "\ufeff", "é", "\udcff"])


@given(data=st.binary(max_size=400))
def test_arbitrary_bytes(folder: Path, data: bytes) -> None:
    path = folder / "fuzz_bytes.txt"
    path.write_bytes(data)
    check(path)


@given(pieces=st.lists(st.one_of(TOKENS, st.text(max_size=8)), max_size=40))
def test_lists_built_from_separators_names_and_paths(folder: Path,
                                                     pieces: list[str]) -> None:
    text = "".join(p.replace("/", f"{folder}/", 1) if p.endswith("/") else p
                   for p in pieces)
    path = folder / "fuzz_tokens.txt"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    check(path)


@given(data=st.data())
def test_mutated_valid_lists(folder: Path, data: st.DataObject) -> None:
    text = bytearray(valid_list(folder).encode())
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "dup_line"]))
        pos = data.draw(st.integers(0, max(len(text) - 1, 0)))
        if op == "flip" and text:
            text[pos] = data.draw(st.integers(0, 255))
        elif op == "insert":
            text[pos:pos] = data.draw(st.sampled_from(
                [b" ", b"\n", b"\t", b":=", b"#", b"\xff", b"\x00", b" sp ace/x0.raw",
                 f" {folder}/sp ace/x1.raw".encode(), b"x:=", b"\xe2\x80\xa8"]))
        elif op == "delete" and text:
            del text[pos:pos + data.draw(st.integers(1, 12))]
        elif op == "dup_line":
            lines = bytes(text).split(b"\n")
            text = bytearray(b"\n".join(lines + lines[:1]))
    path = folder / "fuzz_mutated.txt"
    path.write_bytes(bytes(text))
    check(path)
