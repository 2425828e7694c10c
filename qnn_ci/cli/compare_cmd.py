"""`qnn-ci compare A B`: compare test outputs B against reference outputs A."""

from __future__ import annotations

import argparse
import json
import math
import sys

from qnn_ci.compare.compare import Comparison, OutputResult, compare_sets
from qnn_ci.compare.outputs import load_output_set, parse_shape
from qnn_ci.compare.resolution import steps_from_tokens
from qnn_ci.compare.thresholds import apply_thresholds
from qnn_ci.engine.results import Severity

EPILOG = """\
A and B: a qnn-net-run output folder (Result_N/...), one Result_N folder, a
folder of .raw/.npy files, or a single .raw (needs --dtype) or .npy file.
Metrics: cosine, snr, psnr (minimums); max_abs, mean_abs (maximums).
Default: cosine=0.99. Exit 0 all within thresholds, 1 otherwise, 2 bad input.
A reference that is near zero (peak within 4 quantization steps of zero, or at
most 0.1% of the test's peak) is not judged by cosine/snr/psnr: give an
absolute bound (max_abs) for it. Give the test's output step with --quant-step.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("reference", help="reference outputs (A)")
    parser.add_argument("test", help="outputs to check (B)")
    parser.add_argument("-t", "--threshold", action="append", default=[],
                        metavar="[OUTPUT:]METRIC=VALUE",
                        help="a bound, for every output or one (repeatable), "
                             "e.g. cosine=0.999 or logits:max_abs=0.05")
    parser.add_argument("--dtype", help="dtype of the .raw files (default float32 in "
                                        "folders; required for a bare .raw file)")
    parser.add_argument("--shape", help="expected shape of every output, e.g. 1,1000: "
                                        "element counts are checked against it")
    parser.add_argument("--quant-step", action="append", default=[], metavar="[OUTPUT:]STEP",
                        help="the quantization step (scale) of the outputs, for every output "
                             "or one (repeatable), e.g. 1.5e-5 or prob:0.0039: a reference "
                             "within 4 steps of zero counts as near zero")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _num(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if metric == "cosine":
        return f"{value:.6f}"
    if metric in ("snr", "psnr"):
        return f"{value:.2f}"
    return f"{value:.3e}"


def _bounds_text(out: OutputResult) -> str:
    words = []
    for metric, value in out.bounds.items():
        op = "<=" if metric in ("max_abs", "mean_abs") else ">="
        words.append(f"{metric}{op}{value:g}")
    return ", ".join(words) or "none"


def _print_table(out: OutputResult) -> None:
    shown = out.name if out.test_key == out.name else f"{out.name} (test: {out.test_key})"
    print(f"output {shown}  [{_bounds_text(out)}]")
    cols = ("cosine", "max_abs", "mean_abs", "snr", "psnr")
    print(f"  {'sample':>6}  {'cosine':>9}  {'max_abs':>10}  {'mean_abs':>10}  "
          f"{'snr_dB':>8}  {'psnr_dB':>8}  verdict")
    for s in out.samples:
        m = s.metrics
        vals = [_num(m.value(c) if m else None, c) for c in cols]
        print(f"  {s.sample:>6}  {vals[0]:>9}  {vals[1]:>10}  {vals[2]:>10}  "
              f"{vals[3]:>8}  {vals[4]:>8}  {s.verdict}")


def _print_human(comp: Comparison) -> None:
    print(f"reference: {comp.reference}")
    print(f"test:      {comp.test}")
    for out in comp.outputs:
        _print_table(out)
    tags = {Severity.ERROR: "FAIL", Severity.WARNING: "warn", Severity.INFO: "info"}
    for f in comp.findings:
        print(f"{tags[f.severity]} [{f.check}] {f.message}")
    word = "PASSED" if comp.passed else "FAILED"
    print(f"compare: {word}: {comp.summary_line()}")


def run(args: argparse.Namespace) -> int:
    thresholds = apply_thresholds(args.threshold)
    steps = steps_from_tokens(args.quant_step)
    shape = parse_shape(args.shape) if args.shape else None
    reference = load_output_set(args.reference, dtype=args.dtype)
    test = load_output_set(args.test, dtype=args.dtype)
    expected = None
    if shape is not None:
        expected = {name: (None, shape) for name in reference.names()}
    comp = compare_sets(reference, test, thresholds, expected=expected, quant_steps=steps)
    if args.json:
        json.dump(comp.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_human(comp)
    return 0 if comp.passed else 1
