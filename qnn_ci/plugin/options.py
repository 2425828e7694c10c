"""The plugin's options (command line, then ini), markers and session state."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from qnn_ci.manifest.defaults import DEFAULT_WORKDIR, MANIFEST_NAMES

if TYPE_CHECKING:   # the engine is imported when a manifest is collected, not before
    from qnn_ci.runner.session import Opened, Options

MARKERS = {
    "qnn": "a qnn-ci stage of a model export",
    "qnn_sdk": "a qnn-ci stage that needs the QAIRT SDK (QNN_SDK_ROOT)",
    "qnn_board": "a qnn-ci stage that needs a board",
    "qnn_sim": "a qnn-ci stage that needs onnxruntime-qnn's HTP simulator",
}
PIPELINES = pytest.StashKey[dict[Path, "Opened"]]()
EXPORTS = pytest.StashKey[dict[str, Path]]()   # export name -> its manifest (unique)
TOKEN = pytest.StashKey[str]()
# A qnn-ci item that failed on bad input (a manifest error, a wrong SDK root): the
# session exits 2, as `qnn-ci run` does (a typo must not read as a failed check).
EXIT_BAD_INPUT = 2


def add_options(parser: pytest.Parser) -> None:
    """The plugin's command-line options and ini keys."""
    group = parser.getgroup("qnn-ci", "ONNX -> QNN export checks")
    group.addoption("--qnn-workdir", help=f"work folder (default {DEFAULT_WORKDIR})")
    group.addoption("--qnn-board", help="run board stages on this board")
    group.addoption("--qnn-sdk-root", help="QAIRT SDK root (default $QNN_SDK_ROOT)")
    group.addoption("--qnn-boards-file", help="a qnn-boards.yaml declaring boards")
    group.addoption("--qnn-no-cache", action="store_true", default=None,
                    help="re-run every stage instead of reusing cached results")
    group.addoption("--qnn-export", action="append", default=None,
                    help="only this export (repeatable)")
    group.addoption("--qnn-changed-since", metavar="REF", default=None,
                    help="only the exports whose inputs changed since git REF; the others "
                         "are deselected (each with its reason in the qnn-ci summary)")
    group.addoption("--qnn-html", metavar="PATH", default=None,
                    help="write one self-contained HTML report of the qnn-ci items here "
                         "(docs/report.md)")
    group.addoption("--qnn-update-baselines", action="store_true", default=False,
                    help="after the session, write what the numeric stages measured into "
                         "each manifest's qnn-baselines.yaml (docs/baselines.md)")
    parser.addini("qnn_manifests", "manifest file names or globs to collect",
                  type="linelist", default=list(MANIFEST_NAMES))
    parser.addini("qnn_workdir", "work folder", default=DEFAULT_WORKDIR)
    parser.addini("qnn_board", "board for board stages", default="")
    parser.addini("qnn_sdk_root", "QAIRT SDK root", default="")
    parser.addini("qnn_boards_file", "a qnn-boards.yaml declaring boards", default="")
    parser.addini("qnn_no_cache", "re-run every stage", type="bool", default=False)
    parser.addini("qnn_export", "only these exports", type="linelist", default=[])
    parser.addini("qnn_changed_since", "only exports changed since this git revision",
                  default="")


def option(config: pytest.Config, name: str) -> Any:
    value = config.getoption(f"--qnn-{name.replace('_', '-')}")
    return value if value is not None else config.getini(f"qnn_{name}")


def run_options(config: pytest.Config) -> Options:
    from qnn_ci.runner.session import Options

    sdk = option(config, "sdk_root")
    workdir = Path(option(config, "workdir") or DEFAULT_WORKDIR)
    if not workdir.is_absolute():
        workdir = Path(config.rootpath) / workdir
    boards = option(config, "boards_file")
    return Options(workdir=workdir, sdk_root=Path(sdk) if sdk else None,
                   boards_file=Path(boards) if boards else None,
                   board=option(config, "board") or None,
                   use_cache=not option(config, "no_cache"),
                   run_token=config.stash[TOKEN], exports=list(option(config, "export") or []),
                   changed_since=option(config, "changed_since") or None)


