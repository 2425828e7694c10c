"""The `qnn-ci` command: a thin shell over the engine.

Each sub-command lives in its own module under ``qnn_ci.cli`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only
when their command runs, so ``qnn-ci --help`` stays fast.

Exit status everywhere: 0 clean, 1 findings / failures, 2 bad input (one line),
3 internal error (a bug in qnn-ci: one line on stderr, the traceback in
``<workdir>/qnn-ci-internal-error-*.log`` or a temporary file), 130 SIGINT,
143 SIGTERM (see ``qnn_ci.cli.interrupts``), 141 a closed output pipe.

A closed pipe (``qnn-ci run --json | head -1``) ends the command quietly, as
git does: nothing on stderr, exit status 141 (128 + SIGPIPE, what the shell
reports for a command a closed pipe stopped; ``set -o pipefail`` sees it). Every
sub-command's stdout is covered, including the flush of what is still buffered
at the end: stdout is then pointed at /dev/null (the Python documentation's
recipe), so the interpreter's exit-time flush has nowhere to fail. A broken
pipe that is not stdout (a subprocess, a socket) stays an error.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys
from pathlib import Path

from qnn_ci import __version__
from qnn_ci.cli import interrupts
from qnn_ci.engine.internal_error import EXIT_INTERNAL, InternalError, oneline, write_log
from qnn_ci.errors import UserError

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("qnn_ci.cli.init_cmd", "write a starting qnn-ci.yaml (and workflow) for a model"),
    "run": ("qnn_ci.cli.run_cmd", "run the pipeline for every export in one or more manifests"),
    "shapes": ("qnn_ci.cli.shapes_cmd", "report and pin dynamic shapes; list tensors left dynamic"),
    "inputs": ("qnn_ci.cli.inputs_cmd", "validate an input list (calibration / qnn-net-run)"),
    "namespace": ("qnn_ci.cli.namespace_cmd", "read the converter's recorded argument list back"),
    "fp16": ("qnn_ci.cli.fp16_cmd", "count FP16 tensors in converter output; gate on the SoC"),
    "context-info": ("qnn_ci.cli.context_info_cmd",
                     "what a context binary says it is: SoC, HTP arch, VTCM, I/O"),
    "htp-config": ("qnn_ci.cli.htp_config_cmd",
                   "print the HTP config qnn-ci would write for a SoC"),
    "encodings": ("qnn_ci.cli.encodings_cmd", "read AIMET .encodings and check coverage"),
    "sim": ("qnn_ci.cli.sim_cmd", "prepare (and run) a model on onnxruntime-qnn's HTP simulator"),
    "compare": ("qnn_ci.cli.compare_cmd", "compare two sets of outputs with per-output thresholds"),
    "schema": ("qnn_ci.cli.schema_cmd", "print the manifest's JSON Schema"),
    "report": ("qnn_ci.cli.report_cmd", "write one self-contained HTML report of a run"),
    "baseline": ("qnn_ci.cli.baseline_cmd", "update the baselines the regression check reads"),
    "history": ("qnn_ci.cli.history_cmd", "keep a history of runs (JUnit) and show its trends"),
}

log = logging.getLogger("qnn_ci")

EXIT_PIPE = 141          # 128 + SIGPIPE: the reader of our stdout went away


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING - 10 * verbose
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("qnn-ci: %(levelname)s: %(message)s"))
    root = logging.getLogger("qnn_ci")
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.DEBUG))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qnn-ci",
        description="Check ONNX -> Qualcomm QNN exports: static shapes, calibration, "
                    "conversion, FP16, HTP simulator and board runs.",
    )
    parser.add_argument("--version", action="version", version=f"qnn-ci {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (repeat for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    with interrupts.stop_on_signals():
        try:
            try:
                return _main(list(sys.argv[1:] if argv is None else argv))
            finally:
                sys.stdout.flush()       # what is still buffered: a closed pipe shows here
        except BrokenPipeError:
            if not _closed(sys.stdout):
                raise
            _quiet(sys.stdout)
            if _closed(sys.stderr):     # `2>&1 | head`: the same pipe
                _quiet(sys.stderr)
            return EXIT_PIPE


def _closed(stream: object) -> bool:
    """True when ``stream`` is a pipe whose reader has gone (or cannot be asked)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll(): trust the exception
        return True


def _quiet(stream: object) -> None:
    """Point ``stream``'s descriptor at /dev/null: later writes and the interpreter's
    exit-time flush then succeed silently."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _main(argv: list[str]) -> int:
    for stream in (sys.stdout, sys.stderr):   # a non-UTF-8 file or tensor name must not
        if hasattr(stream, "reconfigure"):    # crash a print (UnicodeEncodeError)
            stream.reconfigure(errors="backslashreplace")
    top = build_parser()
    # Find the sub-command without importing every module.
    known, rest = top.parse_known_args(argv)
    if not known.command:
        top.print_help()
        return 2
    command = f"qnn-ci {known.command}"
    args: argparse.Namespace | None = None
    try:
        module_name, help_text = COMMANDS[known.command]
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=command, description=help_text)
        parser.add_argument("-v", "--verbose", action="count", default=known.verbose)
        module.add_arguments(parser)
        args = parser.parse_args(rest)
        _setup_logging(args.verbose)
        return int(module.run(args))
    except UserError as exc:
        print(f"{command}: error: {exc.oneline()}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the user gave cannot be read or written
        if isinstance(exc, BrokenPipeError) and _closed(sys.stdout):
            raise                          # our reader went away: main() ends quietly
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:   # SIGINT; SIGTERM arrives as interrupts.Terminated
        print(f"{command}: {interrupts.reason(exc)}", file=sys.stderr)
        return interrupts.exit_status(exc)
    except InternalError as exc:       # already in the report and its log file
        print(oneline(command, exc.exc, exc.log), file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as exc:           # a bug in qnn-ci: one line, the traceback in a file
        workdir = getattr(args, "workdir", None)
        log_path = write_log(exc, workdir if isinstance(workdir, Path) else None)
        print(oneline(command, exc, log_path), file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
