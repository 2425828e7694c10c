"""The static-shape stage on small onnx.helper graphs: subgraphs, stale
value_info, data-dependent shapes, opset conversion, external data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError
from qnn_ci.model.modelio import Scratch
from qnn_ci.shapes import analyse_and_pin
from qnn_ci.shapes.fill import fill_from_onnxruntime
from qnn_ci.shapes.pin import drop_stale_shapes, infer, list_tensors, pin_inputs
from qnn_ci.shapes.report import InteriorTensor

from .conftest import make_model, save, tensor


def _static_dims(model: onnx.ModelProto, name: str) -> list[int]:
    for vi in (*model.graph.value_info, *model.graph.output, *model.graph.input):
        if vi.name == name:
            return [d.dim_value if d.HasField("dim_value") else -999
                    for d in vi.type.tensor_type.shape.dim]
    raise KeyError(name)


# ---------------------------------------------------------------- subgraphs

def _if_model() -> onnx.ModelProto:
    then_g = helper.make_graph(
        [helper.make_node("NonZero", ["X"], ["nz"], name="nz_node"),
         helper.make_node("Cast", ["nz"], ["t_out"], to=TensorProto.FLOAT, name="cast_then")],
        "then", [], [tensor("t_out", None)])
    else_g = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["r"], name="relu_else"),
         helper.make_node("Reshape", ["r", "shp"], ["e_out"], name="reshape_else")],
        "else", [], [tensor("e_out", None)])
    inits = [numpy_helper.from_array(np.array([2, -1], np.int64), "shp"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    return make_model(
        [helper.make_node("ReduceSum", ["X"], ["s"], keepdims=0, name="sum"),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["Y"], then_branch=then_g, else_branch=else_g,
                          name="branch")],
        [tensor("X", ["N", 4])], [tensor("Y", None)], initializers=inits)


def test_subgraph_tensors_dynamic_are_listed_by_graph_and_producer(tmp_path: Path) -> None:
    path = save(_if_model(), tmp_path / "if.onnx")
    report = analyse_and_pin(path, {"X": (2, 4)}, opset=None, out_path=None)
    dyn = {t.name: t for t in report.dynamic_tensors}
    assert dyn["nz"].graph == "main/branch.then_branch"
    assert (dyn["nz"].producer, dyn["nz"].op_type) == ("nz_node", "NonZero")
    unshaped = {t.name: t for t in report.unshaped_tensors}
    assert unshaped["e_out"].graph == "main/branch.else_branch"
    assert unshaped["e_out"].producer == "reshape_else"
    # the main graph's If output was filled; the subgraph tensors could not be
    skipped = dict(report.fill_skipped)
    assert "cannot expose" in skipped["nz"] and "main/branch.then_branch" in skipped["nz"]
    assert [f.name for f in report.filled_tensors] == ["Y"]
    assert not report.static and report.equivalent is True and not report.ok
    subjects = {f.subject for f in report.findings if f.check == "shapes.dynamic"}
    assert {"nz", "t_out"} <= subjects
    # an If output's shape depends on which branch ran
    assert any(f.check == "shapes.data_dependent" and f.subject == "Y"
               for f in report.findings)


def test_drop_stale_shapes_reaches_subgraphs() -> None:
    model = _if_model()
    then_g = model.graph.node[2].attribute[0].g
    then_g.value_info.append(tensor("nz", [2, "old"]))
    then_g.output[0].CopyFrom(tensor("t_out", [2, "old"]))
    model.graph.value_info.append(tensor("s", []))
    model.graph.output[0].CopyFrom(tensor("Y", [-1, 8]))
    assert drop_stale_shapes(model) == 2
    assert len(then_g.value_info) == 0 and len(model.graph.value_info) == 0
    then_dims = then_g.output[0].type.tensor_type.shape.dim
    assert [d.WhichOneof("value") for d in then_dims] == ["dim_value", None]
    out_dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.WhichOneof("value") for d in out_dims] == [None, "dim_value"]


# ---------------------------------------------------------------- stale value_info

def _stale_model() -> onnx.ModelProto:
    # exported at N=3: the interior Y kept a static [3, 4] that is wrong for N=2
    return make_model(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu"),
         helper.make_node("Neg", ["Y"], ["Z"], name="neg")],
        [tensor("X", ["N", 4])], [tensor("Z", ["N", 4])], value_info=[tensor("Y", [3, 4])])


def test_stale_value_info_survives_plain_inference() -> None:
    # The trap: pin + infer without dropping value_info keeps the old shape.
    model = _stale_model()
    pin_inputs(model, {"X": (2, 4)})
    inferred, warnings = infer(model)
    assert warnings and "differ" in warnings[0]
    shapes = {t.name: [d.value for d in t.dims or []] for t in list_tensors(inferred).static}
    assert shapes["Y"] == [3, 4]


def test_stale_value_info_dropped(tmp_path: Path) -> None:
    path = save(_stale_model(), tmp_path / "stale.onnx")
    out = tmp_path / "pinned.onnx"
    report = analyse_and_pin(path, {"X": (2, 4)}, opset=None, out_path=out)
    assert report.dropped_value_info == 1
    written = onnx.load(str(out))
    assert _static_dims(written, "Y") == [2, 4]
    assert _static_dims(written, "Z") == [2, 4]
    assert report.ok


def test_symbolic_value_info_replaced(tmp_path: Path) -> None:
    model = _stale_model()
    model.graph.value_info[0].CopyFrom(tensor("Y", ["N", 4]))
    path = save(model, tmp_path / "sym.onnx")
    report = analyse_and_pin(path, {"X": (5, 4)}, opset=None, out_path=tmp_path / "o.onnx")
    assert _static_dims(onnx.load(str(tmp_path / "o.onnx")), "Y") == [5, 4]
    assert report.ok


# ---------------------------------------------------------------- data-dependent shapes

def test_nonzero_filled_with_data_dependent_warning(tmp_path: Path) -> None:
    model = make_model([helper.make_node("NonZero", ["X"], ["idx"], name="nz"),
                        helper.make_node("Transpose", ["idx"], ["Y"], name="tr")],
                       [tensor("X", ["N", 3])], [tensor("Y", None, TensorProto.INT64)])
    path = save(model, tmp_path / "nz.onnx")
    feeds = {"X": np.array([[1, 0, 2], [0, 0, 3]], np.float32)}
    report = analyse_and_pin(path, {"X": (2, 3)}, opset=None, out_path=None, feeds=feeds)
    filled = {f.name: f for f in report.filled_tensors}
    assert filled["idx"].shape == (2, 3) and filled["idx"].was == "dynamic"
    warn = [f for f in report.findings if f.check == "shapes.data_dependent"]
    assert [w.subject for w in warn] == ["idx"] and warn[0].severity == Severity.WARNING
    assert report.ok    # a warning does not fail the stage


# ---------------------------------------------------------------- inputs

def test_static_inputs_need_no_dims(tmp_path: Path) -> None:
    model = make_model([helper.make_node("Relu", ["X"], ["Y"])], [tensor("X", [2, 4])],
                       [tensor("Y", [2, 4])])
    report = analyse_and_pin(save(model, tmp_path / "s.onnx"), {}, opset=None, out_path=None)
    assert report.ok and report.findings == []


def test_dynamic_input_without_dims_is_a_finding(tmp_path: Path) -> None:
    model = make_model([helper.make_node("Relu", ["X"], ["Y"])], [tensor("X", ["N", 4])],
                       [tensor("Y", ["N", 4])])
    report = analyse_and_pin(save(model, tmp_path / "d.onnx"), {}, opset=None, out_path=None)
    (msg,) = [f.message for f in report.findings if f.check == "shapes.input"]
    assert "'X' is dynamic" in msg and "--dim X=<d0>,4" in msg
    assert report.equivalent is None and not report.ok


def test_input_without_shape_can_be_pinned(tmp_path: Path) -> None:
    model = make_model([helper.make_node("Relu", ["X"], ["Y"])], [tensor("X", None)],
                       [tensor("Y", None)])
    report = analyse_and_pin(save(model, tmp_path / "r.onnx"), {"X": (2, 3, 4)}, opset=None,
                             out_path=None)
    assert report.inputs[0].dims is None and report.inputs[0].shape == (2, 3, 4)
    assert report.outputs[0].shape == (2, 3, 4)
    assert report.ok


# ---------------------------------------------------------------- opset conversion

def _reduce_model(opset: int) -> onnx.ModelProto:
    return make_model(
        [helper.make_node("ReduceMean", ["X"], ["m"], axes=[1], keepdims=1, name="mean"),
         helper.make_node("Sub", ["X", "m"], ["Y"], name="sub")],
        [tensor("X", ["N", 8])], [tensor("Y", ["N", 8])], opset=opset,
        metadata={"vocab": "abc"})


@pytest.mark.parametrize("target", [17, 18])
def test_opset_conversion_verified(tmp_path: Path, target: int) -> None:
    path = save(_reduce_model(13), tmp_path / "m13.onnx")
    out = tmp_path / f"m{target}.onnx"
    report = analyse_and_pin(path, {"X": (2, 8)}, opset=target, out_path=out)
    assert (report.opset_from, report.opset_to) == (13, target)
    assert [(c.model, c.equivalent) for c in report.equivalence] == \
        [("pinned", True), (f"opset {target}", True)]
    written = onnx.load(str(out))
    assert [o.version for o in written.opset_import if o.domain == ""] == [target]
    assert {p.key: p.value for p in written.metadata_props} == {"vocab": "abc"}
    assert written.producer_name == "qnn-ci-tests"
    if target >= 18:   # the converter moved ReduceMean's axes into an input
        (mean,) = [n for n in written.graph.node if n.op_type == "ReduceMean"]
        assert len(mean.input) == 2
    assert report.ok


def test_opset_conversion_failure_is_reported_and_model_still_written(tmp_path: Path) -> None:
    model = make_model([helper.make_node("Celu", ["X"], ["Y"])], [tensor("X", ["N", 4])],
                       [tensor("Y", ["N", 4])], opset=13)
    out = tmp_path / "celu.onnx"
    report = analyse_and_pin(save(model, tmp_path / "c.onnx"), {"X": (1, 4)}, opset=11,
                             out_path=out)
    assert report.equivalence[0].equivalent is True
    assert report.equivalence[1].equivalent is False
    assert "Celu" in (report.equivalence[1].reason or "")
    assert not report.ok and out.is_file()


# ---------------------------------------------------------------- external data

def test_external_data_preserved(tmp_path: Path) -> None:
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir()
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, "W")
    b = numpy_helper.from_array(np.ones(8, np.float32), "B")
    model = make_model([helper.make_node("MatMul", ["X", "W"], ["h"]),
                        helper.make_node("Add", ["h", "B"], ["Y"])],
                       [tensor("X", ["N", 8])], [tensor("Y", ["N", 8])], initializers=[w, b])
    src = src_dir / "m.onnx"
    onnx.save(model, str(src), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    out = out_dir / "m.static.onnx"
    report = analyse_and_pin(src, {"X": (3, 8)}, opset=17, out_path=out)
    assert report.ok
    data = out_dir / "m.static.onnx.data"
    assert data.is_file() and data.stat().st_size == 64 * 4 + 8 * 4
    written = onnx.load(str(out), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in written.graph.initializer)
    loaded = onnx.load(str(out))
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]),
                                  numpy_helper.to_array(w))
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"X": x})[0]
    np.testing.assert_allclose(got, x @ numpy_helper.to_array(w) + 1, rtol=1e-5)
    assert (src_dir / "weights.bin").is_file()       # the original is untouched


def test_missing_external_data_is_bad_input(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    model = make_model([helper.make_node("MatMul", ["X", "W"], ["Y"])], [tensor("X", [1, 4])],
                       [tensor("Y", [1, 4])], initializers=[w])
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True,
              location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(UserError, match=r"external data file 'w\.bin' not found"):
        analyse_and_pin(tmp_path / "m.onnx", {}, opset=None, out_path=None)


# ---------------------------------------------------------------- the fill run itself

def _chain_model() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([-1], np.int64), "flat")
    return make_model([helper.make_node("Reshape", ["X", "flat"], ["a"], name="r"),
                       helper.make_node("Relu", ["a"], ["b"], name="relu"),
                       helper.make_node("Neg", ["b"], ["Y"], name="neg")],
                      [tensor("X", [2, 3])], [tensor("Y", None)], initializers=[shape])


def test_fill_skips_what_cannot_be_exposed_and_fills_the_rest(tmp_path: Path) -> None:
    model = _chain_model()
    feeds = {"X": np.ones((2, 3), np.float32)}
    candidates = [InteriorTensor("a", "main", "r", "Reshape"),
                  InteriorTensor("ghost", "main", "?", "?"),   # no node makes it
                  InteriorTensor("b", "main", "relu", "Relu")]
    with Scratch(tmp_path / "x.onnx", model) as scratch:
        result = fill_from_onnxruntime(model, candidates, feeds, scratch)
    assert result.shapes == {"a": ((6,), TensorProto.FLOAT), "b": ((6,), TensorProto.FLOAT)}
    (skip,) = result.skipped
    assert skip[0] == "ghost" and "cannot be exposed" in skip[1]
    assert [o.name for o in model.graph.output] == ["Y"]   # extra outputs removed again


def test_fill_skips_non_tensors(tmp_path: Path) -> None:
    model = make_model([helper.make_node("SequenceConstruct", ["X", "X"], ["S"], name="sc"),
                        helper.make_node("ConcatFromSequence", ["S"], ["Y"], axis=0,
                                         name="cat")],
                       [tensor("X", [2, 4])], [tensor("Y", None)])
    path = save(model, tmp_path / "seq.onnx")
    report = analyse_and_pin(path, {}, opset=None, out_path=None)
    assert [t.name for t in report.unshaped_tensors] == ["S"]
    assert dict(report.fill_skipped)["S"] == "not a tensor (sequence)"
    assert report.outputs[0].shape == (4, 4)


def test_fill_disabled(tmp_path: Path) -> None:
    # onnx inference cannot evaluate ReduceProd(Shape(X)): the Reshape and what
    # follows get no shape
    model = make_model([helper.make_node("Shape", ["X"], ["s"], name="shape"),
                        helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1, name="prod"),
                        helper.make_node("Reshape", ["X", "n"], ["a"], name="r"),
                        helper.make_node("Relu", ["a"], ["Y"], name="relu")],
                       [tensor("X", [2, 3])], [tensor("Y", None)])
    path = save(model, tmp_path / "c.onnx")
    on = analyse_and_pin(path, {}, opset=None, out_path=None)
    off = analyse_and_pin(path, {}, opset=None, out_path=None, fill=False)
    assert on.static and {f.name: f.shape for f in on.filled_tensors} == {"a": (6,), "Y": (6,)}
    assert not off.static and not off.filled_tensors
    assert {t.name for t in off.unshaped_tensors} == {"a", "Y"}
    assert off.inferred.to_dict() == on.inferred.to_dict()
