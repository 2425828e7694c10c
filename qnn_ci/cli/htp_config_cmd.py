"""`qnn-ci htp-config --soc SOC [--vtcm-mb N] [--O N] [--fp16-relaxed-precision]
[--hvx-threads N] [--dlbc 0|1] [--graph NAME ...] [--cpp FILE] [--json]`

Print the HTP backend-extension config qnn-ci would write for that SoC: the inner
``htp_config.json`` and the ``backend_extensions`` wrapper (the same checks as the
manifest's ``htp_config:``; one-line errors, exit 2). Graph names come from
``--graph`` or the converter's ``--cpp`` (the SDK ignores a config whose graph name
matches no graph, without a word).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--soc", required=True, help="target SoC, e.g. QCS6490")
    parser.add_argument("--vtcm-mb", dest="vtcm_mb", type=int,
                        help="VTCM the graph may use in MiB (0 = the SoC's maximum)")
    parser.add_argument("--O", dest="O", type=int, help="optimization level 1..3")
    parser.add_argument("--fp16-relaxed-precision", dest="fp16_relaxed_precision",
                        action="store_true", default=None,
                        help="let float ops run in FP16 (an SoC with FP16 only)")
    parser.add_argument("--hvx-threads", dest="hvx_threads", type=int, help="HVX threads")
    parser.add_argument("--dlbc", type=int, help="deep-learning bandwidth compression 0/1")
    parser.add_argument("--graph", action="append", default=[], metavar="NAME",
                        help="a graph name (repeatable)")
    parser.add_argument("--cpp", type=Path, help="the converter's .cpp: its graph names")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {htp_config, wrapper}")


def run(args: argparse.Namespace) -> int:
    from qnn_ci.manifest.htp_config import parse_htp_config
    from qnn_ci.sdk.htp_config import graph_names_from_cpp, render_htp_config, render_wrapper
    from qnn_ci.tables import HTP_CONFIG_FILE, get_soc

    soc = get_soc(args.soc, key="--soc")
    given: dict[str, Any] = {k: getattr(args, k) for k in
                             ("vtcm_mb", "O", "fp16_relaxed_precision", "hvx_threads", "dlbc")
                             if getattr(args, k) is not None}

    def error(key_path: tuple[Any, ...], message: str) -> UserError:
        flag = "--" + str(key_path[-1]).replace("_", "-") if len(key_path) > 1 else None
        return UserError(message, key=flag)

    spec = parse_htp_config(given, soc, error)
    graphs = list(args.graph)
    if args.cpp is not None:
        graphs += [g for g in graph_names_from_cpp(args.cpp) if g not in graphs]
        if not graphs:
            raise UserError("names no graph (no `<graph>.initialize(...)` call): not "
                            "converter output?", file=args.cpp)
    if spec.graph_settings() and not graphs:
        raise UserError("give the graph names (--graph NAME or --cpp FILE): the SDK "
                        "ignores graph settings for a name that matches no graph",
                        key="--graph")
    inner, wrapper = render_htp_config(spec, soc, graphs), render_wrapper(HTP_CONFIG_FILE)
    if args.json:
        print(json.dumps({"htp_config": inner, "wrapper": wrapper}, indent=2))
        return 0
    print(f"# {HTP_CONFIG_FILE} (SoC {soc.name}, HTP {soc.arch_name})")
    print(json.dumps(inner, indent=2))
    print("# the wrapper, passed with --config_file")
    print(json.dumps(wrapper, indent=2))
    return 0
