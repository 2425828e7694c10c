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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from qnn_ci.cores import share_of_cores
from qnn_ci.diagnose.intermediates import (
    Dequant,
    QuantizedNames,
    cpu_session,
    float_tensors,
    quantized_names,
    save_exposed,
)
from qnn_ci.diagnose.layers import LayerAccumulator, LayerReport, TensorInfo
from qnn_ci.records import dataclass

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


class BoundOutputs:
    """A session's named outputs, run into arrays reused from one sample to the next
    (onnxruntime's IO binding): the exposed tensors are written straight into them,
    without fresh output arrays per sample. The first run, and any run whose inputs
    differ in shape or type from the last, is a plain ``run`` that sizes the arrays.
    The arrays returned are overwritten by the next ``run``: use them before it."""

    def __init__(self, session: Any, names: Sequence[str]) -> None:
        self.session, self.names = session, list(names)
        self._binding: Any = None
        self._inputs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._arrays: list[np.ndarray] = []

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        inputs = {k: (v.shape, v.dtype) for k, v in feeds.items()}
        if self._binding is None or inputs != self._inputs:
            outs = self.session.run(self.names, feeds)
            self._bind(outs, inputs)
            return outs
        for name, value in feeds.items():
            self._binding.bind_cpu_input(name, value)
        self.session.run_with_iobinding(self._binding)
        return self._arrays

    def _bind(self, outs: list[np.ndarray], inputs: dict[str, Any]) -> None:
        self._binding, self._inputs = None, inputs
        arrays = [np.empty_like(o) for o in outs]
        if any(a.dtype.kind not in "biuf" or a.size == 0 for a in arrays):
            return                              # plain runs only
        binding = self.session.io_binding()
        for name, array in zip(self.names, arrays, strict=True):
            binding.bind_output(name, "cpu", 0, array.dtype, list(array.shape),
                                array.ctypes.data)
        self._binding, self._arrays = binding, arrays


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
        # per exposed QDQ tensor: the float tensors it gives, each with the
        # DequantizeLinear to apply (None: the value as it is)
        gives: dict[str, list[tuple[str, Dequant | None]]] = {}
        for t, q in self.names.names.items():
            d = self.names.dequant.get(t)
            gives.setdefault(d.source if d is not None else q, []).append((t, d))
        self.q_names = sorted(gives)
        self._gives = [gives[q] for q in self.q_names]
        q_path = save_exposed(qmodel, self.q_names, work_dir / "qdq.exposed.onnx")
        del fmodel, qmodel
        self.f_sess, self.q_sess = cpu_session(f_path), cpu_session(q_path)
        self.f_out = BoundOutputs(self.f_sess, self.wanted)
        self.q_out = BoundOutputs(self.q_sess, self.q_names)
        self.acc = LayerAccumulator(self.order, layout=layout)
        # The two models run side by side when this process has 2+ cores to itself:
        # a small model's run leaves most of onnxruntime's threads idle.
        self.side_by_side = share_of_cores() >= 2

    def add(self, feeds: Feeds) -> None:
        f_values, q_values = self._run_both(feeds)
        ref = dict(zip(self.wanted, f_values, strict=True))
        mapped: dict[str, np.ndarray] = {}
        for value, targets in zip(q_values, self._gives, strict=True):
            for t, d in targets:
                mapped[t] = d.apply(value) if d is not None else value
        self.acc.add(ref, mapped)

    def report(self, bounds: Mapping[str, float]) -> LayerReport:
        return self.acc.report(bounds)

    def _run_both(self, feeds: Feeds) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Both exposed models' values for one sample: the QDQ model's run in a
        thread of its own while this one runs the float model (onnxruntime releases
        the GIL while it runs)."""
        if not self.side_by_side:
            return self.f_out.run(feeds), self.q_out.run(feeds)
        with ThreadPoolExecutor(1, thread_name_prefix="qnn-ci-sweep-qdq") as pool:
            q_values = pool.submit(self.q_out.run, feeds)
            return self.f_out.run(feeds), q_values.result()


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
