"""`qnn-ci init MODEL [--soc SOC] [--name NAME] [--dim INPUT=d0,...] [--workflow]
[--out DIR]`: write a starting `qnn-ci.yaml` for one model, a calibration generator
skeleton beside it and, with --workflow, a GitHub workflow (docs/init.md).

The inputs come from the model (dtypes, dims; integer inputs `encoding: other`).
A dim the model leaves free gets a size and a TODO: 1 for a batch-like dim, else a
guess that init checks the way the `static_shapes` stage will (pinned, inferred,
filled and run in onnxruntime), trying a few sizes until one passes, so the manifest
loads and passes `static_shapes` as written. The generator refuses to yield anything
until the user gives it real data. Existing files are never overwritten.

Exit status: 0 written; 1 written, but no size tried passes `static_shapes` (said
why: pin the sizes by hand); 2 bad input or a file already there.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import shlex
import site
import sys
import sysconfig
from contextlib import suppress
from pathlib import Path

from qnn_ci.cli.dims import parse_dims
from qnn_ci.cli.init_files import (
    InitPlan,
    generator_text,
    manifest_text,
    shown,
    workflow_text,
)
from qnn_ci.cli.init_model import Check, choose_shapes, output_plans
from qnn_ci.errors import UserError
from qnn_ci.manifest.defaults import MANIFEST_NAMES
from qnn_ci.tables import SocInfo, get_soc

WORKFLOW = Path(".github/workflows/qnn-ci.yml")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")     # the schema's export name
NAME_MAX = 100
PLAIN_PATH = re.compile(r"[\w./-]+\Z", re.ASCII)
DIST_TEXT = re.compile(r"[A-Za-z0-9_.+!-]+\Z")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=Path, metavar="MODEL", help="the ONNX model to check")
    p.add_argument("--soc", help="target.soc, the SoC you ship on (e.g. QCS6490)")
    p.add_argument("--name", help="the export's name (default: the model file's stem)")
    p.add_argument("--dim", action="append", default=[], metavar="INPUT=d0,d1,...",
                   help="an input's shape, when you know it (else free dims are guessed, "
                        "checked and marked TODO); repeatable")
    p.add_argument("--workflow", action="store_true",
                   help="also write .github/workflows/qnn-ci.yml at the repository root")
    p.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                   help="folder for qnn-ci.yaml and the calibration generator (default: .)")


# ------------------------------------------------------------------ names, paths

def export_name(args_name: str | None, model: Path) -> str:
    if args_name is not None:
        if not NAME_RE.match(args_name) or len(args_name) > NAME_MAX:
            raise UserError(f"{args_name!r} is not an export name: use letters, digits, '_', "
                            f"'.' and '-', starting with a letter or digit, at most {NAME_MAX} "
                            "characters", key="--name")
        return args_name
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", model.stem).lstrip("_.-")[:NAME_MAX]
    return name or "model"


def _site_dirs() -> list[Path]:
    found = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    with suppress(AttributeError):      # some virtualenvs have no getsitepackages
        found += site.getsitepackages()
    out: list[Path] = []
    for d in found:
        p = Path(d).resolve()
        if p not in out:
            out.append(p)
    return out


def _wheel(package: str) -> tuple[str, str] | None:
    dists = importlib.metadata.packages_distributions().get(package) or []
    for dist in dists:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if DIST_TEXT.match(dist) and DIST_TEXT.match(version):
            return dist, version
    return None


def model_ref(model: Path, out_dir: Path) -> tuple[str, tuple[str, str] | None]:
    """`model:` as the manifest writes it: `pkg:PACKAGE/path` for a model shipped in an
    installed package (with the wheel that ships it), else a path relative to the
    manifest's folder (absolute when that climbs more than two folders)."""
    model = model.resolve()
    for base in _site_dirs():
        if not model.is_relative_to(base):
            continue
        rel = model.relative_to(base).parts
        if len(rel) < 2 or not rel[0].isidentifier():
            continue
        try:
            spec = importlib.util.find_spec(rel[0])
        except (ImportError, ValueError):
            continue
        locations = list(spec.submodule_search_locations or []) if spec else []
        if locations and Path(locations[0]).resolve() == base / rel[0]:
            return f"pkg:{rel[0]}/{'/'.join(rel[1:])}", _wheel(rel[0])
    relative = Path(os.path.relpath(model, out_dir.resolve()))
    if relative.parts.count("..") > 2:
        return str(model), None
    return relative.as_posix(), None


def repo_root(out_dir: Path) -> Path:
    """The git work tree holding ``out_dir``; else the current folder when it holds
    ``out_dir``; else ``out_dir`` itself."""
    start = out_dir.resolve()
    for p in (start, *start.parents):
        if (p / ".git").exists():
            return p
    cwd = Path.cwd().resolve()
    return cwd if start.is_relative_to(cwd) else start


def _for_humans(path: Path) -> str:
    with suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    return str(path)


# ------------------------------------------------------------------ writing

def _write_all(files: list[tuple[Path, str]], manifest: Path) -> None:
    """Create every file (never replacing one), then load the manifest as `qnn-ci run`
    would; on any failure nothing written stays."""
    from qnn_ci.manifest.loader import load_manifest

    written: list[Path] = []
    try:
        for path, text in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with path.open("x", encoding="utf-8") as f:
                    written.append(path)
                    f.write(text)
            except FileExistsError:
                raise UserError("appeared while qnn-ci init was writing; nothing written",
                                file=_for_humans(path)) from None
        load_manifest(manifest)     # as `qnn-ci run` reads it (a qnn-boards.yaml too)
    except BaseException:
        for path in written:
            with suppress(OSError):
                path.unlink()
        raise


