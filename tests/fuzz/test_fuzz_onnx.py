"""Fuzz ONNX model loading through the entry points the CLI uses: bit flips,
deletions, insertions and truncations of a small real model (the PP-OCR
text-direction classifier's graph, its weights moved to an external file so the
mutations hit the graph) and of a tiny graph with a subgraph and symbolic dims.
``load_model`` (qnn-ci inputs / sim), ``model_signature`` (manifests), the
encodings coverage (qnn-ci encodings --model) and ``analyse_and_pin`` (qnn-ci
shapes) may only give a result, findings or one ``UserError`` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from qnn_ci.errors import UserError
from qnn_ci.model.onnx_io import graph_inputs, graph_outputs, load_model, model_signature
from qnn_ci.sdk.encodings import Encodings
from qnn_ci.sdk.encodings_coverage import coverage
from qnn_ci.sdk.encodings_coverage import load_model as load_for_encodings
from qnn_ci.shapes import analyse_and_pin
from tests.conftest import package_file
from tests.fuzz.mutations import Files, apply_edits, byte_edits

ONNX_TOKENS = [b"\x00", b"\xff", b"\x08\xe7\x07", b"\x12\x01\xff", b"\x0a\x00",
               b"\xff" * 10, b"\x80" * 11, b"\x1a\x02x\xff"]


def _tiny() -> onnx.ModelProto:
    """x[N, 4] -> If(cond) -> Relu -> y, with a symbolic dim and a subgraph."""
    then_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 4])
    else_out = helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 4])
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [then_out])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [else_out])
    nodes = [helper.make_node("If", ["c"], ["i"], name="if0", then_branch=then_g,
                              else_branch=else_g),
             helper.make_node("Relu", ["i"], ["y"], name="relu0")]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = Files(tiny=_tiny().SerializeToString())
    cls = package_file("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
    if cls is not None:
        folder = tmp_path_factory.mktemp("cls_ext")
        model = onnx.load(str(cls))
        onnx.save(model, str(folder / "cls.onnx"), save_as_external_data=True,
                  location="cls.onnx.data", size_threshold=0)
        out["cls"] = (folder / "cls.onnx").read_bytes()
        out["cls_dir"] = str(folder).encode()
    return out


def one_line(call: Any) -> Any:
    try:
        return call()
    except UserError as exc:
        line = exc.oneline()
        assert line and "\n" not in line
        return None


@given(which=st.sampled_from(["tiny", "cls"]), edits=byte_edits(ONNX_TOKENS),
       pin=st.booleans())
def test_mutated_models(models: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory,
                        which: str, edits: list[tuple[Any, ...]], pin: bool) -> None:
    if which not in models:
        which = "tiny"
    folder = Path(models["cls_dir"].decode()) if which == "cls" else \
        tmp_path_factory.getbasetemp()
    path = folder / f"fuzz_{which}.onnx"        # beside cls.onnx.data, its external data
    path.write_bytes(apply_edits(models[which], edits))
    model = one_line(lambda: load_model(path))
    if model is not None:
        for io in (*graph_inputs(model), *graph_outputs(model)):
            assert isinstance(io.name, str) and isinstance(io.dtype, str)
            assert io.static_shape is None or all(d > 0 for d in io.static_shape)
    one_line(lambda: model_signature(path))
    proto = one_line(lambda: load_for_encodings(path))
    if proto is not None:
        json.dumps(coverage(Encodings("fuzz", "2.0.0"), proto).to_dict())
    dims = {"x": (2, 4)} if which == "tiny" else {"x": (1, 3, 48, 192)}
    report = one_line(lambda: analyse_and_pin(path, dims if pin else {}, opset=None,
                                              out_path=None, fill=which == "tiny"))
    if report is not None:
        json.dumps(report.to_dict())
        report.summary()
