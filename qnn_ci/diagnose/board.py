"""The board path of the diagnosis: attribution from the comparisons ``htp_vs_cpu``
already made, and the per-layer report from one ``qnn-net-run --debug`` run.

Attribution (``board_attribution``): the rule of ``qnn_ci.diagnose.attribution``
with the board's two runs against fp32 onnxruntime. The HTP backend is the
target. The CPU backend plays the QDQ-on-CPU role (the quantized graph where
only quantization can lose) when it ran the converter's quantized graph; when it
reproduced fp32 to float rounding it ran in float and plays the fp32 role — then
the board alone cannot tell quantization from the HTP: attribution ``none`` with
a detail that says so (the simulator path's ``sim_numerics`` can).

Per-layer report (``debug_layers``): the HTP backend runs once more with
``--debug`` on ONE sample (its cost is reported); every layer's float32 file is
mapped back to its ONNX tensor (``qnn_ci.diagnose.names``: collisions and
unmatched files are counted and named), put back in ONNX order (rank-4 tensors
the converter's ``_net.json`` lists spatial-first are transposed back; a rank-4
tensor it does not list is taken as spatial-first, the converter's default, and
counted), and compared with the fp32 model's own intermediates
(``qnn_ci.diagnose.intermediates``) through ``qnn_ci.diagnose.layers``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qnn_ci.diagnose.model import NONE, Diagnosis

log = logging.getLogger(__name__)

FLOAT_ROLE_DETAIL = ("the CPU backend ran in float (it reproduced fp32), so the board "
                     "cannot tell quantization loss from HTP loss; sim_numerics (the QDQ "
                     "model on CPU) can")


def board_attribution(htp_vs_fp32: Any, cpu_vs_fp32: Any, *, cpu_float: bool,
                      thresholds: Any = None) -> tuple[str, str]:
    """(attribution, detail) for the board (see the module docstring). Both
    comparisons must be judged by the export's thresholds."""
    from qnn_ci.diagnose.attribution import BOARD_LABELS, attribute

    if cpu_float:
        failed = any(s.failed for o in htp_vs_fp32.outputs for s in o.samples)
        return NONE, (FLOAT_ROLE_DETAIL if failed else "nothing failed its bound")
    return attribute(htp_vs_fp32, cpu_vs_fp32, thresholds, labels=BOARD_LABELS)


class LayerFiles(Mapping[str, np.ndarray]):
    """ONNX tensor name -> its ``--debug`` file's values in ONNX order, read when
    asked for (one layer in memory at a time)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Path, tuple[int, ...], tuple[int, ...] | None]] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        path, shape, perm = self.entries[name]
        data = np.fromfile(path, dtype="<f4")
        if perm is None:
            return data.reshape(shape)
        board_shape = tuple(shape[i] for i in (0, 2, 3, 1))
        return np.ascontiguousarray(data.reshape(board_shape).transpose(perm))

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass
class BoardLayers:
    """The HTP's per-layer values of one sample, in ONNX names and order."""

    values: LayerFiles = field(default_factory=LayerFiles)
    notes: list[str] = field(default_factory=list)
    files: int = 0


def _perm_back(shape: tuple[int, ...], board_dims: list[int] | None
               ) -> tuple[tuple[int, ...] | None, bool]:
    """(permutation from the board's order back to ONNX order, or None; whether the
    converter default was assumed)."""
    if len(shape) != 4:
        return None, False
    moved = [shape[0], shape[2], shape[3], shape[1]]
    if board_dims is None:
        return (0, 3, 1, 2), True
    if list(board_dims) == moved:
        return (0, 3, 1, 2), False     # NHWC -> NCHW (also when both readings fit)
    return None, False


def read_debug_layers(result_dir: Path, onnx_shapes: dict[str, tuple[int, ...]],
                      board_dims: dict[str, list[int]],
                      all_names: Sequence[str] = ()) -> BoardLayers:
    """Every ``--debug`` file of one ``Result_N`` folder, mapped to the ONNX tensors
    in ``onnx_shapes`` (float layer name -> ONNX shape; read as float32 and
    transposed back when asked for). ``all_names``: every tensor name of the ONNX
    model (inputs, initializers, node outputs): a file is mapped against all of
    them, so a name two tensors share is a collision, never a guess.
    ``board_dims``: the converter's tensor dims by its (sanitised) name."""
    from qnn_ci.compare.outputs import sanitize
    from qnn_ci.diagnose.names import map_debug_files

    out = BoardLayers()
    files = {p.relative_to(result_dir).as_posix()[:-4]: p
             for p in sorted(result_dir.rglob("*.raw")) if p.is_file()}
    out.files = len(files)
    names = map_debug_files(list(dict.fromkeys([*onnx_shapes, *all_names])), files)
    out.notes += names.notes()
    wrong_size: list[str] = []
    other: list[str] = []
    assumed = 0
    for key, name in names.matched.items():
        if name not in onnx_shapes:
            other.append(key)
            continue
        shape = onnx_shapes[name]
        count = math.prod(shape)
        path = files[key]
        if path.stat().st_size != 4 * count:
            wrong_size.append(f"{key} ({path.stat().st_size} bytes, {name} needs {4 * count})")
            continue
        dims = board_dims.get(key.rsplit("/", 1)[-1]) or board_dims.get(sanitize(name))
        perm, default = _perm_back(shape, dims)
        assumed += default
        out.values.entries[name] = (path, shape, perm)
    if wrong_size:
        out.notes.append(f"{len(wrong_size)} --debug file(s) of the wrong size were left out: "
                         + ", ".join(wrong_size[:5])
                         + (f" (+{len(wrong_size) - 5} more)" if len(wrong_size) > 5 else ""))
    if other:
        out.notes.append(f"{len(other)} --debug file(s) are of ONNX tensors that are not "
                         "float layers (inputs, weights, integer tensors) and were not "
                         "compared: " + ", ".join(other[:5])
                         + (f" (+{len(other) - 5} more)" if len(other) > 5 else ""))
    if assumed:
        out.notes.append(f"{assumed} rank-4 layer(s) not in the converter's _net.json were "
                         "read as spatial-first (the converter's default)")
    return out