def run(args: argparse.Namespace) -> int:
    from qnn_ci.model.onnx_io import graph_inputs, graph_outputs, load_model

    soc: SocInfo | None = get_soc(args.soc, key="--soc") if args.soc is not None else None
    model_path: Path = args.model
    model = load_model(model_path)
    inputs, outputs = graph_inputs(model), graph_outputs(model)
    name = export_name(args.name, model_path)
    given = parse_dims(args.dim, {io.name: io for io in inputs})
    for io in inputs:
        fixed = [(i, d, w) for i, (d, w) in enumerate(zip(io.dims or (), given.get(io.name, ()),
                                                           strict=False))
                 if isinstance(d, int) and d > 0 and d != w]
        if fixed:
            i, d, w = fixed[0]
            raise UserError(f"dim {i} of input {io.name!r} is fixed at {d} in the model, "
                            f"got {w}", key=f"--dim {shown(io.name)}")
    out_dir: Path = args.out
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError("is not a folder: give --out a folder for qnn-ci.yaml",
                        file=_for_humans(out_dir))
    manifest = out_dir / MANIFEST_NAMES[0]
    module = "calib_" + re.sub(r"\W", "_", name, flags=re.ASCII)
    root = repo_root(out_dir)
    targets = [manifest, *([root / WORKFLOW] if args.workflow else []),
               out_dir / f"{module}.py", out_dir / module]
    for path in targets:
        if os.path.lexists(path):
            raise UserError("already exists: qnn-ci init never overwrites a file; move it "
                            "away or write elsewhere with --out DIR", file=_for_humans(path))
    manifest_rel = ""
    if args.workflow:
        try:
            manifest_rel = manifest.resolve().relative_to(root).as_posix()
        except ValueError:
            manifest_rel = ""
        if not PLAIN_PATH.match(manifest_rel):
            raise UserError(f"the manifest's path from the repository root {str(root)!r} is "
                            f"{manifest_rel or str(manifest.resolve())!r}: a workflow's "
                            "command line takes letters, digits, '_', '.', '-' and '/' "
                            "only; choose another --out", key="--workflow")

    output_kinds = output_plans(outputs, model.graph)
    del model                       # the checks below load it again: not two copies
    plans, check = choose_shapes(model_path, inputs, given)
    ref, wheel = model_ref(model_path, out_dir)
    plan = InitPlan(export=name, model_ref=ref, model_file=model_path.name, inputs=plans,
                    outputs=output_kinds, soc=soc, module=module, manifest_rel=manifest_rel,
                    wheel=wheel)
    files = [(manifest, manifest_text(plan)), (out_dir / f"{module}.py", generator_text(plan))]
    notes = []
    if args.workflow:
        files.append((root / WORKFLOW, workflow_text(plan)))
        if not ref.startswith("pkg:") and not model_path.resolve().is_relative_to(root):
            notes.append(f"note: the model is outside the repository {str(root)!r}: the "
                         "workflow's runner will not find it; move it in and fix `model:`")
    _write_all(files, manifest)
    return _report(plan, check, files, manifest, notes)


def _report(plan: InitPlan, check: Check | None, files: list[tuple[Path, str]],
            manifest: Path, notes: list[str]) -> int:
    print(f"model: {shown(plan.model_file)} ({len(plan.inputs)} input(s), "
          f"{len(plan.outputs)} output(s))")
    for p in plan.inputs:
        shape = "[" + ", ".join(map(str, p.shape)) + "]" if p.shape is not None else "?"
        todo = [str(d.index) for d in p.free if not d.given]
        note = (f"  (dim{'s' if len(todo) > 1 else ''} {', '.join(todo)} free in the model: "
                "TODO in the manifest)") if todo else ""
        enc = ", encoding other" if p.integer else ""
        print(f"  {shown(p.name)}: {p.dtype} {p.dims_text()} -> {shape}{enc}{note}")
    for o in plan.outputs:
        if o.kind != "float":
            print(f"  output {shown(o.name)}: {o.dtype}, {o.kind}"
                  + (f" ({shown(o.producer)})" if o.producer else ""))
    what = {0: f"export {plan.export!r}" + (f", target {plan.soc.name}" if plan.soc else
                                            ", no target.soc yet (--soc)"),
            1: "the calibration generator: make samples() yield real inputs (until then "
               "the calibration stage stops on its TODO)",
            2: "host and simulator stages on pull requests; a self-hosted SDK and board job "
               "to uncomment"}
    for i, (path, _text) in enumerate(files):
        print(f"wrote {_for_humans(path)}: {what[i]}")
    for note in notes:
        print(note)
    status = 0
    if check is not None and check.passed:
        before = (f"; sizes {', '.join(check.tried[:-1])} did not pass"
                  if len(check.tried) > 1 else "")
        print(f"static_shapes passes with these sizes (checked: {check.summary}{before})")
    elif check is not None:
        status = 1
        tried = f"sizes tried: {', '.join(check.tried)}" if check.tried else "the sizes given"
        sys.stdout.flush()
        print(f"qnn-ci init: warning: static_shapes does not pass with {tried}: "
              f"{check.summary}; pin the sizes you ship under inputs.<name>.shape",
              file=sys.stderr)
    print(f"next: qnn-ci run {shlex.quote(_for_humans(manifest))} --stage static_shapes")
    return status
