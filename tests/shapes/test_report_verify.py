"""Dim classification, the JSON object, feeds and the output comparison."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qnn_ci.errors import UserError
from qnn_ci.shapes.report import (
    MINUS_ONE,
    STATIC,
    SYMBOLIC,
    UNKNOWN,
    DimInfo,
    EquivalenceCheck,
    ShapeReport,
    TensorShapeInfo,
    dims_of,
)
from qnn_ci.shapes.verify import INT_HIGH, compare, make_feeds

from .conftest import make_model, tensor


def _dim(**kw: object) -> onnx.TensorShapeProto.Dimension:
    d = onnx.TensorShapeProto.Dimension()
    for k, v in kw.items():
        setattr(d, k, v)
    return d


@pytest.mark.parametrize(("dim", "kind", "text"), [
    (_dim(dim_value=3), STATIC, "3"),
    (_dim(dim_value=0), STATIC, "0"),
    (_dim(dim_param="batch"), SYMBOLIC, "'batch'"),
    (_dim(dim_param="?"), SYMBOLIC, "'?'"),
    (_dim(), UNKNOWN, "?"),
    (_dim(dim_value=-1), MINUS_ONE, "-1"),
])
def test_dim_kinds(dim: onnx.TensorShapeProto.Dimension, kind: str, text: str) -> None:
    info = DimInfo.from_proto(dim)
    assert info.kind == kind and str(info) == text
    assert info.static == (kind == STATIC)


def test_dims_of_no_shape_and_non_tensor() -> None:
    assert dims_of(tensor("x", None)) is None
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    assert dims_of(seq) is None
    assert [d.kind for d in dims_of(tensor("x", ["N", 3, None])) or []] == \
        [SYMBOLIC, STATIC, UNKNOWN]


def test_json_object_has_documented_keys() -> None:
    given = dims_of(tensor("x", [-1, 3]))
    report = ShapeReport(model="m.onnx", inputs=[
        TensorShapeInfo("x", "float32", given, [DimInfo(STATIC, 1), DimInfo(STATIC, 3)])])
    report.equivalence.append(EquivalenceCheck("pinned", True))
    d = json.loads(json.dumps(report.to_dict()))
    for key in ("inputs", "outputs", "dynamic_tensors", "unshaped_tensors", "filled_tensors",
                "static", "equivalent", "output_model"):
        assert key in d
    x = d["inputs"][0]
    assert x["name"] == "x" and x["dtype"] == "float32" and x["shape"] == [1, 3]
    assert x["dims"][0] == {"kind": MINUS_ONE, "value": -1, "param": None}
    assert d["static"] is True and d["equivalent"] is True and d["output_model"] is None


def test_equivalent_combines_checks() -> None:
    r = ShapeReport(model="m")
    assert r.equivalent is None
    r.equivalence = [EquivalenceCheck("pinned", True), EquivalenceCheck("opset 17", None)]
    assert r.equivalent is None
    r.equivalence.append(EquivalenceCheck("x", False, "boom"))
    assert r.equivalent is False


def _io_model() -> onnx.ModelProto:
    return make_model([helper.make_node("Identity", ["a"], ["y"])],
                      [tensor("a", [2, 3]), tensor("ids", [4], TensorProto.INT64),
                       tensor("flag", [], TensorProto.BOOL)],
                      [tensor("y", [2, 3])])


def test_make_feeds_default_random_with_sane_ints() -> None:
    feeds, why = make_feeds(_io_model())
    assert why is None
    assert feeds["a"].dtype == np.float32 and feeds["a"].shape == (2, 3)
    assert feeds["ids"].dtype == np.int64
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < INT_HIGH
    assert feeds["flag"].dtype == bool and feeds["flag"].shape == ()


def test_make_feeds_uses_and_casts_given_arrays() -> None:
    feeds, why = make_feeds(_io_model(), {"ids": np.array([7, 8, 9, 10], np.int32)})
    assert why is None
    assert feeds["ids"].dtype == np.int64 and feeds["ids"].tolist() == [7, 8, 9, 10]


def test_make_feeds_rejects_bad_given_arrays() -> None:
    with pytest.raises(UserError, match="--feed idz: the model has no input 'idz'"):
        make_feeds(_io_model(), {"idz": np.zeros(4)})
    with pytest.raises(UserError, match=r"--feed a: feed has shape \[3, 2\]"):
        make_feeds(_io_model(), {"a": np.zeros((3, 2))})


def test_make_feeds_reports_dynamic_input() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", ["N"])],
                       [tensor("y", ["N"])])
    feeds, why = make_feeds(model)
    assert feeds == {} and why is not None and "'x' is not static" in why


def test_compare() -> None:
    ref = {"y": np.array([1.0, 2.0, np.nan], np.float32), "i": np.array([1, 2])}
    ok = compare(ref, {"y": ref["y"] + 1e-7, "i": np.array([1, 2])}, "pinned")
    assert ok.equivalent is True and ok.max_abs_diff["y"] < 1e-6
    bad = compare(ref, {"y": ref["y"] + 0.5, "i": np.array([1, 3])}, "pinned")
    assert bad.equivalent is False
    assert "y: max |diff| 0.5" in (bad.reason or "") and "i: values differ" in (bad.reason or "")
    shape = compare(ref, {"y": np.zeros(2, np.float32), "i": ref["i"]}, "pinned")
    assert shape.equivalent is False and "shape [2] != [3]" in (shape.reason or "")
    names = compare(ref, {"y": ref["y"]}, "pinned")
    assert names.equivalent is False and "outputs differ" in (names.reason or "")
