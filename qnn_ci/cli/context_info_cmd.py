"""`qnn-ci context-info FILE [--json] [--sdk-root DIR]`

Print what a QNN context binary says it is: the SoC and HTP architecture it was
built for, its VTCM size and HVX threads, the QNN build that wrote it, its size,
its graphs and their I/O tensors. FILE is a ``.bin`` (read from its own bytes) or
the JSON ``qnn-context-binary-utility`` wrote. With a binary and an SDK that has
``bin/x86_64-linux-clang/qnn-context-binary-utility`` (``--sdk-root`` or
``$QNN_SDK_ROOT``), the utility's JSON adds the graphs' I/O data types and dims.
Exit 0, or 2 with one line for a file that is not a context binary.
See docs/context-binaries.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", type=Path,
                        help="a context binary (.bin) or qnn-context-binary-utility's JSON")
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    parser.add_argument("--sdk-root", type=Path, default=None, metavar="DIR",
                        help="QAIRT SDK whose qnn-context-binary-utility adds the graphs' I/O "
                             "types and dims (default: $QNN_SDK_ROOT)")


def _tensor_line(kind: str, t: Any) -> str:
    dims = "" if t.dims is None else " [" + ", ".join(map(str, t.dims)) + "]"
    return f"    {kind:<6} {t.name}" + (f"  {t.dtype}" if t.dtype else "") + dims


def run(args: argparse.Namespace) -> int:
    from qnn_ci.sdk.context_info import dumps, merge, read_context_info, run_context_utility
    from qnn_ci.sdk.context_info import vtcm_text as vtcm
    from qnn_ci.util.listing import cut_text
    from qnn_ci.util.safe_read import size_text

    info = read_context_info(args.file)
    note: str | None = None
    utility = None
    if info.kind == "binary":
        env_root = os.environ.get("QNN_SDK_ROOT")
        root = args.sdk_root or (Path(env_root) if env_root else None)
        if root is not None:
            tmp = Path(tempfile.mkdtemp(prefix="qnn-ci-context-"))
            try:
                utility, note = run_context_utility(root, args.file, tmp)
            finally:
                if note is None:          # a failure's log stays where the note says
                    shutil.rmtree(tmp, ignore_errors=True)
            info = merge(info, utility)
            if utility is None and note is None and args.sdk_root is not None:
                note = f"no qnn-context-binary-utility in {root}/bin/x86_64-linux-clang"
    if args.json:
        print(dumps(info, utility_note=note))
        return 0

    def unknown(value: Any, text: str | None = None) -> str:
        return "unknown" if value is None else (text if text is not None else str(value))

    size = info.size_bytes
    print(f"file: {info.source}" + (f" ({size} bytes, {size_text(size)})" if size is not None
                                     else " (qnn-context-binary-utility JSON)"))
    print(f"SoC: {unknown(info.soc)}")
    print(f"HTP arch: {unknown(info.htp_arch, f'v{info.htp_arch}')}")
    print(f"VTCM: {unknown(info.vtcm_bytes, vtcm(info.vtcm_bytes or 0))}")
    print(f"HVX threads: {unknown(info.hvx_threads)}")
    build = info.build_id + (f" (QNN {info.qnn_version})" if info.qnn_version else "") \
        if info.build_id else None
    print(f"QNN build: {unknown(build)}")
    if info.spill_fill_bytes is not None:
        print(f"spill/fill buffer: {info.spill_fill_bytes} bytes")
    print(f"graphs: {len(info.graphs)}")
    for g in info.graphs:
        print(f"  {g.name or '(unnamed)'}")
        for t in g.inputs:
            print(_tensor_line("input", t))
        for t in g.outputs:
            print(_tensor_line("output", t))
    if not info.io_known and info.kind == "binary":
        shown = cut_text(info.header_names, 40)
        print("I/O tensors (names stored in the header; inputs and outputs not told apart, "
              f"no types or dims without qnn-context-binary-utility): {shown or 'none found'}")
    if note:
        print(f"note: {note}", file=sys.stderr)
    return 0
