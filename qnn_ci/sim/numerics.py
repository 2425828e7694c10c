"""Run the prepared graph on the HTP simulator and compare it with fp32
onnxruntime CPU, through ``qnn_ci.compare`` (the board comparison's metrics,
thresholds and messages).

Outputs are written as ``<dir>/Result_<N>/<output name>.npy`` (the
qnn-net-run layout), so a run can be compared again with ``qnn-ci compare``.
The quantized (QDQ) model is also run on the CPU: a loss seen there too comes
from quantization, not from the HTP. Each output's quantization step (the scale
of the QDQ model's last DequantizeLinear) goes to the comparison, which then
calls a reference within 4 steps of zero "near zero" instead of failing it on
noise (``qnn_ci.compare.resolution``).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qnn_ci.compare import accuracy_rule, compare_sets, load_output_set, sanitize
from qnn_ci.engine.bounds import Thresholds
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.sim.samples import Feeds
from qnn_ci.sim.sessions import Outputs, cpu_session, run_all
from qnn_ci.tables import SocInfo

log = logging.getLogger(__name__)



@dataclass
class NumericsResult:
    """The simulator run against fp32 CPU (and the QDQ model on CPU): comparisons, timings."""

    samples: int
    comparison: Any                       # qnn_ci.compare Comparison (sim vs fp32 CPU)
    qdq_cpu: Any | None                   # Comparison of the QDQ model on CPU vs fp32 CPU
    reference_dir: Path
    sim_dir: Path
    qdq_cpu_dir: Path | None
    sim_s_per_inference: float
    cpu_s_per_inference: float
    findings: list[Finding] = field(default_factory=list)
    quant_steps: dict[str, float] = field(default_factory=dict)   # output key -> step

    @property
    def passed(self) -> bool:
        return bool(self.comparison.passed)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "passed": self.passed,
                "comparison": self.comparison.to_dict(),
                "qdq_on_cpu": self.qdq_cpu.to_dict() if self.qdq_cpu is not None else None,
                "reference_dir": str(self.reference_dir), "sim_dir": str(self.sim_dir),
                "quant_steps": self.quant_steps,
                "sim_s_per_inference": round(self.sim_s_per_inference, 4),
                "cpu_s_per_inference": round(self.cpu_s_per_inference, 4)}


def file_key(name: str) -> str:
    """The output's file key: its own name (a ``/`` makes sub-folders, as
    qnn-net-run does), or the converter's sanitized form when the name would not
    survive as a relative path."""
    parts = [p for p in name.split("/") if p not in ("", ".", "..")]
    key = "/".join(parts)
    return key if key == name else sanitize(name)


def write_outputs(folder: Path, outputs: Sequence[Outputs]) -> Path:
    """``folder/Result_<N>/<output key>.npy``, N from 0."""
    for n, outs in enumerate(outputs):
        for name, value in outs.items():
            path = folder / f"Result_{n}" / f"{file_key(name)}.npy"
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, np.asarray(value))
    return folder


def output_steps(qdq_model: Path) -> dict[str, float]:
    """Graph output name -> its quantization step: the scale of the
    DequantizeLinear that produces it (the largest, for a per-channel scale).
    Outputs not produced by a DequantizeLinear with a constant scale are left out."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(qdq_model), load_external_data=False)
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    steps: dict[str, float] = {}
    for out in model.graph.output:
        node = producer.get(out.name)
        if node is None or node.op_type != "DequantizeLinear" or len(node.input) < 2:
            continue
        scale = inits.get(node.input[1])
        if scale is None:
            continue
        value = float(np.max(np.abs(numpy_helper.to_array(scale))))
        if np.isfinite(value) and value > 0:
            steps[out.name] = value
    return steps


def _compare(reference: Path, test: Path, thresholds: Thresholds,
             expected: dict[str, tuple[str, tuple[int, ...]]],
             steps: dict[str, float]) -> Any:
    return compare_sets(load_output_set(reference), load_output_set(test), thresholds,
                        expected=expected, quant_steps=steps)


def _oracle(ref_dir: Path, qdq_dir: Path, sim_dir: Path) -> list[Finding]:
    """onnxruntime's QNN EP oracle with the QDQ model on CPU as the CPU side; advisory
    here (warnings), the thresholds decide."""
    out: list[Finding] = []
    for f in accuracy_rule(load_output_set(ref_dir), load_output_set(qdq_dir),
                           load_output_set(sim_dir)):
        sev = Severity.WARNING if f.severity == Severity.ERROR else f.severity
        out.append(Finding(f.check, "onnxruntime's QNN EP oracle (CPU side = the QDQ model on "
                           f"onnxruntime CPU): {f.message}", sev, f.subject))
    return out


def simulate_and_compare(float_model: Path, qdq_model: Path | None, ctx_model: Path,
                         soc: SocInfo, samples: Sequence[Feeds], thresholds: Thresholds,
                         out_dir: Path, *, processes: int | None = None) -> NumericsResult:
    """Run ``samples`` through fp32 CPU, the simulator (and the QDQ model on CPU)
    and compare. The simulator may use up to ``processes`` processes (default: as
    many as the cores allow; see ``qnn_ci.sim.parallel``)."""
    from qnn_ci.sim.parallel import SimPool, sim_processes

    for sub in ("reference", "sim", "qdq_cpu"):
        shutil.rmtree(out_dir / sub, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "sim_run.log"
    if qdq_model is not None and not qdq_model.is_file():
        qdq_model = None
    n = sim_processes(len(samples)) if processes is None else max(1, processes)
    # The simulator's worker processes start first: they load their sessions while
    # this process runs the samples on CPU, and take samples as soon as they are ready.
    with SimPool(ctx_model, soc, samples, log_path, n) as pool:
        ref, cpu_s = run_all(cpu_session(float_model), samples)
        qdq = run_all(cpu_session(qdq_model), samples)[0] if qdq_model is not None else None
        sim, sim_s = pool.run()
    expected = {file_key(k): (str(v.dtype), tuple(v.shape)) for k, v in ref[0].items()}
    ref_dir = write_outputs(out_dir / "reference", ref)
    sim_dir = write_outputs(out_dir / "sim", sim)
    steps = {file_key(k): v for k, v in output_steps(qdq_model).items()} if qdq_model else {}
    comparison = _compare(ref_dir, sim_dir, thresholds, expected, steps)
    qdq_cmp, qdq_dir = None, None
    if qdq is not None:
        qdq_dir = write_outputs(out_dir / "qdq_cpu", qdq)
        qdq_cmp = _compare(ref_dir, qdq_dir, thresholds, expected, steps)
    findings = list(comparison.findings)
    if qdq_cmp is not None and qdq_dir is not None:
        findings.append(Finding("sim.qdq_on_cpu", "the same quantized (QDQ) model on "
                                f"onnxruntime CPU: {qdq_cmp.summary_line()}; on the simulator: "
                                f"{comparison.summary_line()} (a loss seen on both comes from "
                                "quantization; one seen only on the simulator, from the HTP)",
                                Severity.INFO))
        findings += _oracle(ref_dir, qdq_dir, sim_dir)
    return NumericsResult(len(samples), comparison, qdq_cmp, ref_dir, sim_dir, qdq_dir,
                          sim_s, cpu_s, findings, steps)
