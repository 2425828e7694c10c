"""static_shapes writes the pinned model once and opens it once (issue 12): the
real onnx.save and onnxruntime session are wrapped to count calls, not replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest

from qnn_ci.shapes import analyse_and_pin


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    calls: dict[str, list[str]] = {"save": [], "session": []}
    real_save, real_session = onnx.save, ort.InferenceSession

    def save(model: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        calls["save"].append(str(f))
        return real_save(model, f, *args, **kwargs)

    def session(path: Any, *args: Any, **kwargs: Any) -> Any:
        calls["session"].append(str(path))
        return real_session(path, *args, **kwargs)

    monkeypatch.setattr(onnx, "save", save)
    monkeypatch.setattr(ort, "InferenceSession", session)
    return calls


def test_det_pinned_model_saved_once_opened_once(det_model: Path, tmp_path: Path,
                                                 counted: dict[str, list[str]]) -> None:
    out = tmp_path / "det.static.onnx"
    report = analyse_and_pin(det_model, {"x": (1, 3, 480, 640)}, opset=None, out_path=out)
    assert [c.equivalent for c in report.equivalence] == [True]
    assert len(counted["save"]) == 1 and counted["save"][0].startswith(str(out))
    pinned = [p for p in counted["session"] if p != str(det_model)]
    assert pinned == [str(out)], counted["session"]
    assert onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim[2].dim_value == 480


def test_cls_with_fill_still_writes_the_output_once(cls_model: Path, tmp_path: Path,
                                                    counted: dict[str, list[str]]) -> None:
    out = tmp_path / "cls.static.onnx"
    report = analyse_and_pin(cls_model, {"x": (1, 3, 48, 192)}, opset=None, out_path=out)
    assert report.equivalence[0].equivalent is True
    assert sum(p.startswith(str(out)) for p in counted["save"]) == 1
    assert counted["session"].count(str(out)) == 1


def test_opset_conversion_checks_the_written_converted_model(
        det_model: Path, tmp_path: Path, counted: dict[str, list[str]]) -> None:
    out = tmp_path / "det.17.onnx"
    report = analyse_and_pin(det_model, {"x": (1, 3, 64, 64)}, opset=17, out_path=out)
    assert [c.model for c in report.equivalence] == ["pinned", "opset 17"]
    assert sum(p.startswith(str(out)) for p in counted["save"]) == 1
    assert counted["session"].count(str(out)) == 1
    opsets = onnx.load(str(out)).opset_import
    assert max(o.version for o in opsets if o.domain in ("", "ai.onnx")) == 17
