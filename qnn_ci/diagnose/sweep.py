"""The per-layer sweep on the QDQ CPU path: every float intermediate of the fp32
model against the QDQ model's value of the same tensor, both on onnxruntime
CPU, over the held-out samples one at a time (only the metrics are kept).

The cheap path for a quantization loss: two CPU sessions with every
intermediate exposed, no simulator.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from qnn_ci.diagnose.intermediates import (
    QuantizedNames,
    cpu_session,
    float_tensors,
    quantized_names,
    save_exposed,
)
from qnn_ci.diagnose.layers import LayerAccumulator, LayerReport, TensorInfo

log = logging.getLogger(__name__)

Feeds = dict[str, np.ndarray]


@dataclass
class SweepResult:
    """The QDQ CPU per-layer sweep: its layer report, the tensors swept and the time taken."""

    report: LayerReport
    order: list[TensorInfo]
    names: QuantizedNames
    samples: int
    seconds: float                  # all of it
    setup_s: float = 0.0            # loading, exposing, building the two sessions
    run_s: float = 0.0              # the samples: both inferences and the metrics


def float_model_of(qdq_model: Path) -> Path | None:
    """The float model ``quantize_for_htp`` wrote beside ``qdq_model``
    (``<stem>.float.onnx``: Constants folded, BatchNormalization fused)."""
    stem = qdq_model.name.removesuffix(".onnx").removesuffix(".qdq")
    path = qdq_model.with_name(f"{stem}.float.onnx")
    return path if path.is_file() else None


def align(order: Sequence[TensorInfo], names: QuantizedNames) -> list[TensorInfo]:
    """``order`` with the producing node taken from the QDQ model where the
    quantizer fused the float producer into another node (a Relu into its Conv),
    and a note on tensors the QDQ model lacks."""
    out: list[TensorInfo] = []
    for info in order:
        qnode = names.producers.get(info.tensor)
        if info.tensor in names.missing:
            fused = names.fused.get(info.tensor)
            note = "not in the quantized model" + (
                f" (the quantizer fused {fused[1]} {fused[0]!r} with the node after it)"
                if fused else "")
            out.append(replace(info, note=note))
        elif qnode is not None and qnode[0] and qnode[0] != info.node:
            out.append(replace(info, node=qnode[0], op_type=qnode[1],
                               note=f"{info.op_type} {info.node!r} fused into {qnode[1]} "
                                    f"{qnode[0]!r} by the quantizer"))
        else:
            out.append(info)
    return out


class Sweep:
    """The sweep's setup (models exposed, two CPU sessions) and one ``add(feeds)``
    per sample; ``report(bounds)`` at the end."""

    def __init__(self, float_model: Path, qdq_model: Path, work_dir: Path, *,
                 layout: str | None = None) -> None:
        fmodel = onnx.load(str(float_model))
        qmodel = onnx.load(str(qdq_model))
        order = float_tensors(fmodel)
        self.names = quantized_names(qmodel, order)
        self.order = align(order, self.names)
        work_dir.mkdir(parents=True, exist_ok=True)
        # Only what the QDQ model also has: exposing a tensor the quantizer fused
        # away would only keep onnxruntime from fusing it in the float model too.
        self.wanted = [i.tensor for i in self.order if i.tensor in self.names.names]
        f_path = save_exposed(fmodel, self.wanted, work_dir / "float.exposed.onnx")
        # The QDQ side exposes each tensor's quantized (integer) input of its
        # DequantizeLinear when the scale is constant, dequantized here: exposing the
        # float DequantizeLinear outputs would keep onnxruntime from fusing them.
        self.exposed: dict[str, list[str]] = {}
        for t, q in self.names.names.items():
            d = self.names.dequant.get(t)
            self.exposed.setdefault(d.source if d is not None else q, []).append(t)
        self.q_names = sorted(self.exposed)
        q_path = save_exposed(qmodel, self.q_names, work_dir / "qdq.exposed.onnx")
        del fmodel, qmodel
        self.f_sess, self.q_sess = cpu_session(f_path), cpu_session(q_path)
        self.acc = LayerAccumulator(self.order, layout=layout)

    def add(self, feeds: Feeds) -> None:
        ref = dict(zip(self.wanted, self.f_sess.run(self.wanted, feeds), strict=True))
        mapped: dict[str, np.ndarray] = {}
        for q, value in zip(self.q_names, self.q_sess.run(self.q_names, feeds), strict=True):
            for t in self.exposed[q]:
                d = self.names.dequant.get(t)
                mapped[t] = d.apply(value) if d is not None and d.source == q else value
        self.acc.add(ref, mapped)

    def report(self, bounds: Mapping[str, float]) -> LayerReport:
        return self.acc.report(bounds)


def sweep_qdq_cpu(float_model: Path, qdq_model: Path, samples: Sequence[Feeds],
                  bounds: Mapping[str, float], work_dir: Path, *, layout: str | None = None,
                  progress: Callable[[str], None] | None = None) -> SweepResult:
    """Per-layer metrics of the QDQ model on CPU against ``float_model`` (the
    model it was quantized from) over ``samples``, one at a time."""
    start = time.monotonic()
    sweep = Sweep(float_model, qdq_model, work_dir, layout=layout)
    run_start = time.monotonic()
    step = max(1, math.ceil(len(samples) / 10))          # at most ~10 progress lines
    for n, feeds in enumerate(samples):
        sweep.add(feeds)
        if progress is not None and len(samples) > 1 and ((n + 1) % step == 0
                                                           or n + 1 == len(samples)):
            progress(f"per-layer sweep: sample {n + 1}/{len(samples)}")
    run_s = time.monotonic() - run_start
    report = sweep.report(bounds)
    seconds = time.monotonic() - start
    log.info("per-layer sweep: %d tensors compared, %d not in the quantized model, %.2f s",
             report.compared, len(sweep.names.missing), seconds)
    return SweepResult(report, sweep.order, sweep.names, len(samples), seconds,
                       run_start - start, run_s)
