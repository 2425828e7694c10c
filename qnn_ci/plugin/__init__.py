"""The pytest plugin (entry point ``pytest11: qnn_ci``): each export in a
``qnn-ci.yaml`` is a collector, each of its stages an item
(``models/qnn-ci.yaml::text_encoder::fp16_gate``).

A thin shell over the engine (``qnn_ci.engine.pipeline``): an item asks the engine
for its stage's result inside pytest's own runtest protocol; the engine runs what
that needs once (file locks and the cache make that true across pytest-xdist
workers) and the item passes, fails, or skips with the engine's reason. Importing
this module costs pytest's start-up next to nothing: the engine is imported when a
manifest is collected.

- ``options``: command-line options, ini keys, markers, the session's state;
- ``items``: the manifest, export and stage nodes;
- ``reporter``: the summary, job summary, HTML and JUnit additions, exit status.
"""

from __future__ import annotations

import fnmatch
import uuid
from pathlib import Path
from typing import Any

import pytest

from qnn_ci.plugin.items import ExportCollector, ManifestFile, StageItem
from qnn_ci.plugin.options import EXPORTS, MARKERS, PIPELINES, TOKEN, add_options, option
from qnn_ci.plugin.reporter import Reporter


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.stash[PIPELINES] = {}
    config.stash[EXPORTS] = {}
    config.pluginmanager.register(Reporter(config), "qnn_ci_reporter")
    workerinput = getattr(config, "workerinput", None)
    config.stash[TOKEN] = (workerinput or {}).get("qnn_run_token") or uuid.uuid4().hex
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config.stash[TOKEN]), "qnn_ci_xdist")


class _XdistHooks:
    """Hands the run token to every worker, so --qnn-no-cache still runs each
    stage once per pytest run rather than once per worker."""

    def __init__(self, token: str) -> None:
        self.token = token

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["qnn_run_token"] = self.token


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    patterns = parent.config.getini("qnn_manifests")
    if any(fnmatch.fnmatch(file_path.name, p) or fnmatch.fnmatch(str(file_path), p)
           for p in patterns):
        return ManifestFile.from_parent(parent, path=file_path)
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """A --qnn-export name that no collected manifest defines is a usage error."""
    opened = list(session.config.stash.get(PIPELINES, {}).values())
    for o in opened:   # what `reads` may read: the stages selected (-m, -k) per export
        o.pipeline.selected = {}
    for item in session.items:
        if isinstance(item, StageItem):
            item.pipeline.selected.setdefault(item.export.name, set()).add(item.name)  # type: ignore[union-attr]
    names = option(session.config, "export") or []
    if opened and names:
        from qnn_ci.errors import UserError
        from qnn_ci.runner.session import check_selection

        try:
            check_selection(opened, list(names))
        except UserError as exc:
            raise pytest.UsageError(exc.oneline()) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the items of exports --qnn-changed-since found unchanged."""
    keep, drop = [], []
    for item in items:
        parent = item.parent
        (drop if isinstance(parent, ExportCollector) and parent.deselected_why else
         keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


