"""Native output files: types from a converter _net.json, chunked dequantization."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.boards.native_outputs import (
    dequantize_file,
    dequantize_outputs,
    native_types,
    storage_dtype,
)
from qnn_ci.tables import QNN_DATATYPES


@pytest.mark.parametrize(("name", "dtype"), [
    ("QNN_DATATYPE_UFIXED_POINT_8", "u1"), ("QNN_DATATYPE_UFIXED_POINT_16", "<u2"),
    ("QNN_DATATYPE_SFIXED_POINT_8", "i1"), ("QNN_DATATYPE_SFIXED_POINT_32", "<i4"),
    ("QNN_DATATYPE_INT_64", "<i8"), ("QNN_DATATYPE_UINT_16", "<u2"),
    ("QNN_DATATYPE_FLOAT_16", "<f2"), ("QNN_DATATYPE_FLOAT_32", "<f4"),
    ("QNN_DATATYPE_BOOL_8", "u1"), ("QNN_DATATYPE_UNDEFINED", None),
])
def test_storage_dtype(name: str, dtype: str | None) -> None:
    assert name in QNN_DATATYPES
    assert storage_dtype(name) == (np.dtype(dtype) if dtype else None)


def _net_json(path: Path, outputs: dict[str, tuple[str, dict[str, object] | None]]) -> Path:
    tensors = {"in": {"type": 0, "data_type": QNN_DATATYPES["QNN_DATATYPE_FLOAT_32"],
                      "dims": [1, 4]}}
    for name, (dt, quant) in outputs.items():
        tensors[name] = {"type": 1, "data_type": QNN_DATATYPES[dt], "dims": [1, 4],
                         "quant_params": quant or {"definition": 2147483647}}
    path.write_text(json.dumps({"graph": {"tensors": tensors, "nodes": {}}}))
    return path


def test_types_by_graph_name_and_what_cannot_be_read(tmp_path: Path) -> None:
    so = {"definition": 1, "encoding": 0,
          "scale_offset": {"bitwidth": 16, "scale": 0.5, "offset": -100}}
    axis = {"definition": 1, "encoding": 1, "axis_scale_offset": {"axis": 3}}
    nj = _net_json(tmp_path / "m_net.json", {
        "_conv1_out": ("QNN_DATATYPE_UFIXED_POINT_16", so),
        "scores": ("QNN_DATATYPE_FLOAT_16", None),
        "per_axis": ("QNN_DATATYPE_SFIXED_POINT_8", axis),
        "undefined_q": ("QNN_DATATYPE_UFIXED_POINT_8", None)})
    types, findings = native_types(nj, ["/conv1/out", "scores", "per_axis", "undefined_q",
                                        "gone"])
    assert types["/conv1/out"].dtype == np.dtype("<u2")
    assert (types["/conv1/out"].scale, types["/conv1/out"].offset) == (0.5, -100)
    assert types["/conv1/out"].describe() == "UFIXED_POINT_16 (scale 0.5, offset -100)"
    assert types["scores"].dtype == np.dtype("<f2") and not types["scores"].quantized
    messages = {f.subject: f.message for f in findings}
    assert sorted(messages) == ["gone", "per_axis", "undefined_q"]
    assert "only scale/offset encodings are dequantized" in messages["per_axis"]
    assert "without a defined encoding" in messages["undefined_q"]
    assert f"not among the graph outputs of {nj}" in messages["gone"]
    assert all(m.startswith("native_outputs: output ") and "\n" not in m
               for m in messages.values())


def test_dequantize_matches_numpy_in_chunks(tmp_path: Path) -> None:
    so = {"definition": 1, "encoding": 0, "scale_offset": {"scale": 0.0123, "offset": -30251}}
    nj = _net_json(tmp_path / "m_net.json", {"y": ("QNN_DATATYPE_UFIXED_POINT_16", so),
                                             "h": ("QNN_DATATYPE_FLOAT_16", None)})
    types, findings = native_types(nj, ["y", "h"])
    assert not findings
    rng = np.random.default_rng(3)
    q = rng.integers(0, 65536, size=10_007, dtype=np.uint16)
    h = rng.standard_normal(333).astype(np.float16)
    for n in (0, 1):
        rdir = tmp_path / "out" / f"Result_{n}" / "graph"
        rdir.mkdir(parents=True)
        q.tofile(rdir / "y_native.raw")
        h.tofile(rdir / "h_native.raw")
    (tmp_path / "out" / "Result_1" / "graph" / "h_native.raw").write_bytes(b"\0" * 7)  # short
    assert dequantize_outputs(tmp_path / "out", types, chunk=1000) == 3
    got = np.fromfile(tmp_path / "out/Result_0/graph/y.raw", np.float32)
    want = ((q.astype(np.float64) - 30251) * 0.0123).astype(np.float32)
    assert np.array_equal(got, want)
    assert np.array_equal(np.fromfile(tmp_path / "out/Result_1/graph/y.raw", np.float32), want)
    assert np.array_equal(np.fromfile(tmp_path / "out/Result_0/graph/h.raw", np.float32),
                          h.astype(np.float32))
    assert not (tmp_path / "out/Result_1/graph/h.raw").exists()   # left for the size check
    # one call, a file many times the chunk
    dequantize_file(tmp_path / "out/Result_0/graph/y_native.raw", tmp_path / "y.raw",
                    types["y"], chunk=7)
    assert np.array_equal(np.fromfile(tmp_path / "y.raw", np.float32), want)
