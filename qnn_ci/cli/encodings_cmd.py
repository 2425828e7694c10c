"""`qnn-ci encodings FILE --model MODEL.onnx [--json]`

Read an AIMET ``.encodings`` file (0.6.1, 1.0.0, 2.0.0) and check it against
the model: names the model does not have are silently ignored by the
converter (exit 1: probably a file for a different model). Tensors without
encodings are sorted: those the converter derives (data-movement outputs,
fused outputs, biases, BatchNorm parameters) are counted; those really left to
``--input_list`` calibration are warned about by name (exit 0). Exit 2 when the
file is malformed or is not a QNN input (AIMET's PyTorch sidecar).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHOW = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", type=Path, help="AIMET .encodings file")
    parser.add_argument("--model", type=Path, metavar="MODEL.onnx",
                        help="the ONNX model the encodings are for (without it only the "
                             "file itself is read)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _names(names: list[str]) -> str:
    more = f" ... and {len(names) - SHOW} more" if len(names) > SHOW else ""
    return ", ".join(names[:SHOW]) + more


def run(args: argparse.Namespace) -> int:
    from qnn_ci.sdk.encoding_roles import derived_text
    from qnn_ci.sdk.encodings import read_encodings
    from qnn_ci.sdk.encodings_coverage import coverage, load_model

    enc = read_encodings(args.file)
    cov = coverage(enc, load_model(args.model)) if args.model else None
    bad = bool(cov and cov.unknown)
    if args.json:
        payload = enc.to_dict() | {"model": str(args.model) if args.model else None,
                                   "coverage": cov.to_dict() if cov else None,
                                   "passed": not bad}
        print(json.dumps(payload, indent=2))
        return 1 if bad else 0
    print(f"{args.file}: AIMET encodings version {enc.version}")
    if enc.unclassified:
        print(f"  entries:      {len(enc.unclassified)} (this layout has no "
              f"activation/param split)")
    else:
        print(f"  activations:  {len(enc.activations)}")
        print(f"  params:       {len(enc.params)}")
    print(f"  bitwidths:    {', '.join(str(b) for b in sorted(enc.bitwidths)) or '-'}")
    for note in enc.notes:
        print(f"  note: {note}")
    if cov is None:
        return 0
    c = cov.counts
    print(f"model {args.model}:")
    print(f"  known names:  {c['known']} of {c['file_entries']} "
          f"({len(cov.file_activations)} activations, {len(cov.file_params)} params)")
    print(f"  activations covered: {c['covered_activations']} of {c['model_activations']}")
    print(f"  params covered:      {c['covered_params']} of {c['model_params']}")
    print(f"  derived by the converter (no encoding needed): {len(cov.derived)}"
          + (f" ({derived_text(cov.derived_counts())})" if cov.derived else ""))
    print(f"  left to --input_list calibration: {len(cov.uncovered)}")
    if cov.none_match:
        print(f"error: none of the {c['file_entries']} names in the file exist in the model: "
              f"the encodings are probably for a different model")
    elif cov.unknown:
        print(f"error: {len(cov.unknown)} name(s) not in the model (the converter ignores "
              f"them silently): {_names(cov.unknown)}")
    for unknown, real in list(cov.sanitised.items())[:SHOW]:
        print(f"  hint: {unknown!r} looks like the converter-sanitised form of {real!r}; "
              f"encodings must use ONNX tensor names")
    if cov.uncovered_activations:
        print(f"warning: {len(cov.uncovered_activations)} activation(s) not covered (their "
              f"ranges come from --input_list): {_names(cov.uncovered_activations)}")
    if cov.uncovered_params:
        print(f"warning: {len(cov.uncovered_params)} param(s) not covered (the converter "
              f"computes their ranges from the values): {_names(cov.uncovered_params)}")
    return 1 if bad else 0
