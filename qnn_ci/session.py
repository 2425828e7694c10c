"""What both shells (the CLI and the pytest plugin) need to start the engine:
manifests loaded, an ``Environment`` resolved from options and the process
environment, one ``Pipeline`` per manifest."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.manifest import Manifest, load_manifest
from qnn_ci.pipeline import Pipeline
from qnn_ci.stage import Environment

DEFAULT_WORKDIR = ".qnn-ci"


@dataclass
class Options:
    workdir: Path = Path(DEFAULT_WORKDIR)
    sdk_root: Path | None = None
    esdk_env: Path | None = None
    board: str | None = None
    boards_file: Path | None = None
    use_cache: bool = True
    run_token: str = ""
    exports: list[str] = field(default_factory=list)     # select by name (empty: all)


def make_environment(opts: Options, manifest: Manifest,
                     environ: dict[str, str] | None = None) -> Environment:
    environ = dict(os.environ if environ is None else environ)
    sdk_root = opts.sdk_root or (Path(environ["QNN_SDK_ROOT"]) if environ.get("QNN_SDK_ROOT")
                                 else None)
    esdk = opts.esdk_env or (Path(environ["ESDK_ENV"]) if environ.get("ESDK_ENV") else None)
    boards: dict[str, Any] = dict(manifest.boards)
    if opts.boards_file:
        from qnn_ci.boards.registry import load_boards_file

        boards.update(load_boards_file(opts.boards_file))
    # Each manifest gets its own folder under the work root, so two manifests may
    # use the same export names.
    workdir = opts.workdir.resolve() / manifest.path.parent.name / manifest.path.stem
    return Environment(workdir=workdir, sdk_root=sdk_root, esdk_env=esdk, boards=boards,
                       board_override=opts.board, use_cache=opts.use_cache,
                       run_token=opts.run_token, environ=environ)


def open_pipeline(path: Path, opts: Options) -> tuple[Manifest, Pipeline]:
    manifest = load_manifest(path)
    env = make_environment(opts, manifest)
    exports = [e for e in manifest.exports if not opts.exports or e.name in opts.exports]
    return manifest, Pipeline(exports, env)
