"""The per-layer sweep on the QDQ CPU path: every float intermediate of the fp32
model against the QDQ model's value of the same tensor, both on onnxruntime
CPU, over the held-out samples one at a time (only the metrics are kept).

The cheap path for a quantization loss: two CPU sessions with the intermediates
exposed, no simulator. Memory stays bounded: the tensors (in topological order)
are split into batches whose exposed bytes per sample (both sides: the float
tensor and the QDQ model's integer tensor, from static shapes) stay under a
budget -- a quarter of the memory available (``qnn_ci.util.memory``, cgroup limits
included), at most ``BATCH_CAP``. Each batch is one pair of exposed models (only
the nodes its tensors need) and sessions, run over every sample, its metrics
folded into the one ``LayerAccumulator``; one batch's sessions are alive at a
time. A tensor larger than the budget is a batch of its own. When everything
fits in one batch (small models) the sweep is one session pair, as before; when
not, one line says so with the numbers (``progress`` and the log).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from qnn_ci.diagnose.intermediates import (
    Dequant,
    QuantizedNames,
    cpu_session,
    float_tensors,
    quantized_names,
    save_exposed,
)
from qnn_ci.diagnose.layers import LayerAccumulator, LayerReport, TensorInfo
from qnn_ci.model.sizes import tensor_bytes, tensor_specs
from qnn_ci.util.cores import share_of_cores
from qnn_ci.util.memory import MiB, available_bytes, human

log = logging.getLogger(__name__)

Feeds = dict[str, np.ndarray]
Gives = list[tuple[str, Dequant | None]]   # the float tensors one exposed QDQ tensor gives

BATCH_CAP = 512 * MiB            # exposed bytes per sample and batch, at most
BATCH_FRACTION = 4               # ... and at most this fraction of the memory available
FOLD_ELEMENTS = 16 * 1024 * 1024  # dequantized elements folded per call (bounded copies)


def _available_text(avail: int | None) -> str:
    return "memory available unknown" if avail is None else f"{human(avail)} available"


@dataclass
class SweepResult:
    """The QDQ CPU per-layer sweep: its layer report, the tensors swept and the time taken."""

    report: LayerReport
    order: list[TensorInfo]
    names: QuantizedNames
    samples: int
    seconds: float                  # all of it
    setup_s: float = 0.0            # loading, exposing, building the sessions (every batch)
    run_s: float = 0.0              # the samples: both inferences and the metrics
    batches: int = 1                # session pairs, one after the other
    need_bytes: int = 0             # exposed bytes per sample, all tensors
    budget_bytes: int = 0           # exposed bytes per sample and batch, at most


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


def batch_budget(available: int | None) -> int:
    """The exposed bytes per sample one batch may hold: ``1/BATCH_FRACTION`` of
    ``available``, at most ``BATCH_CAP`` (that when ``available`` is unknown)."""
    if available is None:
        return BATCH_CAP
    return max(1, min(BATCH_CAP, available // BATCH_FRACTION))


@dataclass
class Batch:
    """One session pair's worth of tensors: the float tensors exposed, the QDQ
    model's tensors exposed and what each gives, and their bytes per sample."""

    tensors: list[str]
    q_names: list[str]
    gives: list[Gives]
    nbytes: int = 0


def plan_batches(groups: Sequence[tuple[str, Gives, int]], budget: int) -> list[Batch]:
    """``groups`` (an exposed QDQ tensor, the float tensors it gives, their bytes
    together), in topological order, cut greedily into batches of at most
    ``budget`` bytes; a group larger than the budget is a batch of its own."""
    batches: list[Batch] = []
    for q, gives, nbytes in groups:
        if not batches or (batches[-1].nbytes + nbytes > budget and batches[-1].q_names):
            batches.append(Batch([], [], []))
        b = batches[-1]
        b.q_names.append(q)
        b.gives.append(gives)
        b.tensors += [t for t, _ in gives]
        b.nbytes += nbytes
    return batches


