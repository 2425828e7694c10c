"""What the HTP simulator costs, next to onnxruntime CPU, in one run.

Per model: the `sim_npu` work (quantize + prepare for the SoC) and one
simulated inference, each next to one fp32 onnxruntime CPU inference of the
same model measured in the same run, printed as ratios; plus what a
`sim_numerics` run of N samples will roughly take, to size `sim.samples`.

    python benchmarks/sim_cost.py [--models cls] [--soc QCS6490]
                                  [--calibration-samples 4] [--repeats 5]

Inferences are timed paired in this process (CPU, simulator, CPU, simulator, ...)
after one warm-up pair, median and min of ``--repeats``; the yardstick is the fp32
onnxruntime CPU inference of the same model on the same input. The default is
the classifier only, so ``make bench`` stays short (a detector inference on the
simulator takes 40-90 s: ``--models cls det`` for it). No goal: this sizes
``sim.samples``; it prints its ratios and the estimate.

Models come from the rapidocr wheel (pinned here: cls 1x3x48x192, det
1x3x480x640, rec 1x3x48x320). Calibration and inputs are random: timings do
not depend on the data (the prepare answer and the numbers do; this script
reports neither). Needs onnxruntime-qnn.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import onnx
from _harness import NOISE_NOTE, Paired, paired

from qnn_ci.sim.availability import sim_unavailable, versions
from qnn_ci.sim.check import check_htp
from qnn_ci.sim.ep import qnn_devices, sim_target
from qnn_ci.sim.quantize import QuantSettings
from qnn_ci.sim.samples import inputs_of, random_samples
from qnn_ci.sim.sessions import cpu_session, htp_session

MODELS = {
    "cls": ("models/ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    "det": ("models/ch_PP-OCRv4_det_infer.onnx", (1, 3, 480, 640)),
    "rec": ("models/ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
}


def model_file(rel: str) -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    return Path(next(iter(spec.submodule_search_locations))) / rel


def pin(src: Path, shape: tuple[int, ...], dst: Path) -> Path:
    from qnn_ci.shapes.pin import drop_stale_shapes, infer, pin_inputs, real_inputs

    model = onnx.load(str(src))
    pin_inputs(model, {real_inputs(model)[0].name: shape})
    drop_stale_shapes(model)
    model, _ = infer(model)
    onnx.save(model, str(dst))
    return dst


def timed_pair(cpu, sim, feeds: dict, repeats: int) -> Paired:
    """One CPU and one simulated inference, paired, ``repeats`` times after a warm-up."""
    return paired(lambda: cpu.run(None, feeds), lambda: sim.run(None, feeds), repeat=repeats)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["cls"], choices=sorted(MODELS))
    ap.add_argument("--soc", default="QCS6490")
    ap.add_argument("--calibration-samples", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    reason = sim_unavailable()
    if reason:
        sys.exit(reason)
    soc = sim_target(args.soc)
    v = versions()
    print(f"onnxruntime {v['onnxruntime']}, onnxruntime-qnn {v['onnxruntime-qnn']}, "
          f"{os.cpu_count()} CPU(s), SoC {soc.name} (simulator id {soc.sim_soc_id}), "
          f"{args.calibration_samples} calibration sample(s), median of {args.repeats} "
          f"paired runs {NOISE_NOTE}")
    print("yardstick: one fp32 onnxruntime CPU inference of the same model and input")
    start = time.perf_counter()
    qnn_devices()
    print(f"EP registration (once per process): {time.perf_counter() - start:.2f} s\n")
    header = (f"{'model':5} {'quantize':>9} {'prepare':>8} {'sim_npu':>8} {'load ctx':>9} "
              f"{'sim inf':>8} {'cpu inf':>8} {'sim/cpu':>8} {'sim_npu/cpu':>12} {'on HTP':>9}")
    print(header)
    rows = []
    with tempfile.TemporaryDirectory(prefix="qnn-ci-simcost-") as tmp:
        for name in args.models:
            rel, shape = MODELS[name]
            work = Path(tmp) / name
            work.mkdir()
            pinned = pin(model_file(rel), shape, work / f"{name}.static.onnx")
            metas = inputs_of(onnx.load(str(pinned), load_external_data=False))
            cal = random_samples(metas, args.calibration_samples)
            feeds = random_samples(metas, 1, seed=7)[0]
            start = time.perf_counter()
            report = check_htp(pinned, work, soc, cal, QuantSettings(), random_calibration=True)
            npu_s = time.perf_counter() - start
            cpu = cpu_session(pinned)
            p = report.prepare
            if not report.passed or p is None or p.ctx_model is None:
                print(f"{name:5} sim_npu {npu_s:.1f} s: {report.summary_line()}")
                continue
            start = time.perf_counter()
            sim = htp_session(p.ctx_model, soc, work / "bench_run.log")
            load_s = time.perf_counter() - start
            pair = timed_pair(cpu, sim, feeds, args.repeats)
            cpu_s, sim_s = pair.a.median, pair.b.median
            qdq = cpu_session(report.quantize.model)
            qdq_s = timed_pair(cpu, qdq, feeds, args.repeats).b.median
            d = report.durations
            print(f"{name:5} {d['quantize_s']:8.2f}s {d['prepare_s']:7.2f}s {npu_s:7.2f}s "
                  f"{load_s:8.3f}s {sim_s:7.3f}s {cpu_s:7.4f}s {sim_s / cpu_s:7.0f}x "
                  f"{npu_s / cpu_s:11.0f}x {p.nodes_on_htp:>4}/{p.nodes_total:<4}")
            print(f"      sim/cpu per inference: median {pair.ratio:.0f}x, min "
                  f"{pair.ratio_min:.0f}x (cpu {pair.a.describe()}; sim {pair.b.describe()})")
            rows.append((name, load_s, sim_s, cpu_s, qdq_s))
    if rows:
        print("\nsim_numerics cost for N samples ~ load ctx + N x (sim inf + cpu inf + "
              "QDQ-on-cpu inf):")
        for name, load_s, sim_s, cpu_s, qdq_s in rows:
            per = sim_s + cpu_s + qdq_s
            est = ", ".join(f"N={n}: {load_s + n * per:.1f} s" for n in (2, 10, 50))
            print(f"  {name}: {per:.2f} s per sample; {est}")
        print("(no goal: informational, to size sim.samples; sim_numerics runs samples in "
              "parallel processes, see benchmarks/sim_parallel.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
