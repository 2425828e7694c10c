"""The static-shape stage on real exported models (PaddleOCR, Silero VAD)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_ci.shapes import ShapeReport, analyse_and_pin
from qnn_ci.shapes.report import MINUS_ONE, STATIC, SYMBOLIC, UNKNOWN


def _analyse(model: Path, dims: dict[str, tuple[int, ...]], out: Path | None, *,
             opset: int | None = None, feeds: dict[str, np.ndarray] | None = None,
             fill: bool = True) -> ShapeReport:
    return analyse_and_pin(model, dims, opset=opset, out_path=out, feeds=feeds, fill=fill)


@pytest.fixture(scope="module")
def cls_report(cls_model: Path, tmp_path_factory: pytest.TempPathFactory) -> ShapeReport:
    out = tmp_path_factory.mktemp("cls") / "cls.static.onnx"
    return _analyse(cls_model, {"x": (1, 3, 48, 192)}, out)


@pytest.fixture(scope="module")
def rec_report(rec_model: Path, tmp_path_factory: pytest.TempPathFactory) -> ShapeReport:
    out = tmp_path_factory.mktemp("rec") / "rec.static.onnx"
    return _analyse(rec_model, {"x": (1, 3, 48, 320)}, out)


@pytest.fixture(scope="module")
def vad_report(vad_model: Path, tmp_path_factory: pytest.TempPathFactory) -> ShapeReport:
    out = tmp_path_factory.mktemp("vad") / "vad.static.onnx"
    return _analyse(vad_model, {"input": (1, 512), "state": (2, 1, 128)}, out,
                    feeds={"sr": np.array(16000, dtype=np.int64)})


def _kinds(io_dims: list | None) -> list[str]:
    assert io_dims is not None
    return [d.kind for d in io_dims]


# ---------------------------------------------------------------- cls: -1 and "?"

def test_cls_input_dims_classified(cls_report: ShapeReport) -> None:
    (x,) = cls_report.inputs
    assert x.name == "x" and x.dtype == "float32"
    assert _kinds(x.dims) == [MINUS_ONE, STATIC, SYMBOLIC, SYMBOLIC]
    assert x.dims is not None and x.dims[0].value == -1 and x.dims[2].param == "?"
    assert x.shape == (1, 3, 48, 192)


def test_cls_declared_minus_one_output_is_pinned(cls_report: ShapeReport) -> None:
    (out,) = cls_report.outputs
    assert _kinds(out.dims) == [MINUS_ONE, STATIC]
    assert out.shape == (1, 2)
    written = onnx.load(cls_report.output_model)
    dims = [d.dim_value for d in written.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 2]


def test_cls_declared_minus_one_dropped_before_inference(cls_model: Path) -> None:
    # Without the fill, inference cannot size the Reshape tail; the output's stale
    # -1 must still be gone (unknown), not carried into the pinned model.
    report = _analyse(cls_model, {"x": (1, 3, 48, 192)}, None, fill=False)
    (out,) = report.outputs
    assert _kinds(out.pinned) == [UNKNOWN, STATIC]
    assert not report.static


def test_cls_unshaped_tail_filled_from_onnxruntime(cls_report: ShapeReport) -> None:
    # onnx inference leaves the Reshape -> MatMul -> Softmax tail without a shape
    assert cls_report.inferred.unshaped >= 1
    filled = {f.name: f for f in cls_report.filled_tensors}
    assert any(f.was == "unshaped" and f.op_type == "Reshape" for f in filled.values())
    assert filled["save_infer_model/scale_0.tmp_1"].shape == (1, 2)
    assert cls_report.static and cls_report.equivalent is True
    assert cls_report.counts.static == cls_report.counts.tensors
    assert cls_report.summary().startswith(f"static: {cls_report.counts.tensors} tensors, "
                                           f"{len(filled)} filled from onnxruntime")


def test_cls_written_model_is_static_everywhere(cls_report: ShapeReport) -> None:
    model = onnx.load(cls_report.output_model)
    typed = {vi.name: vi for vi in (*model.graph.value_info, *model.graph.output)}
    for node in model.graph.node:
        for name in node.output:
            dims = typed[name].type.tensor_type.shape.dim
            assert all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), name


# ---------------------------------------------------------------- rec: literal "?"

def test_rec_literal_question_mark_is_symbolic(rec_report: ShapeReport) -> None:
    (x,) = rec_report.inputs
    assert x.dims is not None
    assert x.dims[2].kind == SYMBOLIC and x.dims[2].param == "?"


def test_rec_many_unshaped_interior_tensors_filled(rec_report: ShapeReport) -> None:
    assert rec_report.inferred.unshaped > 50          # inference alone leaves them unshaped
    unshaped_filled = [f for f in rec_report.filled_tensors if f.was == "unshaped"]
    assert len(unshaped_filled) == rec_report.inferred.unshaped
    assert rec_report.outputs[0].shape == (1, 40, 6625)
    assert rec_report.static and rec_report.equivalent is True
    assert not rec_report.dynamic_tensors and not rec_report.unshaped_tensors


def test_rec_metadata_and_producer_survive(rec_model: Path, rec_report: ShapeReport) -> None:
    before = onnx.load(str(rec_model), load_external_data=False)
    after = onnx.load(rec_report.output_model)
    meta_before = {p.key: p.value for p in before.metadata_props}
    meta_after = {p.key: p.value for p in after.metadata_props}
    assert meta_after["character"] == meta_before["character"]
    assert len(meta_after["character"]) > 10000
    assert (after.producer_name, after.producer_version) == \
        (before.producer_name, before.producer_version)


# ---------------------------------------------------------------- det: positive control

def test_det_positive_control(det_model: Path, tmp_path: Path) -> None:
    report = _analyse(det_model, {"x": (1, 3, 480, 640)}, tmp_path / "det.onnx")
    assert report.inferred.dynamic == 0 and report.inferred.unshaped == 0
    assert report.filled_tensors == []
    assert report.outputs[0].shape == (1, 1, 480, 640)
    assert report.ok and report.findings == []


# ---------------------------------------------------------------- silero: If breaks

def test_vad_pinned_model_fails_inside_if(vad_report: ShapeReport) -> None:
    assert vad_report.equivalent is False
    (check,) = vad_report.equivalence
    assert check.reason is not None
    assert "does not load" in check.reason and "LSTM" in check.reason
    assert "rank 3" in check.reason
    eq = [f for f in vad_report.findings if f.check == "shapes.equivalence"]
    assert eq and "LSTM" in eq[0].message
    assert not vad_report.ok


def test_vad_subgraph_tensors_listed_and_not_filled(vad_report: ShapeReport) -> None:
    assert vad_report.dynamic_tensors
    assert all(t.graph.startswith("main/If_0.") for t in vad_report.dynamic_tensors)
    pad = [t for t in vad_report.dynamic_tensors if t.op_type == "Pad"]
    assert pad and all(t.producer for t in pad)
    skipped = dict(vad_report.fill_skipped)
    assert skipped[pad[0].name].startswith("inside subgraph main/If_0.")
    assert not vad_report.static


def test_vad_pinned_model_is_written_anyway(vad_report: ShapeReport) -> None:
    assert vad_report.output_model and Path(vad_report.output_model).is_file()
    model = onnx.load(vad_report.output_model)
    pinned = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in model.graph.input}
    assert pinned["input"] == [1, 512] and pinned["state"] == [2, 1, 128]


def test_vad_pinned_model_fails_even_when_the_feed_is_invalid(vad_model: Path) -> None:
    # sr=3 makes the *original* fail, so outputs cannot be compared; but the pinned
    # model does not even load, whatever the inputs: that is still reported.
    report = _analyse(vad_model, {"input": (1, 512), "state": (2, 1, 128)}, None,
                      feeds={"sr": np.array(3, dtype=np.int64)}, fill=False)
    (check,) = report.equivalence
    assert check.equivalent is False
    assert check.reason is not None and "does not load in onnxruntime" in check.reason
    assert "rank 3" in check.reason
    assert report.equivalent is False and not report.ok



# ---------------------------------------------------------------- silero sequence: STFT pad

def test_seq_stft_pad_chain_stays_symbolic_after_inference(seq_model: Path) -> None:
    report = _analyse(seq_model, {"input": (8, 576)}, None, fill=False)
    names = {t.name for t in report.dynamic_tensors}
    assert "/stft/padding/Pad_output_0" in names
    assert report.inferred.dynamic == len(report.dynamic_tensors) > 10
    assert not report.static and not report.filled_tensors
    assert any(f.check == "shapes.dynamic" and f.subject == "/stft/padding/Pad_output_0"
               for f in report.findings)


def test_seq_stft_pad_chain_filled_from_onnxruntime(seq_model: Path, tmp_path: Path) -> None:
    report = _analyse(seq_model, {"input": (8, 576)}, tmp_path / "seq.onnx")
    filled = {f.name: f for f in report.filled_tensors}
    pad = filled["/stft/padding/Pad_output_0"]
    assert pad.was == "dynamic" and pad.op_type == "Pad"
    assert pad.shape[0] == 8 and pad.shape[1] > 576
    assert report.outputs[0].shape == (8,)
    assert report.ok


def test_cls_opset_conversion_verified(cls_model: Path, tmp_path: Path) -> None:
    report = _analyse(cls_model, {"x": (1, 3, 48, 192)}, tmp_path / "cls17.onnx", opset=17)
    assert (report.opset_from, report.opset_to) == (11, 17)
    assert [c.model for c in report.equivalence] == ["pinned", "opset 17"]
    assert report.ok
    written = onnx.load(report.output_model)
    assert [o.version for o in written.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert written.ir_version >= 8      # opset 17 needs IR 8; cls was IR 7
    onnx.checker.check_model(written)
