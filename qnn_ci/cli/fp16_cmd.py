"""`qnn-ci fp16 FILE... --soc SOC [--json]`

Count FP16 tensors in converter output (generated source or ``_net.json``, or
the QNN JSON graph onnxruntime-qnn dumps) and gate on the SoC: exit 1 when the
SoC has no FP16 and any tensor is FP16, 0 otherwise, 2 on bad input: a file
that is not converter output, or one that is truncated or edited so the audit
would be incomplete.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", metavar="FILE", type=Path, nargs="+",
                        help="generated model source (.cpp or no extension), _net.json, "
                             "or a QNN JSON graph")
    parser.add_argument("--soc", required=True, help="target SoC, e.g. QCS6490")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")


def run(args: argparse.Namespace) -> int:
    from qnn_ci.sdk.fp16_audit import audit_fp16, gate_fp16
    from qnn_ci.tables import get_soc

    soc = get_soc(args.soc, key="--soc")
    reports = [audit_fp16(f) for f in args.files]
    for r in reports:
        if r.incomplete:
            raise UserError(f"{r.incomplete}: the file is truncated or edited, so the FP16 "
                            f"audit would be incomplete; regenerate it with qnn-onnx-converter",
                            file=r.source)
        if not r.converter_output:
            raise UserError("no tensor definitions: not converter output; pass the "
                            "generated model source, its _net.json or a QNN JSON graph",
                            file=r.source)
    findings = [(r, gate_fp16(r, soc)) for r in reports]
    failed = any(f.severity == Severity.ERROR for _, fs in findings for f in fs)
    if args.json:
        print(json.dumps({
            "soc": soc.name, "htp_arch": soc.arch_name, "fp16_supported": soc.fp16,
            "passed": not failed,
            "files": [r.to_dict() | {"findings": [f.to_dict() for f in fs]}
                      for r, fs in findings],
        }, indent=2))
        return 1 if failed else 0
    support = "executes FP16" if soc.fp16 else "has NO FP16"
    print(f"SoC {soc.name}: HTP {soc.arch_name} {support}")
    for r, fs in findings:
        print(f"{r.source}: {r.count} FP16 tensor(s) of {r.total_tensors}")
        for f in fs:
            if f.severity == Severity.ERROR:
                print(f"  error: {f.message}")
            elif f.severity == Severity.WARNING:
                print(f"  warning: {f.message}")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0
