"""The HTP-loss path: find the first tensor where the simulator departs from the
QDQ model on CPU, with a few simulated runs.

The QDQ model on CPU is the reference here (the loss is the HTP's, not
quantization's). Candidates are the float model's tensors the QDQ model holds,
in topological order. Each round exposes up to ``per_round`` candidates spread
over the interval still in doubt as extra graph outputs of the QDQ model,
prepares that copy on the simulator (``qnn_ci.sim.prepare``) and runs ONE
sample; the first exposed tensor whose effective cosine (see
``qnn_ci.diagnose.layers``) against the QDQ-on-CPU value is below the bound
narrows the interval to the candidates before it. A k-ary search: about
``log_k(N)`` rounds (2 for the PP-OCR classifier's 201 candidates with k = 15,
3 up to 3,375), each one prepare + one simulated inference: a round costs about
the same whatever the number of exposed tensors, so k is large.

Caveats, reported as notes: exposing a tensor makes it a graph output, which
can keep the HTP from fusing across it (a loss that lives in a fusion may then
move or vanish); a search assumes that once the simulator departs it stays
departed. If a copy with extra outputs does not prepare, the search stops and
says so.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from qnn_ci.diagnose.intermediates import (
    cpu_session,
    float_tensors,
    quantized_names,
    run_samples,
    save_exposed,
)
from qnn_ci.diagnose.layers import LayerAccumulator, crossing
from qnn_ci.diagnose.model import FirstDivergence, LayerMetrics
from qnn_ci.diagnose.sweep import align
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)

Feeds = dict[str, np.ndarray]
PER_ROUND = 15


@dataclass
class BisectResult:
    """The simulator bisection: the first divergence, the probed tensors and its cost."""

    first: FirstDivergence | None
    layers: list[LayerMetrics]                 # the probed tensors, topological order
    jumps: list[LayerMetrics]
    runs: int = 0                              # simulated runs (prepare + 1 inference)
    seconds: float = 0.0
    candidates: int = 0
    notes: list[str] = field(default_factory=list)


def _probe_points(lo: int, hi: int, k: int) -> list[int]:
    """Up to ``k`` indices spread over [lo, hi), always including hi - 1."""
    span = hi - lo
    if span <= k:
        return list(range(lo, hi))
    return sorted({lo + math.ceil((j + 1) * span / k) - 1 for j in range(k)})


class _Prober:
    """One simulated run with some QDQ-model tensors exposed."""

    def __init__(self, qmodel: onnx.ModelProto, soc: SocInfo, sample: Feeds,
                 work_dir: Path) -> None:
        self.qmodel, self.soc, self.sample, self.work_dir = qmodel, soc, sample, work_dir
        self.runs = 0

    def run(self, names: Sequence[str]) -> dict[str, np.ndarray] | str:
        """Values of ``names`` on the simulator, or why the run could not be made."""
        from qnn_ci.sim.prepare import prepare_for_htp
        from qnn_ci.sim.sessions import htp_session

        self.runs += 1
        folder = self.work_dir / f"round_{self.runs}"
        probe = save_exposed(self.qmodel, names, folder / "probe.qdq.onnx")
        prepared = prepare_for_htp(probe, folder, self.soc, stem="probe", diagnose=False)
        if not prepared.prepared or prepared.ctx_model is None:
            why = next((f.message for f in prepared.findings), prepared.error or "no context")
            return f"exposing {len(names)} tensor(s) made the prepare fail: {why.splitlines()[0]}"
        session = htp_session(prepared.ctx_model, self.soc, folder / "sim_run.log")
        wanted = [o.name for o in session.get_outputs() if o.name in set(names)]
        values = session.run(wanted, self.sample)
        del session
        return dict(zip(wanted, values, strict=True))


def bisect_htp(*, float_model: Path, qdq_model: Path, soc: SocInfo, sample: Feeds,
               bounds: Mapping[str, float], work_dir: Path, budget_s: float,
               per_round: int = PER_ROUND, layout: str | None = None,
               progress: Callable[[str], None] | None = None) -> BisectResult:
    """Find the first tensor where the simulator departs from the QDQ model on CPU
    (see the module docstring). ``float_model``: the model ``qdq_model`` was
    quantized from (names the tensors); ``sample``: one held-out sample."""
    start = time.monotonic()
    say = progress or (lambda line: None)
    qmodel = onnx.load(str(qdq_model))
    order = float_tensors(onnx.load(str(float_model)))
    names = quantized_names(qmodel, order)
    order = align(order, names)
    cands = [i for i in order if i.tensor in names.names]
    result = BisectResult(None, [], [], candidates=len(cands))
    if not cands:
        result.notes.append("bisection: no tensor of the float model is in the QDQ model")
        return result
    work_dir.mkdir(parents=True, exist_ok=True)
    # The QDQ model's value of every candidate on CPU (one sample, cheap).
    q_all = sorted({names.names[i.tensor] for i in cands})
    cpu_path = save_exposed(qmodel, q_all, work_dir / "qdq_cpu.exposed.onnx")
    cpu_values = next(run_samples(cpu_path, [sample], q_all, session=cpu_session(cpu_path)))
    prober = _Prober(qmodel, soc, sample, work_dir)
    acc = LayerAccumulator(order, layout=layout)
    probed: dict[str, LayerMetrics] = {}
    lo, best = 0, None          # the first departure lies in [lo, best]
    hi = len(cands)
    while lo < hi:
        if time.monotonic() - start > budget_s:
            result.notes.append(f"bisection stopped: budget ({budget_s:.0f} s) spent after "
                                f"{prober.runs} simulated run(s); the first departure lies "
                                f"between tensor {lo} and {hi - 1} of {len(cands)}")
            break
        points = _probe_points(lo, hi, per_round)
        tensors = [cands[p].tensor for p in points]
        say(f"bisection round {prober.runs + 1}: {len(points)} tensor(s) between "
            f"{cands[points[0]].tensor!r} and {cands[points[-1]].tensor!r} on the simulator")
        got = prober.run([names.names[t] for t in tensors])
        if isinstance(got, str):
            result.notes.append(f"bisection stopped: {got}")
            break
        ref = {t: cpu_values[names.names[t]] for t in tensors}
        test = {t: got[names.names[t]] for t in tensors if names.names[t] in got}
        acc.add(ref, test)
        rep = acc.report(bounds)
        by_name = {m.tensor: m for m in rep.layers}
        departed = None
        for p, t in zip(points, tensors, strict=True):
            probed[t] = by_name[t]
            if departed is None and t in test and crossing(by_name[t], bounds) is not None:
                departed = p
        if departed is None:
            lo = points[-1] + 1
        else:
            best = departed
            earlier = [p for p in points if p < departed]
            lo = (earlier[-1] + 1) if earlier else lo
            hi = departed
    result.runs = prober.runs
    final = acc.report(bounds)
    by_name = {m.tensor: m for m in final.layers}
    result.layers = [by_name[t] for t in sorted(probed, key=lambda t: by_name[t].index)]
    result.jumps = [m for m in final.jumps if m.tensor in probed]
    if best is not None:
        m = by_name[cands[best].tensor]
        metric, value, bound = crossing(m, bounds) or ("cosine", m.cosine, bounds["cosine"])
        result.first = FirstDivergence(m.tensor, m.node, m.op_type, m.index, metric, value,
                                       bound, m.cosine, m.worst_channel,
                                       m.worst_channel_cosine, m.snr_db, m.max_abs)
    elif not result.notes:
        result.notes.append("bisection: no probed tensor departs from the QDQ model on CPU "
                            "beyond the bound")
    result.seconds = time.monotonic() - start
    log.info("bisection: %d simulated run(s), %.1f s, first departure %s", result.runs,
             result.seconds, result.first.tensor if result.first else "none")
    return result

