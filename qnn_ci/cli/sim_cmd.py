"""`qnn-ci sim MODEL.onnx --soc SOC`: will this model run on the SoC's HTP?

Quantizes the model for the HTP (QDQ, W8A16 by default), prepares it on
onnxruntime-qnn's HTP simulator/graph preparer for the SoC with CPU fallback
disabled, and (with --calibration) runs the prepared graph against fp32
onnxruntime CPU. Exit 0 prepared (and within thresholds), 1 rejected or out of
thresholds, 2 bad input.

With --diagnose (needs --calibration) the numeric check is diagnosed whether it
passed or not: attribution (quantization / htp / both / none), the first
diverging layer, the worst jumps and measured recipes (``qnn_ci.diagnose.sim``);
the exit status stays the check's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError
from qnn_ci.util.listing import cut_text, shown

EPILOG = """\
Without --calibration the model is quantized with RANDOM data: the prepare
answer (does every node go to the HTP?) holds, numbers are not checked.
Needs onnxruntime-qnn: pip install 'qnn-ci[sim]'.
"""
RANDOM_SAMPLES = 2
DIAGNOSE_NEEDS_CALIBRATION = (
    "--diagnose needs --calibration INPUT_LIST (real samples: random data cannot diagnose "
    "numerics): `qnn-ci run --stage calibration` writes one from a manifest's calibration "
    "(.qnn-ci/<export>/calibration/input_list.txt; held_out_list.txt for --test-inputs), "
    "or write one line per sample, name:=/abs/path.raw per input (headerless, the input's "
    "dtype), and check it with `qnn-ci inputs validate LIST --model MODEL.onnx`")
DEFAULT_BUDGET_S = 600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", type=Path, metavar="MODEL.onnx")
    parser.add_argument("--soc", required=True, help="target SoC, e.g. QCS6490")
    parser.add_argument("--dim", action="append", default=[], metavar="INPUT=d0,d1,...",
                        help="pin a dynamic input (repeatable)")
    parser.add_argument("--calibration", type=Path, metavar="INPUT_LIST",
                        help="calibration input list (name:=/abs/path.raw per input per line)")
    parser.add_argument("--test-inputs", type=Path, metavar="INPUT_LIST",
                        help="held-out samples for the numeric check (default: the first "
                             "calibration samples, with a warning)")
    parser.add_argument("--samples", type=int, default=2,
                        help="simulated inferences for the numeric check (default 2; the "
                             "simulator is slow)")
    parser.add_argument("--act-bw", type=int, default=16, choices=(8, 16),
                        help="activation bitwidth (default 16)")
    parser.add_argument("--weight-bw", type=int, default=8, choices=(4, 8, 16),
                        help="weight bitwidth (default 8)")
    parser.add_argument("--per-channel", action="store_true", help="per-channel weights")
    parser.add_argument("--encodings", type=Path, metavar="FILE.encodings",
                        help="AIMET encodings applied as tensor overrides")
    parser.add_argument("-t", "--threshold", action="append", default=[],
                        metavar="[OUTPUT:]METRIC=VALUE",
                        help="comparison bound (repeatable; default cosine=0.99)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="artefact folder (default ./qnn-ci-out/<model>)")
    parser.add_argument("--diagnose", action="store_true",
                        help="diagnose the numeric check: where the error enters (attribution, "
                             "first diverging layer) and which setting fixes it (needs "
                             "--calibration)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="time budget of the diagnosis and its recipe advisor "
                             f"(default {DEFAULT_BUDGET_S:.0f})")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _pin(model_path: Path, dims_args: list[str], out_dir: Path) -> Path:
    """The model with every input static: as given, or pinned by --dim into
    ``out_dir/<stem>.static.onnx``. Dynamic inputs without --dim: UserError."""
    import onnx

    from qnn_ci.cli.dims import parse_dims
    from qnn_ci.model.onnx_io import graph_inputs, load_model
    from qnn_ci.shapes.pin import (
        dim_suggestion,
        drop_stale_shapes,
        infer,
        pin_inputs,
        real_inputs,
        validate_dims,
    )

    model = load_model(model_path)
    from qnn_ci.model.prequantized import refuse_quantized

    refuse_quantized(model, file=model_path)    # name the user's file, not a pinned copy
    ios = graph_inputs(model)
    dims = parse_dims(dims_args, {io.name: io for io in ios})
    validate_dims(model, dims)
    static = {io.name: io.static_shape is not None for io in ios}
    missing = [vi for vi in real_inputs(model) if vi.name not in dims and not static[vi.name]]
    if missing:
        raise UserError("dynamic input(s) not pinned: " + "; ".join(
            f"{vi.name}: give --dim {dim_suggestion(vi)}" for vi in missing), file=model_path)
    if not dims:
        return model_path
    pin_inputs(model, dims)
    drop_stale_shapes(model)
    model, _warnings = infer(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    pinned = out_dir / f"{model_path.name.removesuffix('.onnx')}.static.onnx"
    onnx.save(model, str(pinned))
    return pinned


def run(args: argparse.Namespace) -> int:
    from qnn_ci.sim.availability import sim_unavailable
    from qnn_ci.sim.ep import sim_target

    soc = sim_target(args.soc, key="--soc")      # before anything runs
    if args.samples < 1:
        raise UserError("--samples must be at least 1")
    if args.diagnose and not args.calibration:
        raise UserError(DIAGNOSE_NEEDS_CALIBRATION)
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        raise UserError(f"--budget must be a positive number of seconds, got {args.budget}",
                        key="--budget")
    reason = sim_unavailable()
    if reason:
        raise UserError(reason)
    if not args.model.is_file():
        raise UserError("model not found", file=args.model)
    out_dir = (args.out or Path("qnn-ci-out") / args.model.name.removesuffix(".onnx")).resolve()
    return _run(args, soc, out_dir)


def _run(args: argparse.Namespace, soc: Any, out_dir: Path) -> int:
    import onnx

    from qnn_ci.compare import apply_thresholds
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.numerics import simulate_and_compare
    from qnn_ci.sim.quantize import QuantSettings
    from qnn_ci.sim.samples import inputs_of, load_samples, random_samples

    thresholds = apply_thresholds(args.threshold)
    model = _pin(args.model, args.dim, out_dir)
    metas = inputs_of(onnx.load(str(model), load_external_data=False), source=model)
    if args.calibration:
        samples = load_samples(args.calibration, metas)
    else:
        samples = random_samples(metas, RANDOM_SAMPLES)
    test = load_samples(args.test_inputs, metas, limit=args.samples) if args.test_inputs \
        else None
    settings = QuantSettings(act_bitwidth=args.act_bw, weights_bitwidth=args.weight_bw,
                             per_channel=args.per_channel, overrides=args.encodings)
    report = check_htp(model, out_dir, soc, samples, settings,
                       random_calibration=args.calibration is None,
                       log_severity=0 if args.verbose >= 2 else 2)
    numerics = None
    if args.calibration and report.passed and report.prepare and report.prepare.ctx_model:
        assert report.quantize is not None
        held = test if test is not None else samples[:args.samples]
        numerics = simulate_and_compare(model, report.quantize.model, report.prepare.ctx_model,
                                        soc, held, thresholds, out_dir)
    passed = report.passed and (numerics is None or numerics.passed)
    result = report.to_dict() | {"passed": passed, "out_dir": str(out_dir),
                                 "numerics": numerics.to_dict() if numerics else None}
    diagnosis = None
    if args.diagnose:
        diagnosis = _diagnose(args, model, report, numerics, samples,
                              test if test is not None else samples[:args.samples],
                              settings, thresholds, soc, out_dir)
        result["diagnosis"] = diagnosis.to_dict() if diagnosis is not None else None
    if numerics is not None and test is None:
        result["numerics"]["sample_source"] = "calibration"
    (out_dir / "sim_report.json").write_text(json.dumps(result, indent=2, default=str),
                                             "utf-8")
    if args.json:
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        _print_human(report, numerics, test is None, passed)
        if args.diagnose:
            _print_diagnosis(diagnosis)
    return 0 if passed else 1


def _diagnose(args: argparse.Namespace, model: Path, report: Any, numerics: Any,
              calibration: Any, held: Any, settings: Any, thresholds: Any, soc: Any,
              out_dir: Path) -> Any:
    """The diagnosis of the numeric check, or None when there is no check to
    diagnose (the model did not prepare). Progress lines go to stderr."""
    import logging

    from qnn_ci.diagnose.sim import diagnose_sim

    if numerics is None or report.quantize is None:
        return None
    # With -v the library's INFO log already shows each line.
    quiet = logging.getLogger("qnn_ci").isEnabledFor(logging.INFO)

    def progress(line: str) -> None:
        if not quiet:
            print(f"qnn-ci sim: {line}", file=sys.stderr, flush=True)

    budget = args.budget if args.budget is not None else DEFAULT_BUDGET_S
    return diagnose_sim(float_model=model, qdq_model=report.quantize.model,
                        ctx_model=report.prepare.ctx_model if report.prepare else None,
                        soc=soc, numerics=numerics, calibration=calibration, held_out=held,
                        settings=settings, thresholds=thresholds,
                        out_dir=out_dir / "diagnosis", budget_s=budget, progress=progress)


def _print_diagnosis(diagnosis: Any) -> None:
    from qnn_ci.diagnose.text import text_lines

    if diagnosis is None:
        print("diagnosis: not run: the model did not prepare for the HTP, so there is no "
              "numeric check to diagnose (fix the prepare first)")
        return
    for line in text_lines(diagnosis):
        print(line)


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.6f}" if metric == "cosine" else f"{value:.4g}"


def _print_prepare(p: Any, soc: Any) -> None:
    ctx = p.context
    if ctx is not None and ctx.arch is not None:
        print(f"arch:     v{ctx.arch} (binary soc_type={ctx.soc_type}, vtcm_size="
              f"{ctx.vtcm_size})")
    else:
        why = "prepare failed" if not p.prepared else "no binary was found"
        print(f"arch:     {soc.arch_name} ({soc.name}'s HTP; no context binary was built "
              f"({why}), so nothing was read back)")
    counts = (f"{p.nodes_on_htp} / {p.nodes_total}" if p.nodes_total is not None
              else "unknown (no session could be built)")
    print(f"nodes on HTP / total: {counts}")
    if p.nodes_total is not None:
        print(f"nodes in the session: {p.counts_text()}")
        origin = p.origin_text()
        if origin:
            print(f"  {origin}")
    # every node not on the HTP, each with the reason the EP logged (rejected) or not
    print(f"nodes not on the HTP: {len(p.rejected) or 'none'}")
    kept, more = shown(p.rejected, 50)
    for r in kept:
        where = f" [assigned to {r.ep}]" if r.ep else ""
        print(f"  - {r.describe()}{where}")
    if more:
        print(f"  (+{more} more: see the JSON report)")
    if p.log_only:
        print(f"the EP log also named {len(p.log_only)} that the session kept on the HTP or "
              "that is no graph node: "
              + cut_text(p.log_only, 10, render=lambda r: repr(r.name)))


def _print_human(report: Any, numerics: Any, on_calibration: bool, passed: bool) -> None:
    soc, p, q = report.soc, report.prepare, report.quantize
    print(f"model:    {report.model}")
    print(f"SoC:      {soc.name} (HTP {soc.arch_name}, simulator id {soc.sim_soc_id})")
    if report.random_calibration:
        print("calibration: RANDOM data (no --calibration): prepare result only, "
              "no numeric check")
    elif q is not None:
        print(f"calibration: {q.samples} sample(s)")
    if q is not None and q.constants_folded:
        print(f"constants folded into initializers: {q.constants_folded}")
    if p is not None:
        _print_prepare(p, soc)
        print(f"context model:  {p.ctx_model or '-'}")
        print(f"context binary: {p.ctx_binary or '-'}")
        print(f"EP log:         {p.ep_log}")
    if numerics is not None:
        src = "calibration (no --test-inputs)" if on_calibration else "held-out"
        print(f"numerics: {numerics.samples} {src} sample(s), simulator vs fp32 CPU "
              f"({numerics.sim_s_per_inference:.2f} s per simulated inference)")
        for out in numerics.comparison.outputs:
            for s in out.samples:
                m = s.metrics
                vals = "  ".join(f"{k} {_fmt(m.value(k) if m else None, k)}"
                                 for k in ("cosine", "max_abs", "snr"))
                print(f"  {out.name} sample {s.sample}: {vals}  {s.verdict}")
    tags = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info"}
    shown = [f for f in report.findings if f.check not in ("sim.rejected",)]
    if numerics is not None:
        shown += numerics.findings
    for f in shown:
        print(f"{tags[f.severity]}: [{f.check}] {f.message}")
    print(f"{'PASSED' if passed else 'FAILED'}: {report.summary_line()}"
          + (f"; {numerics.comparison.summary_line()}" if numerics is not None else ""))
