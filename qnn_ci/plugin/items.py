"""The collected nodes: a manifest file, an export (a collector), a stage (an item),
and the one-line items a manifest that does not load or an internal error makes.

A stage item runs pytest's own protocol: a skip known without running anything is
raised at set-up, every other result is asked of the engine in ``runtest`` (a cached
one is read there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from qnn_ci.plugin.options import EXPORTS, PIPELINES, run_options

if TYPE_CHECKING:   # the engine is imported when a manifest is collected, not before
    from qnn_ci.engine.pipeline import Pipeline
    from qnn_ci.engine.results import StageResult
    from qnn_ci.engine.spec import ExportSpec
    from qnn_ci.errors import UserError

class ManifestFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from qnn_ci.engine.internal_error import write_log
        from qnn_ci.errors import UserError
        from qnn_ci.runner.session import check_unique_exports, open_pipeline

        cache = self.config.stash[PIPELINES]
        try:
            if self.path not in cache:
                opened = open_pipeline(_shown(self.path), run_options(self.config))
                check_unique_exports(self.config.stash[EXPORTS], opened.manifest)
                cache[self.path] = opened
        except UserError as exc:
            yield ManifestError.from_parent(self, name="manifest", error=exc)
            return
        except Exception as exc:  # a bug in qnn-ci: one failing item, the other manifests run
            yield InternalErrorItem.from_parent(self, name="internal-error", error=exc,
                                                log=write_log(exc, self._workdir()))
            return
        opened = cache[self.path]
        for name in opened.selected:
            yield ExportCollector.from_parent(self, name=name,
                                              export=opened.pipeline.exports[name],
                                              pipeline=opened.pipeline)
        # Unchanged exports (--qnn-changed-since) are collected, then deselected, so
        # pytest counts them as deselected like a -k or -m deselection.
        for name, why in opened.deselected.items():
            col = ExportCollector.from_parent(self, name=name,
                                              export=opened.pipeline.exports[name],
                                              pipeline=opened.pipeline)
            col.deselected_why = why
            yield col

    def _workdir(self) -> Path | None:
        try:
            return run_options(self.config).workdir
        except Exception:
            return None


def _shown(path: Path) -> Path:
    """``path`` relative to the current folder when below it: a manifest's errors
    name it as the user would type it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


class _OneLineItem(pytest.Item):
    """A failing item whose whole report is one line, shown at a line of the manifest."""

    text: str
    at_line: int
    kind: str

    def _one_line(self, text: str, at_line: int, kind: str,
                  extra: list[tuple[str, Any]]) -> None:
        from qnn_ci.engine.results import Status

        self.text, self.at_line, self.kind = text, at_line, kind
        self.add_marker("qnn")
        self.user_properties += [
            ("qnn.export", "(manifest)"), ("qnn.stage", kind),
            ("qnn.status", Status.ERROR.value), ("qnn.summary", text),
            ("qnn.manifest", str(self.path)), ("qnn.line", at_line), *extra]

    def runtest(self) -> None:
        raise QnnFailure(self.text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, QnnFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.at_line - 1, self.kind


class ManifestError(_OneLineItem):
    """A manifest that does not load is one failing item with the one-line reason."""

    def __init__(self, *, error: UserError, **kw: Any) -> None:
        super().__init__(**kw)
        self.error = error
        self._one_line(error.oneline(), error.line or 1, "manifest",
                       [("qnn.finding", f"[manifest] {error.oneline()}")])


class InternalErrorItem(_OneLineItem):
    """qnn-ci crashed on a manifest (a bug, not bad input): one failing item with a
    one-line pointer to the traceback's log file; the session exits 3."""

    def __init__(self, *, error: Exception, log: Path | None, **kw: Any) -> None:
        from qnn_ci.engine.internal_error import oneline

        super().__init__(**kw)
        self.line = oneline("qnn-ci", error, log)
        self._one_line(self.line, 1, "internal-error",
                       [("qnn.internal_error", str(log or "")),
                        ("qnn.finding", f"[internal] {self.line}")])


class ExportCollector(pytest.Collector):
    def __init__(self, *, export: ExportSpec, pipeline: Pipeline, **kw: Any) -> None:
        super().__init__(**kw)
        self.export = export
        self.pipeline = pipeline
        self.deselected_why = ""

    def collect(self) -> Iterator[pytest.Item]:
        # `qnn` marks the export (its items inherit it, for -m and -k alike); the SDK,
        # board and simulator markers mark the items that need them
        self.add_marker("qnn")
        marks: dict[str, pytest.MarkDecorator] = {}   # one per marker name, not per item
        for stage in self.pipeline.plan(self.export):
            item = StageItem.from_parent(self, name=stage.name, export=self.export,
                                         pipeline=self.pipeline)
            if stage.marker:
                if stage.marker not in marks:
                    marks[stage.marker] = getattr(pytest.mark, stage.marker)
                item.add_marker(marks[stage.marker])
            yield item

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.export.line - 1, self.export.name


class QnnFailure(Exception):
    """A stage failed: the message is the whole report."""


class StageItem(pytest.Item):
    def __init__(self, *, export: ExportSpec, pipeline: Pipeline, **kw: Any) -> None:
        super().__init__(**kw)
        self.export = export
        self.pipeline = pipeline

    def setup(self) -> None:
        """A skip known without running anything (the stage is not available here, an
        upstream stage blocks it, the cache holds a skip) is reported at set-up, as
        pytest reports a skip mark: the stage never runs, so there is no call phase."""
        from qnn_ci.engine.results import Status

        result = self.pipeline.lookup(self.export.name, self.name)
        if result is not None and result.status == Status.SKIPPED:
            self._record(result)
            raise pytest.skip.Exception(result.summary, _use_item_location=True)

    def runtest(self) -> None:
        from qnn_ci.engine.results import Status

        result = self.pipeline.result(self.export.name, self.name)
        self._record(result)
        if result.status == Status.SKIPPED:
            # Reported at the item's location (the manifest line), not this file.
            raise pytest.skip.Exception(result.summary, _use_item_location=True)
        if result.status in (Status.FAILED, Status.ERROR):
            raise QnnFailure(result.failure_text() or result.summary)

    def _record(self, r: StageResult) -> None:
        self.user_properties.extend(_item_properties()(self.export, self.name, r))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, QnnFailure):
            try:
                where = self.path.relative_to(self.config.rootpath)
            except ValueError:
                where = self.path
            return (f"{where}:{self.export.line}: {self.export.name}::{self.name} failed\n"
                    f"{excinfo.value}")
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.export.line - 1, f"{self.export.name}::{self.name}"


@functools.cache
def _item_properties() -> Callable[[ExportSpec, str, StageResult], list[tuple[str, Any]]]:
    """``qnn_ci.plugin.properties.item_properties``, imported once (not per item)."""
    from qnn_ci.plugin.properties import item_properties

    return item_properties


