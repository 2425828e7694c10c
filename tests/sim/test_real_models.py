"""Real models on the real simulator: the PP-OCR classifier (weights in Constant
nodes, unfused BatchNormalization) with rendered text, and the detector once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.engine.results import Severity
from qnn_ci.sim.check import check_htp
from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.prepare import prepare_for_htp
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from qnn_ci.sim.samples import inputs_of, random_samples
from tests.sim.conftest import needs_sim, pin_model

pytestmark = needs_sim


def test_classifier_prepares_for_qcs6490_and_matches_fp32(cls_prepared, cls_held_out) -> None:
    report = cls_prepared     # check_htp(cls_pinned, ..., text_lines(8)), once a run
    assert report.passed, [f.message for f in report.errors()]
    q, p = report.quantize, report.prepare
    assert q.constants_folded == 308
    assert "sim.constants_folded" in {f.check for f in report.findings}
    assert (p.context.soc_type, p.context.arch) == ("QCS6490", 68)
    assert p.nodes_on_htp == p.nodes_total > 500
    assert report.fp16[0]["count"] == 0
    num = cls_held_out        # simulate_and_compare on text_lines(10)[8:], once a run
    assert num.passed, [f.message for f in num.comparison.errors()]
    worst = num.comparison.worst("cosine")
    assert worst is not None and worst[0] > 0.999
    assert num.samples == 2 and num.sim_s_per_inference > 0
    # The outputs are kept in the qnn-net-run layout under the output's own name.
    assert num.sim_dir.name == "sim"
    assert (num.sim_dir / "Result_1" / "save_infer_model" / "scale_0.tmp_1.npy").is_file()
    oracle = [f for f in num.findings if f.check == "compare.accuracy"]
    assert len(oracle) == 2 and all(f.severity == Severity.INFO for f in oracle)


def test_classifier_as_shipped_fails_with_the_nhwc_message_explained(
        cls_pinned: Path, tmp_path: Path, text_lines) -> None:
    """Constant-node weights stay float in the quantizer; the v68 HTP then
    rejects every Conv and onnxruntime only says something about NHWC."""
    qdq = quantize_for_htp(cls_pinned, tmp_path / "cls.qdq.onnx", text_lines(2),
                           QuantSettings(), fold=False, fuse=False)
    assert qdq.constants_folded == 0
    res = prepare_for_htp(qdq.model, tmp_path, sim_target("QCS6490"))
    assert not res.prepared
    assert "inserted using the NHWC format" in (res.error or "")
    nhwc = next(f for f in res.findings if f.check == "sim.nhwc")
    assert "float (unquantized) weights" in nhwc.message
    assert any(r.op_type == "Conv" and r.error_code == 3110 for r in res.rejected)


def test_unfused_batchnorm_is_warned_and_the_simulator_shows_why(cls_unfused_run) -> None:
    """Folded constants but no pre-processing: BatchNormalization stays a node of
    its own and the simulated HTP result is far off, while the same QDQ model on
    the CPU is fine. The default path fuses it (first test). The run is shared
    with tests/diagnose (``cls_unfused_run``: 4 lines calibrate, 1 is held out)."""
    u = cls_unfused_run
    bn = next(f for f in u.quantize.findings if f.check == "sim.batchnorm")
    assert bn.severity == Severity.WARNING and bn.message.startswith("35 BatchNormalization")
    assert u.prepare.prepared
    num = u.numerics
    assert num.samples == 1
    assert not num.passed
    assert num.qdq_cpu is not None and num.qdq_cpu.passed
    assert any(f.check == "compare.accuracy" and f.severity == Severity.WARNING
               for f in num.findings)


@pytest.mark.slow
def test_detector_prepares_for_qcs6490(det_model: Path, tmp_path: Path) -> None:
    """The one detector test: prepare only (random calibration, said so)."""
    pinned = pin_model(det_model, tmp_path / "det.static.onnx", {"x": [1, 3, 480, 640]})
    import onnx

    metas = inputs_of(onnx.load(str(pinned), load_external_data=False))
    report = check_htp(pinned, tmp_path, sim_target("QCS6490"), random_samples(metas, 1),
                       QuantSettings(), random_calibration=True)
    assert report.passed, [f.message for f in report.errors()]
    assert report.quantize.constants_folded > 0
    assert report.prepare.nodes_on_htp == report.prepare.nodes_total
    assert "sim.random_calibration" in {f.check for f in report.findings}
    trace = json.loads(report.prepare.op_trace.read_text())
    qnn_ops = {m["dst_qnn_op_type"] for t in trace["subgraph_traces"]
               for m in t["op_mappings"]}
    assert {"Conv2d", "TransposeConv2d"} <= qnn_ops
