"""What the diagnosis costs on a real model (the PP-OCR classifier, 1x3x48x192).

Goal (issue 11): the per-layer sweep on the QDQ CPU path costs <= 3x one fp32 +
one QDQ inference per sample. Per sample, paired in this process:

- A: one fp32 and one QDQ inference on onnxruntime CPU (plain models);
- B: the sweep's work for one sample: the fp32 and the QDQ model with every
  float intermediate exposed, run on CPU, and the per-tensor metrics folded in
  (``qnn_ci.diagnose.layers.LayerAccumulator``).

B is ``qnn_ci.diagnose.sweep.Sweep.add``, the product code. The sweep's one-off
setup (exposing the tensors, building the two sessions) is printed next to it,
with the cost for N samples. Then the recipe advisor's wall
time per recipe (``qnn_ci.diagnose.advisor``, QDQ on CPU, no simulator).

Then (issue 25, bounded memory) the peak RSS of the whole process tree (every
child's RSS summed, sampled from /proc every ~50 ms) of ``qnn-ci sim MODEL --soc
QCS6490 --calibration LIST --test-inputs LIST`` against the same with ``--diagnose
--budget 300``, on PP-OCRv4 det (rapidocr's ``ch_PP-OCRv4_det_infer.onnx``)
pinned at 1x3x640x640 with rendered text pages (goal <= 1.5x), and the wall time
per phase from the CLI's --json (``durations``, ``diagnosis.cost``).

    python benchmarks/diagnose.py [--repeats 15] [--samples 4] [--no-advisor] [--no-rss]

Needs onnxruntime-qnn only for the SoC table entry the advisor is given (the
sweep and the advisor run on onnxruntime CPU); calibration is rendered text
(examples/ocr/ocr_samples.py) when Pillow is there, else random.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
from _harness import NOISE_NOTE, goal_line, paired

from qnn_ci.diagnose.intermediates import cpu_session
from qnn_ci.diagnose.sweep import Sweep, float_model_of
from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
from qnn_ci.sim.samples import inputs_of, random_samples

GOAL = 3.0
RSS_GOAL = 1.5
ROOT = Path(__file__).resolve().parents[1]


def model_file() -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("rapidocr-onnxruntime is not installed: make setup")
    return (Path(next(iter(spec.submodule_search_locations)))
            / "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")


def pin(src: Path, dst: Path) -> Path:
    from qnn_ci.shapes.pin import drop_stale_shapes, infer, pin_inputs, real_inputs

    model = onnx.load(str(src))
    pin_inputs(model, {real_inputs(model)[0].name: (1, 3, 48, 192)})
    drop_stale_shapes(model)
    model, _ = infer(model)
    onnx.save(model, str(dst))
    return dst


def samples(pinned: Path, count: int) -> tuple[list[dict], str]:
    try:
        spec = importlib.util.spec_from_file_location("ocr_samples",
                                                      ROOT / "examples/ocr/ocr_samples.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return list(module.text_lines(count)), "rendered text lines"
    except ImportError:
        metas = inputs_of(onnx.load(str(pinned), load_external_data=False))
        return random_samples(metas, count), "random data (no Pillow)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)   # cheap: more pairs, steadier medians
    ap.add_argument("--samples", type=int, default=4, help="calibration samples")
    ap.add_argument("--no-advisor", action="store_true")
    ap.add_argument("--no-rss", action="store_true", help="skip the detector's peak RSS")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qnn-ci-diagnose-") as tmp:
        work = Path(tmp)
        pinned = pin(model_file(), work / "cls.static.onnx")
        data, source = samples(pinned, args.samples + 1)
        cal, feeds = data[:args.samples], data[args.samples]
        print(f"PP-OCR classifier 1x3x48x192, {os.cpu_count()} CPU(s), {args.samples} "
              f"calibration sample(s) ({source}), median of {args.repeats} paired runs "
              f"{NOISE_NOTE}")
        q = quantize_for_htp(pinned, work / "cls.qdq.onnx", cal, QuantSettings()).model
        folded = float_model_of(q)
        assert folded is not None
        start = time.perf_counter()
        sweep = Sweep(folded, q, work / "sweep")
        setup_s = time.perf_counter() - start
        order, names = sweep.order, sweep.names
        f_plain, q_plain = cpu_session(folded), cpu_session(q)

        def plain() -> None:
            f_plain.run(None, feeds)
            q_plain.run(None, feeds)

        def sweep_one() -> None:
            sweep.add(feeds)

        pair = paired(plain, sweep_one, repeat=args.repeats)
        print(f"tensors: {len(order)} float intermediates, {len(names.names)} in the QDQ "
              f"model ({len(names.missing)} fused away by the quantizer)")
        print(pair.describe("one fp32 + one QDQ inference (plain)",
                            "per-layer sweep, one sample (exposed + metrics)"))
        print(f"  sweep setup, once: {setup_s:.2f} s (expose + 2 sessions); for N samples "
              "the sweep costs setup + N x B: " + ", ".join(
                  f"N={n}: {setup_s + n * pair.b.median:.2f} s" for n in (1, 10, 100)))
        print(goal_line("per-layer sweep per sample / (fp32 + QDQ inference)", pair.ratio,
                        f"<= {GOAL:.0f}x", pair.ratio <= GOAL, unit="x"))
        if not args.no_advisor:
            advisor(pinned, cal, [feeds], work)
    if not args.no_rss:
        from _rss import detector_rss

        detector_rss(RSS_GOAL)
    return 0


def advisor(pinned: Path, cal: list[dict], held: list[dict], work: Path) -> None:
    from qnn_ci.diagnose.advisor import advise
    from qnn_ci.engine.bounds import Thresholds
    from qnn_ci.tables import get_soc

    start = time.perf_counter()
    recipes = advise(float_model=pinned, calibration=cal, held_out=held, base=QuantSettings(),
                     soc=get_soc("QCS6490"), thresholds=Thresholds(), focus_nodes=["Conv@4"],
                     baseline={"cosine": None}, out_dir=work / "advisor", budget_s=600,
                     simulate=False)
    total = time.perf_counter() - start
    measured = [r for r in recipes if r.duration_s > 0]
    print(f"recipe advisor (QDQ on CPU, 1 held-out sample): {len(measured)} recipe(s) "
          f"measured in {total:.1f} s")
    for r in measured:
        print(f"  {r.name}: {r.duration_s:.2f} s")
    if measured:
        print(f"  per recipe: median {statistics.median(r.duration_s for r in measured):.2f} s "
              "(no goal: informational; a recipe re-quantizes the model and runs the held-out "
              "samples)")


if __name__ == "__main__":
    sys.exit(main())
