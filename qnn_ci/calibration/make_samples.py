"""Making the calibration samples: the ``calibration`` stage's work when it runs --
from an input list, a generator or another export's outputs -- and storing them for,
or taking them from, other exports with the same content key
(``qnn_ci.engine.shared_results``).

Apart from ``qnn_ci.stages.calibration`` (the stage's declaration and cache key), so
that a cached run, which only computes keys, does not import what making samples
needs.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from qnn_ci.calibration.input_list import read_input_list, write_input_list
from qnn_ci.calibration.list_tokens import check_names, check_work_path
from qnn_ci.calibration.sources import (
    Expected,
    UpstreamRunner,
    check_sample,
    generate,
    write_sample,
)
from qnn_ci.calibration.state_inputs import state_inputs
from qnn_ci.calibration.validate import SYNTHETIC_SIGNS, SyntheticCheck, validate_input_list
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.shared_results import Claim
from qnn_ci.engine.spec import CalibrationSpec
from qnn_ci.engine.stage import StageContext
from qnn_ci.engine.warning_lines import warning_properties, warning_texts
from qnn_ci.errors import UserError
from qnn_ci.model.tensors import TensorIO

log = logging.getLogger(__name__)

STAGE = "calibration"
DEFAULT_GENERATED_SAMPLES = 100
DEFAULT_GENERATED_HELD_OUT = 4
LISTS = {"input_list": "input_list.txt", "held_out_list": "held_out_list.txt"}


def expected_inputs(ctx: StageContext) -> list[Expected]:
    shapes = ctx.upstream["static_shapes"].data["inputs"]
    return [Expected(i["name"], i["dtype"], tuple(i["shape"])) for i in shapes]


def _warning_counts(findings: list[Finding]) -> str:
    """"; 100 warning(s): 97 inputs.all_zero, 3 inputs.identical" (most first), or ""."""
    counts: dict[str, int] = {}
    for f in findings:
        if f.severity == Severity.WARNING:
            counts[f.check] = counts.get(f.check, 0) + 1
    if not counts:
        return ""
    kinds = sorted(counts.items(), key=lambda kv: -kv[1])
    return (f"; {sum(counts.values())} warning(s): "
            + ", ".join(f"{n} {check}" for check, n in kinds))


def _lists(result: StageResult) -> dict[str, str]:
    return {k: result.artefacts[k] for k in LISTS if k in result.artefacts}


def publish(entry: Claim, result: StageResult) -> None:
    """Store a passed result's samples and lists under its content key, for the
    exports with the same key to link rather than make again."""
    names = list(result.data["inputs"])
    raw_dir = Path(result.artefacts["raw_dir"]).resolve()
    files = {f"raw/{p.name}": p for p in sorted(raw_dir.iterdir()) if p.is_file()}
    lists = {k: [{n: str(Path(path).resolve().relative_to(raw_dir))
                  for n, path in row.items()}
                 for row in read_input_list(Path(v), names)]
             for k, v in _lists(result).items()}
    stored = result.to_dict()
    stored.pop("artefacts")
    entry.publish(files, {"lists": lists, "result": stored})


def reuse(ctx: StageContext, entry: Claim) -> StageResult | None:
    """The stored samples linked into this export's folder, or None when the entry
    does not hold up (a list naming a file it does not have, a damaged result)."""
    stored = entry.stored
    raw_dir = ctx.workdir / "raw"
    try:
        names = [str(n) for n in stored["result"]["data"]["inputs"]]
        have = set(entry.files)
        lists = {str(kind): [{str(n): str(rel) for n, rel in row.items()} for row in rows]
                 for kind, rows in stored["lists"].items()}
        if not set(lists) <= set(LISTS) or "input_list" not in lists or any(
                sorted(row) != sorted(names) or any(f"raw/{rel}" not in have
                                                    for rel in row.values())
                for rows in lists.values() for row in rows):
            return None
        result = StageResult.from_dict({**stored["result"], "artefacts": {}})
        if result.status != Status.PASSED or result.stage != STAGE:
            return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    raw_dir.mkdir(exist_ok=True)
    entry.link_into({name: ctx.workdir / name for name in entry.files})
    artefacts = {"raw_dir": str(raw_dir)}
    for kind, rows in lists.items():
        path = ctx.workdir / LISTS[kind]
        write_input_list(path, [{n: raw_dir / rel for n, rel in row.items()}
                                for row in rows], names)
        artefacts[kind] = str(path)
    result.artefacts = artefacts
    result.properties["shared_from"] = f"{entry.made_by} (content key {entry.key[:12]})"
    log.info("%s::calibration: reused the samples computed for export %s",
             ctx.export.name, entry.made_by)
    return result


def compute(ctx: StageContext) -> StageResult:
    """Make this export's samples from its source into ``ctx.workdir`` and check them."""
    export, c = ctx.export, ctx.export.calibration
    expected = expected_inputs(ctx)
    names = [e.name for e in expected]
    # A name or work folder no input list can carry fails here, before any sample.
    check_names(names)
    check_work_path(ctx.workdir)
    raw_dir = ctx.workdir / "raw"
    raw_dir.mkdir()
    shapes = ctx.upstream["static_shapes"].data
    state, findings = state_inputs(
        shapes["inputs"], shapes.get("outputs") or [],
        [n for n, spec in export.inputs.items() if spec.state])
    synthetic = SyntheticCheck(state)
    if c.input_list:
        samples = _from_list(c.input_list, expected, raw_dir, findings, state)
        source = f"input list {c.input_list}"
    elif c.generator:
        held_req = DEFAULT_GENERATED_HELD_OUT if c.held_out is None else c.held_out
        total = (c.samples or DEFAULT_GENERATED_SAMPLES) + held_req
        samples = []
        for i, s in enumerate(generate(c.generator, export.manifest.parent, total,
                                       key=f"exports.{export.name}.calibration.generator")):
            arrays = check_sample(s, expected, where=f"generator {c.generator} sample {i}",
                                  key=f"exports.{export.name}.calibration.generator")
            for e in expected:
                synthetic.add_array(e.name, f"sample {i}", arrays[e.name])
            samples.append(write_sample(arrays, expected, raw_dir, i))
        source = f"generator {c.generator}"
    else:
        samples = _from_peer(ctx, expected, raw_dir, synthetic)
        source = f"outputs of export {c.from_export} (onnxruntime)"
        upstream_cal = ctx.peer_results[str(c.from_export)]["calibration"]
        n_upstream = int(upstream_cal.data.get("samples", len(samples)))
    if not samples:
        raise UserError(f"{source} gave no samples",
                        key=f"exports.{export.name}.calibration")
    if c.from_export:
        n_cal = min(n_upstream, len(samples))
    else:
        n_cal = _split(c, len(samples), findings)
    cal, held = samples[:n_cal], samples[n_cal:]
    input_list = ctx.workdir / "input_list.txt"
    write_input_list(input_list, cal, names)
    artefacts = {"input_list": str(input_list), "raw_dir": str(raw_dir)}
    if held:
        held_list = ctx.workdir / "held_out_list.txt"
        write_input_list(held_list, held, names)
        artefacts["held_out_list"] = str(held_list)
    # Signs of synthetic data: one sample is a warning (a constant mask can be
    # real); every sample zero, or all identical, is an error.
    findings += [f if f.check == "inputs.non_finite" else
                 Finding(f.check, f.message, Severity.WARNING, f.subject)
                 for f in synthetic.findings] + synthetic.degenerate()
    status = Status.FAILED if any(f.severity == Severity.ERROR for f in findings) \
        else Status.PASSED
    summary = (f"{len(cal)} calibration sample{'s' if len(cal) != 1 else ''}"
               + (f" + {len(held)} held out" if held else "") + f" from {source}")
    summary += _warning_counts(findings)
    if state:
        summary += f"; state input(s) {', '.join(sorted(state))} not checked for zeros"
    properties: dict[str, Any] = {"samples": len(cal), "held_out": len(held),
                                  "source": source}
    if state:
        properties["state_inputs"] = ", ".join(sorted(state))
    properties |= warning_properties(warning_texts(findings))
    return StageResult(
        STAGE, status, summary, findings=findings, properties=properties,
        artefacts=artefacts,
        data={"samples": len(cal), "held_out": len(held),
              "inputs": {e.name: {"dtype": e.dtype, "shape": list(e.shape)}
                         for e in expected}})


