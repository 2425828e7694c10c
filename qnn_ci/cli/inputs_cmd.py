"""`qnn-ci inputs validate INPUT_LIST --model MODEL.onnx [--dim ...] [--json]`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qnn_ci.calibration.validate import validate_input_list
from qnn_ci.cli.dims import parse_dims
from qnn_ci.errors import UserError
from qnn_ci.model.onnx_io import graph_inputs, load_model


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    v = sub.add_parser("validate", help="check an input list against a model")
    v.add_argument("input_list", type=Path)
    v.add_argument("--model", type=Path, required=True, help="the ONNX model")
    v.add_argument("--dim", action="append", default=[], metavar="INPUT=d0,d1,...",
                   help="static shape of a dynamic input; repeatable")
    v.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    inputs = graph_inputs(model)
    dims = parse_dims(args.dim, {i.name: i for i in inputs})
    shapes = {}
    for io in inputs:
        if io.name in dims:
            shapes[io.name] = dims[io.name]
        elif io.static_shape is not None or io.dims == ():
            shapes[io.name] = io.static_shape or ()
    if not args.input_list.is_file():
        raise UserError("input list not found", file=args.input_list)
    report = validate_input_list(args.input_list, inputs, shapes)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(f"{args.input_list}: {report.samples} sample(s), inputs "
              + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in report.inputs))
        for f in report.findings:
            print(f"  {f.severity.value}: {f.message}")
        print("clean" if report.clean else f"{len(report.findings)} problem(s)")
    return 0 if report.clean else 1
