"""What both shells (the CLI and the pytest plugin) need to start the engine:
manifests loaded, an ``Environment`` resolved from options and the process
environment, one ``Pipeline`` per manifest."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.stage import Environment
from qnn_ci.errors import UserError
from qnn_ci.manifest.defaults import DEFAULT_WORKDIR
from qnn_ci.manifest.loader import Manifest, load_manifest
from qnn_ci.stages.registry import load_stages, load_stages_for
from qnn_ci.util.memo import MEMO_DIR

__all__ = ["DEFAULT_WORKDIR", "Opened", "Options", "check_selection", "check_unique_exports",
           "make_environment", "open_pipeline"]


@dataclass
class Options:
    """What a shell (the CLI or the pytest plugin) asks of a run."""

    workdir: Path = Path(DEFAULT_WORKDIR)
    sdk_root: Path | None = None
    esdk_env: Path | None = None
    board: str | None = None
    boards_file: Path | None = None
    use_cache: bool = True
    run_token: str = ""
    exports: list[str] = field(default_factory=list)     # select by name (empty: all)
    stages: list[str] = field(default_factory=list)      # run only these (and needs)
    changed_since: str | None = None                     # only exports changed since REF
    progress: Callable[[str], None] | None = None        # long stages' progress lines


def make_environment(opts: Options, manifest: Manifest,
                     environ: dict[str, str] | None = None,
                     notes: list[str] | None = None) -> Environment:
    """The run's environment. Precedence, highest first: the command line, the
    manifest (per export, at stage level), the process environment, ``.qualcomm-env``
    (``qnn_ci.manifest.qualcomm_env``); ``notes`` receives where each value came from."""
    from qnn_ci.manifest.qualcomm_env import load_for

    environ = dict(os.environ if environ is None else environ)
    notes = notes if notes is not None else []
    qenv = load_for(manifest.path)
    sdk_root = opts.sdk_root or (Path(environ["QNN_SDK_ROOT"]) if environ.get("QNN_SDK_ROOT")
                                 else None)
    if sdk_root is None and qenv is not None and qenv.sdk_root() is not None:
        sdk_root = Path(qenv.sdk_root().value)     # type: ignore[union-attr]
        notes.append(f"SDK root {sdk_root} from {qenv.sdk_root().where}")  # type: ignore[union-attr]
    esdk = opts.esdk_env or (Path(environ["ESDK_ENV"]) if environ.get("ESDK_ENV") else None)
    if esdk is None and qenv is not None and qenv.esdk_env() is not None:
        esdk = Path(qenv.esdk_env().value)          # type: ignore[union-attr]
        notes.append(f"eSDK environment {esdk} from {qenv.esdk_env().where}")  # type: ignore[union-attr]
    boards: dict[str, Any] = dict(manifest.boards)
    if opts.boards_file:
        from qnn_ci.manifest.boards_file import load_boards_file

        boards.update(load_boards_file(opts.boards_file))
    board_override = opts.board
    from_file = qenv.board() if qenv is not None else None
    if from_file is not None and from_file[0] not in boards:
        name, cfg = from_file
        boards[name] = cfg
        where = qenv.get("transport") or qenv.get("host") or qenv.get("serial")  # type: ignore[union-attr]
        if board_override is None and not any(e.board for e in manifest.exports):
            board_override = name     # the run's board, as --board would name it
            notes.append(f"board {name} ({cfg.transport}) from "
                         f"{where.where if where else qenv.path}: the board stages run on it")  # type: ignore[union-attr]
        else:
            notes.append(f"board {name} ({cfg.transport}) declared from "
                         f"{where.where if where else qenv.path}")  # type: ignore[union-attr]
    # <workdir>/<export>/<stage>/: export names are unique across the manifests of
    # one run (check_unique_exports).
    return Environment(workdir=opts.workdir.resolve(), sdk_root=sdk_root, esdk_env=esdk,
                       boards=boards, board_override=board_override, use_cache=opts.use_cache,
                       run_token=opts.run_token, environ=environ, progress=opts.progress)


@dataclass
class Opened:
    """One manifest ready to run: the pipeline knows every export (a selected export
    may need another's stages through `from:`); ``selected`` are the ones to run."""

    manifest: Manifest
    pipeline: Pipeline
    selected: list[str]
    notes: list[str] = field(default_factory=list)   # where settings came from
    selection: Any = None                            # qnn_ci.runner.changed.Selection, or None
    deselected: dict[str, str] = field(default_factory=dict)   # export -> why not run


def open_pipeline(path: Path, opts: Options) -> Opened:
    manifest = load_manifest(path, memo_dir=opts.workdir.resolve() / MEMO_DIR)
    notes: list[str] = []
    env = make_environment(opts, manifest, notes=notes)
    selected = [e.name for e in manifest.exports if not opts.exports or e.name in opts.exports]
    stages = load_stages_for(set(opts.stages), manifest.exports, env) if opts.stages \
        else load_stages()
    opened = Opened(manifest, Pipeline(manifest.exports, env, stages=stages), selected, notes)
    if opts.changed_since:
        from qnn_ci.runner.changed import select

        sel = select(manifest.path, manifest.exports, None, opts.changed_since,
                     memo_root=opts.workdir.resolve() / MEMO_DIR, baselines=manifest.baselines)
        opened.selection = sel
        opened.deselected = {n: why for n, why in sel.deselected.items() if n in selected}
        opened.selected = [n for n in selected if n in sel.selected]
    return opened


def check_selection(opened: list[Opened], names: list[str]) -> None:
    """Every --export name must name an export of some manifest."""
    known = [e.name for o in opened for e in o.manifest.exports]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"--export {name!r}: no such export{hint}; exports: "
                            f"{', '.join(known)}")


def check_unique_exports(seen: dict[str, Path], manifest: Manifest) -> None:
    """Export names are unique across the manifests of one run: each export's work
    folder is <workdir>/<export>. ``seen`` maps names to their manifest so far."""
    for export in manifest.exports:
        other = seen.setdefault(export.name, manifest.path)
        if other != manifest.path:
            raise UserError(f"export {export.name!r} is also defined in {other}; export "
                            "names must be unique across the manifests of one run (their "
                            "work folders are <workdir>/<export>)", file=manifest.path,
                            line=export.line, key="name")
