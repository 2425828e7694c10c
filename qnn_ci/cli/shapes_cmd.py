"""`qnn-ci shapes MODEL.onnx [--dim INPUT=d0,d1,...]... [--opset N] [-o OUT.onnx] [--json]`

Report every graph input/output dim, pin the given ones, and list every
interior tensor (main graph and subgraphs) still dynamic or unshaped after onnx
shape inference and an onnxruntime fill; verify the pinned model against the
original. Exit 0 when static and equivalent, 1 when findings remain, 2 on bad
input.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError
from qnn_ci.shapes import ShapeReport, analyse_and_pin
from qnn_ci.shapes.report import TensorShapeInfo, format_dims

FILLED_SHOWN = 20
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, metavar="MODEL.onnx", help="the ONNX model")
    parser.add_argument("--dim", action="append", default=[], metavar="INPUT=d0,d1,...",
                        help="pin an input's dims (repeat per input); inputs whose dims are "
                             "all static need none")
    parser.add_argument("--opset", metavar="N",
                        help="convert the default-domain opset with the onnx version converter")
    parser.add_argument("-o", "--output", type=Path, metavar="OUT.onnx",
                        help="write the pinned model (also when findings remain)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--feed", action="append", default=[], metavar="INPUT=FILE.npy|NUMBER",
                        help="an input value for the equivalence check (default: random; "
                             "integer inputs get 0..3), e.g. --feed sr=16000")
    parser.add_argument("--no-fill", action="store_true",
                        help="do not fill unknown shapes from an onnxruntime run")


def parse_dims(values: list[str]) -> dict[str, tuple[int, ...]]:
    dims: dict[str, tuple[int, ...]] = {}
    for text in values:
        name, sep, rest = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"{text!r}: expected INPUT=d0,d1,... such as x=1,3,224,224",
                            key="--dim")
        key = f"--dim {name}"
        if name in dims:
            raise UserError("given twice; give each input once", key=key)
        parts = [p.strip() for p in rest.split(",")] if rest.strip() else []
        shape: list[int] = []
        for p in parts:
            if not re.fullmatch(r"[+-]?[0-9]+", p):
                raise UserError(f"dim {p[:40]!r} is not an integer; give whole numbers like "
                                "1,3,224,224", key=key)
            if len(p.lstrip("+-0")) > 19:
                raise UserError(f"dim {p[:40]}... is larger than ONNX allows (2^63 - 1)",
                                key=key)
            shape.append(int(p))
        dims[name] = tuple(shape)
    return dims


def parse_feeds(values: list[str]) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for text in values:
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise UserError(f"{text!r}: expected INPUT=FILE.npy or INPUT=NUMBER", key="--feed")
        key = f"--feed {name}"
        if name in feeds:
            raise UserError("given twice; give each input once", key=key)
        if _NUMBER.match(value):
            if any(c in value for c in ".eE"):
                feeds[name] = np.array(float(value))
            elif len(value.lstrip("+-0")) > 18:
                raise UserError(f"{value[:40]} is too large for an integer input", key=key)
            else:
                feeds[name] = np.array(int(value))
            continue
        path = Path(value)
        if not path.is_file():
            raise UserError(f"file not found: {path}", key=key)
        try:
            feeds[name] = _load_feed(path, name, key)
        except UserError:
            raise
        except Exception as exc:  # numpy/zipfile raise many types for a corrupt file
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise UserError(f"cannot read {path} as .npy/.npz: {first}", key=key) from None
    return feeds


def _load_feed(path: Path, name: str, key: str) -> np.ndarray:
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            if name in loaded.files:
                return np.asarray(loaded[name])
            if len(loaded.files) == 1:
                return np.asarray(loaded[loaded.files[0]])
            raise UserError(f"{path} holds {', '.join(loaded.files)}, none named "
                            f"{name!r}", key=key)
    return np.asarray(loaded)


def parse_opset(value: str | None) -> int | None:
    if value is None:
        return None
    if not re.fullmatch(r"\s*\d+\s*", value):
        raise UserError(f"{value!r} is not an integer opset", key="--opset")
    return int(value)


FINDINGS_PER_CHECK = 3


def _io_line(io: TensorShapeInfo) -> str:
    return f"  {io.name}: {io.dtype} {format_dims(io.dims)} -> {format_dims(io.pinned)}"


def print_text(report: ShapeReport, verbose: int) -> None:
    print(f"model: {report.model}")
    print("inputs:")
    for io in report.inputs:
        print(_io_line(io))
    print("outputs:")
    for io in report.outputs:
        print(_io_line(io))
    i = report.inferred
    print(f"onnx shape inference: {i.static} static, {i.dynamic} dynamic, {i.unshaped} "
          f"unshaped of {i.tensors} tensors ({report.dropped_value_info} stale value_info "
          "dropped)")
    if report.filled_tensors:
        print(f"filled from onnxruntime ({len(report.filled_tensors)}):")
        shown = report.filled_tensors if verbose else report.filled_tensors[:FILLED_SHOWN]
        for f in shown:
            print(f"  {f.name} {list(f.shape)} (was {f.was}; from {f.producer}, {f.op_type})")
        if len(shown) < len(report.filled_tensors):
            print(f"  ... and {len(report.filled_tensors) - len(shown)} more (-v lists all)")
    for title, tensors in (("still dynamic", report.dynamic_tensors),
                           ("no shape", report.unshaped_tensors)):
        if tensors:
            print(f"{title} ({len(tensors)}):")
            shown = tensors if verbose else tensors[:FILLED_SHOWN]
            for t in shown:
                dims = f" {format_dims(t.dims)}" if t.dims is not None else ""
                print(f"  {t.name}{dims} [{t.graph}; from {t.producer}, {t.op_type}]")
            if len(shown) < len(tensors):
                print(f"  ... and {len(tensors) - len(shown)} more (-v lists all; --json "
                      "has every one)")
    listed = {"shapes.dynamic", "shapes.unshaped"}
    shown_findings = [f for f in report.findings
                      if f.check not in listed and (f.severity != Severity.INFO or verbose)]
    # What to do first: unpinned inputs lead, then errors, then warnings.
    shown_findings.sort(key=lambda f: (f.check != "shapes.input",
                                       f.severity != Severity.ERROR))
    repeats: dict[str, int] = {}
    for f in shown_findings:
        repeats[f.check] = repeats.get(f.check, 0) + 1
        if repeats[f.check] <= FINDINGS_PER_CHECK or verbose:
            print(f"{f.severity}: [{f.check}] {f.message}")
    for check, n in repeats.items():
        if n > FINDINGS_PER_CHECK and not verbose:
            print(f"  ... and {n - FINDINGS_PER_CHECK} more [{check}] (-v lists all)")
    if report.output_model:
        print(f"wrote {report.output_model}")
    print(report.summary())


def run(args: argparse.Namespace) -> int:
    dims = parse_dims(args.dim)
    feeds = parse_feeds(args.feed)
    opset = parse_opset(args.opset)
    report = analyse_and_pin(args.model, dims, opset=opset, out_path=args.output,
                             feeds=feeds or None, fill=not args.no_fill)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_text(report, args.verbose)
    return 0 if report.ok else 1