def _split(c: CalibrationSpec, n: int, findings: list[Finding]) -> int:
    """How many of ``n`` samples calibrate; the rest are held out. Asked-for counts
    that the source cannot give are said, never silently shortened."""
    default_held = DEFAULT_GENERATED_HELD_OUT if c.generator else 0
    held = default_held if c.held_out is None else c.held_out
    want = (c.samples or (DEFAULT_GENERATED_SAMPLES if c.generator else n - held)) + held
    if n < want:
        findings.append(Finding(
            "calibration.short", f"the {'generator' if c.generator else 'input list'} "
            f"gave {n} sample(s), {want} were asked for (samples + held_out)",
            Severity.WARNING))
    if n <= held:
        raise UserError(f"{n} sample(s) cannot give {held} held out and still "
                        "calibrate: lower calibration.held_out or add samples",
                        key="calibration.held_out")
    return min(c.samples or n, n - held)


def _from_list(path: Path, expected: list[Expected], raw_dir: Path,
               findings: list[Finding], state: set[str]) -> list[dict[str, Path]]:
    names = [e.name for e in expected]
    ios = [TensorIO(e.name, e.dtype, e.shape) for e in expected]
    report = validate_input_list(path, ios, {e.name: e.shape for e in expected},
                                 state=state)
    findings += [Finding(f.check, f.message, Severity.WARNING, f.subject)
                 for f in report.findings if f.check in SYNTHETIC_SIGNS]
    findings += [f for f in report.findings if f.check.startswith("inputs.all_samples_")
                 or f.check == "inputs.non_finite"]
    errors = [f for f in report.findings if f.check not in SYNTHETIC_SIGNS
              and not f.check.startswith("inputs.all_samples_")
              and f.check != "inputs.non_finite"]
    if errors:
        raise UserError(f"input list does not fit the model: {errors[0].message}"
                        + (f" (+{len(errors) - 1} more; run `qnn-ci inputs validate`)"
                           if len(errors) > 1 else ""), file=path)
    samples = []
    for i, sample in enumerate(read_input_list(path, names)):
        copied = {}
        for e in expected:
            dst = raw_dir / f"{e.name}_{i}.raw".replace("/", "_")
            shutil.copyfile(sample[e.name], dst)
            copied[e.name] = dst.resolve()
        samples.append(copied)
    return samples