def _groups(order: Sequence[TensorInfo], names: QuantizedNames,
            f_specs: Mapping[str, Any], q_specs: Mapping[str, Any]
            ) -> list[tuple[str, Gives, int]]:
    """Per exposed QDQ tensor (in the order of the first float tensor it gives): the
    float tensors it gives, each with the DequantizeLinear to apply (None: the value
    as it is), and the bytes per sample of all of them on both sides. An integer
    tensor shape inference does not know (com.microsoft Q/DQ) has its float
    tensor's shape and its zero point's type; a tensor whose size is still not
    known counts as the largest known one."""
    gives: dict[str, Gives] = {}
    for info in order:
        t = info.tensor
        if t not in names.names:
            continue
        d = names.dequant.get(t)
        gives.setdefault(d.source if d is not None else names.names[t], []).append((t, d))
    sizes: list[tuple[str, Gives, list[int | None]]] = []
    for q, targets in gives.items():
        f_parts = [tensor_bytes(f_specs.get(t)) for t, _ in targets]
        q_part = tensor_bytes(q_specs.get(q))
        t0, d0 = targets[0]
        if q_part is None and f_parts[0] is not None:
            f_type = f_specs[t0][0]
            f_size = tensor_bytes((f_type, (1,))) or 4
            q_size = (d0.zero_point.dtype.itemsize if d0 is not None
                      and d0.zero_point is not None else 2 if d0 is not None else f_size)
            q_part = f_parts[0] // f_size * q_size
        sizes.append((q, targets, [q_part, *f_parts]))
    largest = max((p for _, _, parts in sizes for p in parts if p is not None), default=0)
    unknown = sum(p is None for _, _, parts in sizes for p in parts)
    if unknown:
        log.debug("per-layer sweep: %d tensor(s) of unknown size, counted as %s each",
                  unknown, human(largest))
    return [(q, targets, sum(largest if p is None else p for p in parts))
            for q, targets, parts in sizes]


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
        # onnxruntime's own output arrays are written into from now on (no second
        # copy of every exposed tensor); fresh ones where they cannot be
        arrays = [o if o.flags.c_contiguous and o.flags.writeable else np.empty_like(o)
                  for o in outs]
        if any(a.dtype.kind not in "biuf" or a.size == 0 for a in arrays):
            return                              # plain runs only
        binding = self.session.io_binding()
        for name, array in zip(self.names, arrays, strict=True):
            binding.bind_output(name, "cpu", 0, array.dtype, list(array.shape),
                                array.ctypes.data)
        self._binding, self._arrays = binding, arrays


