"""Fuzz output comparison: random folder trees of ``Result_N`` folders (odd numbers,
``Result_03`` beside ``Result_3``, files and folders named like samples) holding
``.raw``/``.npy`` files of random names, sizes and dtypes with NaN/Inf values,
corrupt ``.npy`` headers, FIFOs and folders named ``*.raw``. Loading, comparing,
reporting (``compare_sets`` + JSON), the board's result-file checks and the
native-output dequantizer may only give a result, findings or one ``UserError``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qnn_ci.boards.native_outputs import NativeType, dequantize_outputs
from qnn_ci.boards.result_files import ExpectedOutput, check_result_files
from qnn_ci.compare import apply_thresholds, compare_sets, load_output_set, metric_properties
from qnn_ci.errors import UserError

FOLDERS = st.sampled_from(["Result_0", "Result_1", "Result_2", "Result_03", "Result_3",
                           "Result_99999999999999", "Result_", "Result_x", "Result_٣",
                           "result_1", "Result_30000000"])
NAMES = st.sampled_from(["y.raw", "y_native.raw", "graph/y.raw", "z.npy", "a b.raw",
                         "_native.raw", "y.npy", "deep/er/y.raw", "é.raw", "Result_4",
                         "x.txt"])
DTYPES = st.sampled_from(["<f4", "<f2", "<f8", "u1", "i1", "<i4", "?"])
ARRAYS = DTYPES.flatmap(lambda dt: hnp.arrays(
    np.dtype(dt), st.integers(0, 24),
    elements=st.floats(allow_nan=True, allow_infinity=True, width=16 if dt == "<f2" else 32)
    if dt[-2:] in ("f4", "f2", "f8") else None))
CONTENT = st.one_of(
    ARRAYS.map(lambda a: ("array", a)),
    st.binary(max_size=40).map(lambda b: ("bytes", b)),
    st.sampled_from([("npy_bad", b"\x93NUMPY\x01\x00\xff\xff{'descr': '<f4'"),
                     ("npy_obj", None), ("npy_str", None), ("fifo", None), ("dir", None),
                     ("zero_link", None)]))
ENTRIES = st.lists(st.tuples(FOLDERS, NAMES, CONTENT), max_size=8)


def _write(root: Path, entries: list[tuple[str, str, tuple[str, Any]]]) -> None:
    root.mkdir(parents=True)
    for folder, name, (kind, value) in entries:
        path = root / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            continue
        if kind == "array":
            if path.suffix == ".npy":
                np.save(path, value)
            else:
                value.tofile(path)
        elif kind == "bytes" or kind == "npy_bad":
            path.write_bytes(value)
        elif kind == "npy_obj":
            np.save(path, np.array([1, "x"], dtype=object), allow_pickle=True)
        elif kind == "npy_str":
            np.save(path, np.array(["ab", "c"]))
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            path.mkdir()
        elif kind == "zero_link":
            path.symlink_to("/dev/zero")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_compare")


def _load(path: Path, dtype: str | None) -> Any:
    try:
        return load_output_set(path, dtype=dtype)
    except UserError as exc:
        assert "\n" not in exc.oneline()
        return None


@given(ref=ENTRIES, test=ENTRIES, dtype=st.sampled_from([None, "float32", "uint8", "float16"]),
       shape=st.sampled_from([None, (4,), (2, 3), (0,)]),
       bounds=st.sampled_from([[], ["cosine=0.9"], ["max_abs=0.5", "snr=10"],
                               ["y:psnr=20", "mean_abs=1e-3"]]),
       step=st.sampled_from([None, {"": 0.5}, {"": 1e-30}]))
def test_random_output_trees(work: Path, ref: list[Any], test: list[Any], dtype: str | None,
                             shape: tuple[int, ...] | None, bounds: list[str],
                             step: dict[str, float] | None) -> None:
    shutil.rmtree(work / "case", ignore_errors=True)
    _write(work / "case" / "ref", ref)
    _write(work / "case" / "test", test)
    a, b = _load(work / "case" / "ref", dtype), _load(work / "case" / "test", dtype)
    if a is not None and b is not None:
        expected = {name: (None, shape) for name in a.names()} if shape is not None else None
        try:
            comp = compare_sets(a, b, apply_thresholds(bounds), expected=expected,
                                quant_steps=step)
        except UserError as exc:      # a per-output bound naming no output
            assert "\n" not in exc.oneline()
        else:
            json.dumps(comp.to_dict())
            comp.summary_line()
            metric_properties(comp, "fuzz", thresholds=apply_thresholds(bounds))
    for native in (False, True):
        findings = check_result_files(work / "case" / "test", samples=3, backend="htp",
                                      board="fuzz", native=native, expected=[
                                          ExpectedOutput("y", "y", 4, "uint8")])
        for f in findings:
            f.to_dict()
    dequantize_outputs(work / "case" / "test", {
        "y": NativeType("y", "QNN_DATATYPE_UFIXED_POINT_8", np.dtype("u1"), 0.5, -3)})
