"""sim_numerics' simulated samples in parallel processes vs one after another, in one run.

The model is quantized and prepared once (`check_htp`, random calibration: the
timing does not depend on the data). Then, as whole processes, each running
`simulate_and_compare` (fp32 CPU reference, the HTP simulator, the QDQ model on
CPU, the comparison) on the same `--samples` inputs:

    A  QNN_CI_SIM_PROCESSES=1   one session, samples one after another (the yardstick)
    B  (default)                up to one process per usable core
                                (os.sched_getaffinity): this one from the first
                                sample on, workers as soon as their own session is
                                loaded, each sample to whoever is free first

paired (A, B, A, B, ...), median and min of `--repeat`. The simulated outputs of both
sides are checked to be byte-identical first.

    python benchmarks/sim_parallel.py [--model rec|det|cls] [--samples 6] [--repeat 5]

Default (what `make bench` runs): the PP-OCRv4 recogniser (1x3x48x320, about 1,460
nodes, all on the HTP; ~5 s per simulated sample), 6 samples, 5 pairs (about 5
minutes). `--model det --samples 4` is the detector (~10 s per sample here; the
issue saw 40-90 s on its machine). Goal: B / A <= 0.60 on 2 cores (ideal 0.5 plus
a worker's start-up).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

from _harness import NOISE_NOTE, clean_env, goal_line, paired

MODELS = {
    "cls": ("models/ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    "det": ("models/ch_PP-OCRv4_det_infer.onnx", (1, 3, 480, 640)),
    "rec": ("models/ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
}


def _prepare(folder: Path, model: str) -> dict[str, str]:
    import importlib.util

    import onnx

    from qnn_ci.shapes.pin import drop_stale_shapes, infer, pin_inputs, real_inputs
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.quantize import QuantSettings
    from qnn_ci.sim.samples import inputs_of, random_samples

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    rel, shape = MODELS[model]
    m = onnx.load(str(Path(next(iter(spec.submodule_search_locations))) / rel))
    pin_inputs(m, {real_inputs(m)[0].name: shape})
    drop_stale_shapes(m)
    m, _ = infer(m)
    pinned = folder / f"{model}.static.onnx"
    onnx.save(m, str(pinned))
    metas = inputs_of(onnx.load(str(pinned), load_external_data=False))
    report = check_htp(pinned, folder / "npu", sim_target("QCS6490"), random_samples(metas, 2),
                       QuantSettings(), random_calibration=True)
    if not report.passed or report.prepare is None or report.prepare.ctx_model is None:
        sys.exit(f"prepare failed: {report.summary_line()}")
    return {"float": str(pinned), "qdq": str(report.quantize.model),
            "ctx": str(report.prepare.ctx_model)}


def _worker(paths: dict[str, str], samples: int, out: Path) -> None:
    import onnx

    from qnn_ci.engine.bounds import Thresholds
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.numerics import simulate_and_compare
    from qnn_ci.sim.samples import inputs_of, random_samples

    metas = inputs_of(onnx.load(paths["float"], load_external_data=False))
    shutil.rmtree(out, ignore_errors=True)
    res = simulate_and_compare(Path(paths["float"]), Path(paths["qdq"]), Path(paths["ctx"]),
                               sim_target("QCS6490"), random_samples(metas, samples, seed=3),
                               Thresholds(), out)
    h = hashlib.sha256()
    for p in sorted(res.sim_dir.rglob("*.npy")):
        h.update(p.relative_to(res.sim_dir).as_posix().encode() + p.read_bytes())
    print(h.hexdigest())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="rec", choices=sorted(MODELS))
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(json.loads(args.worker), args.samples, Path(args.out))
        return 0
    from qnn_ci.sim.availability import sim_unavailable
    from qnn_ci.sim.parallel import sim_processes
    from qnn_ci.util.cores import usable_cores

    if sim_unavailable():
        sys.exit(sim_unavailable())
    tmp = Path(tempfile.mkdtemp(prefix="qnn-ci-sim-parallel-"))
    try:
        paths = _prepare(tmp, args.model)

        def cmd(out: str) -> list[str]:
            return [sys.executable, __file__, "--worker", json.dumps(paths), "--samples",
                    str(args.samples), "--out", str(tmp / out)]

        import subprocess

        env_a, env_b = clean_env(QNN_CI_SIM_PROCESSES="1"), clean_env()
        digests = [subprocess.run(cmd(o), env=e, capture_output=True, text=True, check=True)
                   .stdout.strip().splitlines()[-1] for o, e in (("a", env_a), ("b", env_b))]
        same = digests[0] == digests[1]
        res = paired(cmd("a"), cmd("b"), repeat=args.repeat, warmup=0, env=env_a, env_b=env_b)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = sim_processes(args.samples, {})
    print(f"{args.model}, {args.samples} samples, QCS6490 simulator, {usable_cores()} usable "
          f"core(s) -> {n} process(es); whole processes, {args.repeat} pairs {NOISE_NOTE}")
    print("yardstick: the same run with QNN_CI_SIM_PROCESSES=1 (one session, serial)")
    print(res.describe("serial (1 process)", f"parallel ({n} processes)"))
    print(goal_line("simulated outputs, parallel vs serial",
                    "identical" if same else "DIFFERENT", "identical", same))  # type: ignore[arg-type]
    print(goal_line("sim_numerics parallel / serial", res.ratio, "<= 0.60x",
                    res.ratio <= 0.60, unit="x"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