def net_json_dims(net_json: Path | None) -> dict[str, list[int]]:
    """The converter's tensor dims by name (empty when there is no _net.json)."""
    from qnn_ci.sdk.net_json import read_net_json

    if net_json is None or not Path(net_json).is_file():
        return {}
    return {t.name: list(t.dims) for t in read_net_json(Path(net_json)).tensors
            if t.dims is not None}


def load_feeds(sample: dict[str, Path], inputs: Sequence[Any]) -> dict[str, np.ndarray]:
    """One sample's input files (ONNX order, raw) as onnxruntime feeds; ``inputs``
    are ``qnn_ci.calibration.sources.Expected``."""
    return {e.name: np.fromfile(sample[e.name], dtype=np.dtype(e.dtype)).reshape(e.shape)
            for e in inputs}


def layer_report(*, model: Path, feeds: dict[str, np.ndarray], result_dir: Path,
                 net_json: Path | None, bounds: dict[str, float],
                 out_dir: Path) -> tuple[Any, BoardLayers]:
    """(``layers.LayerReport`` of the HTP's layers against the fp32 model's own
    intermediates on the same sample, the layers read)."""
    import onnx

    from qnn_ci.diagnose.intermediates import float_tensors, run_samples, save_exposed
    from qnn_ci.diagnose.layers import LayerAccumulator

    fp32 = onnx.load(str(model))
    order = float_tensors(fp32)
    names = [t.tensor for t in order]
    exposed = save_exposed(fp32, names, out_dir / "fp32_layers.onnx")
    reference = next(iter(run_samples(exposed, [feeds], names)), {})
    shapes = {n: tuple(int(d) for d in np.shape(v)) for n, v in reference.items()}
    g = fp32.graph
    every = [*(i.name for i in g.input), *(i.name for i in g.initializer),
             *(o for n in g.node for o in n.output if o)]
    layers = read_debug_layers(result_dir, shapes, net_json_dims(net_json), every)
    acc = LayerAccumulator(order)
    acc.add(reference, layers.values)
    return acc.report(bounds), layers


def debug_run(*, transport: Any, board: Any, library: Path, input_list: Path,
              input_names: list[str], workdir: Path, expected: list[Any] | None,
              library_sdk_version: str | None = None,
              htp_config: Callable[[Path, str], Path] | None = None
              ) -> tuple[Path | None, list[str], float]:
    """Run the HTP backend with ``--debug`` on the list's FIRST sample, with the
    export's HTP config when it gives one: (the pulled ``Result_0`` folder or None,
    problems, seconds)."""
    from qnn_ci.boards.netrun import run_on_board
    from qnn_ci.engine.results import Severity

    started = time.monotonic()
    nr = run_on_board(transport, board, library=library, input_list=input_list,
                      input_names=input_names, backends=("htp",), workdir=workdir,
                      max_samples=1, library_sdk_version=library_sdk_version,
                      expected_outputs=expected, debug=True, htp_config=htp_config)
    took = time.monotonic() - started
    problems = [f.message for f in nr.findings if f.severity == Severity.ERROR]
    out = nr.output_dir("htp")
    result = out / "Result_0" if out is not None else None
    if result is None or not result.is_dir():
        return None, problems or ["qnn-net-run --debug wrote no Result_0"], took
    return result, problems, took


def diagnose_board(*, run_debug: Callable[[], tuple[Path | None, list[str], float]],
                   model: Path, feeds: dict[str, np.ndarray], net_json: Path | None,
                   thresholds: Any, outputs: Sequence[str], attribution: str, detail: str,
                   out_dir: Path) -> Diagnosis:
    """Attribution (given) + the per-layer report from one ``--debug`` run
    (``run_debug``: see ``debug_run``); artefacts (CSV, JSON, PNG) in ``out_dir``."""
    from qnn_ci.diagnose.artefacts import write_artefacts
    from qnn_ci.diagnose.layers import bounds_for

    out_dir.mkdir(parents=True, exist_ok=True)
    bounds = bounds_for(thresholds, list(outputs))
    result_dir, problems, took = run_debug()
    cost: dict[str, float] = {"debug_run_s": round(took, 3), "debug_samples": 1.0}
    if result_dir is None:
        d = Diagnosis(attribution, detail, "board-debug", cost=cost,
                      notes=["no per-layer report: " + "; ".join(problems)])
    else:
        started = time.monotonic()
        report, layers = layer_report(model=model, feeds=feeds, result_dir=result_dir,
                                      net_json=net_json, bounds=bounds, out_dir=out_dir)
        cost |= {"layers_s": round(time.monotonic() - started, 3),
                 "debug_files": float(layers.files), "layers_compared": float(report.compared)}
        notes = list(layers.notes) + [f"--debug run: {p}" for p in problems]
        if report.missing:
            notes.append(f"{len(report.missing)} ONNX layer(s) had no --debug file (fused or "
                         "folded by the converter): " + ", ".join(report.missing[:5])
                         + (f" (+{len(report.missing) - 5} more)"
                            if len(report.missing) > 5 else ""))
        d = Diagnosis(attribution, detail, "board-debug", report.first, report.layers,
                      report.jumps, [], cost, {}, notes)
    d.bounds = dict(bounds)
    write_artefacts(d, out_dir, bounds.get("cosine"))
    return d