class Sweep:
    """The sweep's setup (models loaded, tensors matched, batches planned; the first
    batch's session pair built) and ``run(samples)``; ``report(bounds)`` at the end.

    ``add(feeds)`` folds one sample through the open batch: with one batch (the
    tensors fit the budget) that is the whole sweep of that sample, as the
    benchmark times it. ``budget``: exposed bytes per sample and batch (default
    ``batch_budget`` of the memory available)."""

    def __init__(self, float_model: Path, qdq_model: Path, work_dir: Path, *,
                 layout: str | None = None, budget: int | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        start = time.monotonic()
        self._fmodel = onnx.load(str(float_model))
        self._qmodel = onnx.load(str(qdq_model))
        f_specs, q_specs = tensor_specs(self._fmodel), tensor_specs(self._qmodel)
        self._f_types = {k: v[0] for k, v in f_specs.items()}
        self._q_types = {k: v[0] for k, v in q_specs.items()}
        order = float_tensors(self._fmodel)
        self.names = quantized_names(self._qmodel, order)
        self.order = align(order, self.names)
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        # Only what the QDQ model also has: exposing a tensor the quantizer fused
        # away would only keep onnxruntime from fusing it in the float model too.
        # The QDQ side exposes each tensor's quantized (integer) input of its
        # DequantizeLinear when the scale is constant, dequantized here: exposing the
        # float DequantizeLinear outputs would keep onnxruntime from fusing them.
        groups = _groups(self.order, self.names, f_specs, q_specs)
        self.wanted = [t for _, gives, _ in groups for t, _ in gives]
        self.need_bytes = sum(n for _, _, n in groups)
        avail = available_bytes()
        self.budget = budget if budget is not None else batch_budget(avail)
        self.batches = plan_batches(groups, self.budget) or [Batch([], [], [])]
        if len(self.batches) > 1:
            line = (f"per-layer sweep: the {len(self.wanted):,} tensors need "
                    f"{human(self.need_bytes)} per sample, more than one batch may hold "
                    f"({human(self.budget)}, from {_available_text(avail)}): "
                    f"{len(self.batches)} batches of <= "
                    f"{human(max(b.nbytes for b in self.batches))}, each run over every "
                    "sample")
            log.info("%s", line)
            if progress is not None:
                progress(line)
        self.acc = LayerAccumulator(self.order, layout=layout)
        # The two models run side by side when this process has 2+ cores to itself:
        # a small model's run leaves most of onnxruntime's threads idle.
        self.side_by_side = share_of_cores() >= 2
        self._open_index: int | None = None
        self.f_sess: Any = None
        self.q_sess: Any = None
        self.setup_s = 0.0
        self._open(0)
        self.setup_s = time.monotonic() - start

    def _open(self, index: int) -> None:
        """Batch ``index``'s exposed models and session pair (the last one's closed first)."""
        if self._open_index == index:
            return
        start = time.monotonic()
        self.close()
        batch = self.batches[index]
        self._open_index = index
        if not batch.tensors:                   # nothing to expose: no sessions
            return
        single = len(self.batches) == 1
        suffix = "" if single else f".{index}"
        f_path = save_exposed(self._fmodel, batch.tensors,
                              self.work_dir / f"float.exposed{suffix}.onnx",
                              types=self._f_types, only=not single)
        q_path = save_exposed(self._qmodel, batch.q_names,
                              self.work_dir / f"qdq.exposed{suffix}.onnx",
                              types=self._q_types, only=not single)
        self.f_sess, self.q_sess = cpu_session(f_path), cpu_session(q_path)
        self.f_out = BoundOutputs(self.f_sess, batch.tensors)
        self.q_out = BoundOutputs(self.q_sess, batch.q_names)
        if not single:
            f_path.unlink(missing_ok=True)      # the sessions have read them
            q_path.unlink(missing_ok=True)
        self.setup_s += time.monotonic() - start

    def close(self) -> None:
        """Drop the open batch's sessions and arrays."""
        self.f_out = self.q_out = None  # type: ignore[assignment]
        self.f_sess = self.q_sess = None
        self._open_index = None

    def add(self, feeds: Feeds) -> None:
        """Fold one sample through the open batch (the first when none was run)."""
        if self._open_index is None:
            self._open(0)
        index = self._open_index
        assert index is not None
        self._fold(feeds, self.batches[index], count=index == 0)

    def run(self, samples: Sequence[Feeds],
            progress: Callable[[str], None] | None = None) -> None:
        """Every batch over every sample, one batch's sessions at a time."""
        total = len(self.batches) * len(samples)
        step = max(1, math.ceil(total / 10))          # at most ~10 progress lines
        done = 0
        for index in range(len(self.batches)):
            self._open(index)
            for feeds in samples:
                self.add(feeds)
                done += 1
                if progress is not None and total > 1 and (done % step == 0 or done == total):
                    where = (f"batch {index + 1}/{len(self.batches)}, "
                             if len(self.batches) > 1 else "")
                    progress(f"per-layer sweep: {where}sample "
                             f"{done - index * len(samples)}/{len(samples)}")
        if len(self.batches) > 1:
            self.close()

    def report(self, bounds: Mapping[str, float]) -> LayerReport:
        return self.acc.report(bounds)

    def _fold(self, feeds: Feeds, batch: Batch, *, count: bool) -> None:
        """Both exposed models on one sample; the metrics of the batch's tensors
        folded in, dequantized a bounded number of elements at a time."""
        if not batch.tensors:
            self.acc.add_tensors({}, {}, sample=count)
            return
        f_values, q_values = self._run_both(feeds)
        ref = dict(zip(batch.tensors, f_values, strict=True))
        part_ref: dict[str, np.ndarray] = {}
        part_test: dict[str, np.ndarray] = {}
        size = 0
        for value, targets in zip(q_values, batch.gives, strict=True):
            for t, d in targets:
                part_test[t] = d.apply(value) if d is not None else value
                part_ref[t] = ref[t]
                size += value.size
            if size >= FOLD_ELEMENTS:
                self.acc.add_tensors(part_ref, part_test, sample=count)
                part_ref, part_test, size, count = {}, {}, 0, False
        if part_ref or count:
            self.acc.add_tensors(part_ref, part_test, sample=count)

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
                  progress: Callable[[str], None] | None = None,
                  budget: int | None = None) -> SweepResult:
    """Per-layer metrics of the QDQ model on CPU against ``float_model`` (the
    model it was quantized from) over ``samples``, one at a time, in batches of
    tensors of at most ``budget`` exposed bytes per sample (see the module text)."""
    start = time.monotonic()
    sweep = Sweep(float_model, qdq_model, work_dir, layout=layout, budget=budget,
                  progress=progress)
    sweep.run(samples, progress)
    report = sweep.report(bounds)
    seconds = time.monotonic() - start
    setup_s = sweep.setup_s
    log.info("per-layer sweep: %d tensors compared, %d not in the quantized model, "
             "%d batch(es), %.2f s", report.compared, len(sweep.names.missing),
             len(sweep.batches), seconds)
    return SweepResult(report, sweep.order, sweep.names, len(samples), seconds, setup_s,
                       max(0.0, seconds - setup_s), len(sweep.batches), sweep.need_bytes,
                       sweep.budget)
