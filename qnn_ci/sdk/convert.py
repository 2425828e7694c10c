"""Run ``qnn-onnx-converter`` and check what it wrote.

Output naming (``-o X``): the source goes to exactly ``X`` -- with no ``.cpp``
extension when ``X`` has none, which ``qnn-model-lib-generator -c`` then
rejects, so such a file is copied to ``<X>.cpp``. Weights go to
``splitext(realpath(X))[0] + ".bin"`` (absent when the graph has no static
tensors) and the graph JSON to ``... + "_net.json"``.

Failures are named, not just "exit 1": exit 255 with ``No translation
registered for op type onnx_<op>`` names the node and op; ``Encountered
Error: <text>`` gives that text; anything else gives the command and the
log's last lines.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from qnn_ci.sdk.locate import Sdk
from qnn_ci.sdk.toolrun import ToolRun, run_tool

log = logging.getLogger(__name__)

_NO_TRANSLATION_RE = re.compile(
    r"Node\s+(?P<node>.*?):\s*['\"]?No translation registered for op type "
    r"(?:onnx_)?(?P<op>[\w.]+?)\.?['\"]?\s*$", re.M)
_NO_TRANSLATION_BARE_RE = re.compile(r"No translation registered for op type (?:onnx_)?([\w]+)")
_ENCOUNTERED_RE = re.compile(r"Encountered Error:\s*(?P<text>.*\S)")
_NO_STATIC_RE = re.compile(r"no static tensors|no weights|no (?:params|parameters) to (?:save|"
                           r"write)|skipping (?:writing|saving) (?:the )?(?:model )?bin", re.I)


@dataclass
class ConvertOutcome:
    """One qnn-onnx-converter run: the files it wrote, why it failed or what to note."""

    run: ToolRun
    cpp: Path | None = None
    bin: Path | None = None
    net_json: Path | None = None
    failures: list[str] = field(default_factory=list)   # why the conversion failed
    notes: list[str] = field(default_factory=list)      # things worth saying on success
    failed_node: str | None = None
    failed_op: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures


def expected_outputs(output_path: Path) -> tuple[Path, Path, Path]:
    """(source as written, .bin, _net.json) for ``-o output_path``."""
    stem = os.path.splitext(os.path.realpath(output_path))[0]
    return Path(output_path), Path(stem + ".bin"), Path(stem + "_net.json")


def model_has_weights(model: Path) -> bool | None:
    """True when the ONNX graph has initializers or Constant nodes (static tensors);
    None when the model cannot be read."""
    try:
        import onnx

        proto = onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # any reader error: we simply cannot tell
        log.debug("cannot read %s to look for weights: %s", model, exc)
        return None

    def graph_has(graph: onnx.GraphProto) -> bool:
        if len(graph.initializer) or len(graph.sparse_initializer):
            return True
        for node in graph.node:
            if node.op_type == "Constant":
                return True
            for attr in node.attribute:
                if attr.g and graph_has(attr.g):
                    return True
                if any(graph_has(g) for g in attr.graphs):
                    return True
        return False

    return graph_has(proto.graph)


def _op_type_of(model: Path, node_name: str) -> str | None:
    try:
        import onnx

        proto = onnx.load(str(model), load_external_data=False)
    except Exception:
        return None
    for node in proto.graph.node:
        if node.name == node_name:
            return str(node.op_type)
    return None


def explain_failure(run: ToolRun, model: Path | None = None, *,
                    tool: str = "qnn-onnx-converter") -> tuple[str, str | None, str | None]:
    """(message, node, op) for a failed converter run (``tool``: which converter)."""
    if run.timed_out:
        return f"{tool} timed out\n{run.describe()}", None, None
    match = _NO_TRANSLATION_RE.search(run.output)
    if match:
        node, op = match.group("node").strip().strip("'\""), match.group("op")
        real_op = _op_type_of(model, node) if model is not None else None
        shown = real_op or op
        return (f"node {node!r}: op {shown} is not supported by {tool} "
                f"(No translation registered for op type onnx_{op}, exit {run.exit_code}); "
                f"replace the op in the graph before export", node, shown)
    bare = _NO_TRANSLATION_BARE_RE.search(run.output)
    if bare:
        return (f"op {bare.group(1)} is not supported by {tool} "
                f"(exit {run.exit_code})\n{run.describe()}", None, bare.group(1))
    enc = _ENCOUNTERED_RE.search(run.output)
    if enc:
        return (f"{tool} failed: {enc.group('text')} (exit {run.exit_code}, "
                f"log {run.log_path})", None, None)
    return f"{tool} failed\n{run.describe()}", None, None


def _resolve_source(written: Path, outcome: ConvertOutcome) -> Path | None:
    """The ``.cpp`` to hand on, copying an extension-less source when needed."""
    candidates = [written]
    if written.suffix:
        candidates.append(written.with_suffix(""))
    for candidate in candidates:
        if not candidate.is_file():
            continue
        if candidate.suffix == ".cpp":
            return candidate
        target = Path(str(candidate) + ".cpp") if candidate == written else written
        shutil.copyfile(candidate, target)
        outcome.notes.append(f"the converter wrote the source without a .cpp extension "
                             f"({candidate.name}); copied it to {target.name}")
        log.warning("%s", outcome.notes[-1])
        return target
    return None


def convert(argv: list[str], *, sdk: Sdk, workdir: Path, output_path: Path, model: Path,
            timeout: float, log_name: str = "convert") -> ConvertOutcome:
    """Run the converter command ``argv`` (built for ``-o output_path``) and check its files."""
    run = run_tool(argv, sdk=sdk, workdir=workdir, log_name=log_name, timeout=timeout)
    outcome = ConvertOutcome(run=run)
    if not run.ok:
        message, node, op = explain_failure(run, model)
        outcome.failures.append(message)
        outcome.failed_node, outcome.failed_op = node, op
        return outcome
    written, bin_path, net_json = expected_outputs(output_path)
    outcome.cpp = _resolve_source(written, outcome)
    if outcome.cpp is None:
        outcome.failures.append(f"qnn-onnx-converter exited 0 but wrote no model source at "
                                f"{written}\n{run.describe()}")
    if net_json.is_file():
        outcome.net_json = net_json
    else:
        outcome.failures.append(f"qnn-onnx-converter exited 0 but wrote no {net_json.name} "
                                f"(expected {net_json})")
    if bin_path.is_file():
        outcome.bin = bin_path
    else:
        says_none = bool(_NO_STATIC_RE.search(run.output))
        weights = model_has_weights(model)
        if says_none or weights is False:
            why = "the log says the graph has no static tensors" if says_none else \
                "the model has no initializers or Constant weights"
            outcome.notes.append(f"no {bin_path.name} written: {why}")
        else:
            outcome.failures.append(
                f"qnn-onnx-converter wrote no {bin_path.name} although the model has weights "
                f"(initializers or Constant nodes); expected {bin_path}\n{run.describe()}")
    return outcome