def _from_peer(ctx: StageContext, expected: list[Expected], raw_dir: Path,
               synthetic: SyntheticCheck) -> list[dict[str, Path]]:
    c = ctx.export.calibration
    assert c.from_export
    peer = ctx.peer_results[c.from_export]
    up_shapes = peer["static_shapes"]
    up_cal = peer["calibration"]
    up_inputs = [Expected(i["name"], i["dtype"], tuple(i["shape"]))
                 for i in up_shapes.data["inputs"]]
    up_names = [e.name for e in up_inputs]
    runner = UpstreamRunner(Path(up_shapes.artefacts["model"]), up_inputs, c.name_map)
    lists = [Path(up_cal.artefacts["input_list"])]
    if "held_out_list" in up_cal.artefacts:
        lists.append(Path(up_cal.artefacts["held_out_list"]))
    samples = []
    for lst in lists:
        for paths in read_input_list(lst, up_names):
            outputs = runner.run(paths)
            arrays = check_sample(
                outputs, expected,
                where=f"outputs of export {c.from_export} sample {len(samples)}",
                key=f"exports.{ctx.export.name}.calibration.from")
            for e in expected:
                synthetic.add_array(e.name, f"sample {len(samples)}", arrays[e.name])
            samples.append(write_sample(arrays, expected, raw_dir, len(samples)))
    return samples
