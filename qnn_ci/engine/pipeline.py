"""The engine: runs an export's stages in order, once, with caching and locks.

Knows nothing about pytest. The pytest plugin and `qnn-ci run` both ask it for
``result(export, stage)``; it runs what that needs (upstream stages of the same
export, and peer exports' stages for calibration ``from:`` chains), reuses a
cached result whose key still matches, and turns a failed or skipped upstream
into a "blocked by <export>::<stage>" skip so the root cause stays the one failure.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnn_ci import __version__
from qnn_ci.engine.cache import ResultStore, digest, file_digest, jsonable, plain_digest
from qnn_ci.engine.relocate import Roots, project_root, tokenize
from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.util.workfolder import open_new, refuse_links

log = logging.getLogger(__name__)

# A stage sets ``result.data[NO_CACHE] = True`` on a failure that may not repeat (a
# tool timed out or was killed by a signal, a crash): it is never reused.
NO_CACHE = "no_cache"

# What downstream stages are keyed on: the content of a passed result's artefacts,
# so an upstream re-run that produces the same files re-runs nothing after it.
CONTENT = "content_digest"

_NOT_SETTINGS = ("line", "raw", "manifest")


def _artefact_content(path: Path) -> Any:
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        return {str(p.relative_to(path)): file_digest(p)
                for p in sorted(path.rglob("*")) if p.is_file()}
    return None


def content_digest(result: StageResult, roots: Roots | None = None) -> str:
    """A digest of what a passed stage hands downstream: its artefacts' bytes (logs and
    reports, which carry times, left out) and its data, with the work folder and the
    project named by token (``qnn_ci.engine.relocate``): the same content at another path
    has the same digest. A result that carries its digest already keeps it."""
    if isinstance(result.data.get(CONTENT), str):
        return str(result.data[CONTENT])
    files = {k: _artefact_content(Path(v)) for k, v in sorted(result.artefacts.items())
             if not (k == "report" or k.endswith("log"))}
    data = _stable({k: v for k, v in result.data.items() if k != CONTENT})
    return digest({"artefacts": files,
                   "data": tokenize(data, roots) if roots is not None else data})


def _stable(value: Any) -> Any:
    """``value`` without timings, which differ on every run."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items()
                if not (k.endswith("_s") or "duration" in k or "time" in k)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _identity(result: StageResult, key: str | None) -> str | None:
    return result.data.get(CONTENT) or key   # where it is written is not what it asks


def export_settings(export: ExportSpec, stage: Stage) -> dict[str, Any]:
    """The part of an export a stage's result depends on (for its cache key): editing
    one setting re-runs only the stages that read it, and moving an export within
    the manifest re-runs nothing."""
    fields = stage.settings or tuple(f.name for f in dataclasses.fields(export)
                                     if f.name not in _NOT_SETTINGS)
    return {"name": export.name} | {f: getattr(export, f) for f in fields}


class _WouldRun(Exception):
    """lookup(): the answer needs a stage to run."""


@dataclass
class Event:
    """A stage result as it becomes known (for a shell's progress output)."""

    export: str
    stage: str
    result: StageResult


class Pipeline:
    def __init__(self, exports: list[ExportSpec], env: Environment, *,
                 stages: dict[str, Stage],
                 on_result: Callable[[Event], None] | None = None,
                 on_start: Callable[[str, str], None] | None = None) -> None:
        self.exports = {e.name: e for e in exports}
        self.env = env
        self.stages = stages     # name -> stage, in pipeline order (qnn_ci.stages.registry)
        self.on_result = on_result
        self.on_start = on_start     # (export, stage) when a stage really starts running
        self.store = ResultStore()
        self._results: dict[tuple[str, str], StageResult] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._roots: dict[Path, Roots] = {}
        self._planned: dict[str, frozenset[str]] = {}   # export -> its stages
        # the shell's selection (pytest -m / -k): export -> stages selected to run; a
        # stage's `reads` are read only when selected (None: all are)
        self.selected: dict[str, set[str]] | None = None
        self._lookup_only = False    # lookup(): stop where a stage would run

    def roots(self, export: ExportSpec) -> Roots:
        """Where this run's work folder and the export's project are: stored results
        and cache keys name them by token (a work folder that travels)."""
        folder = export.manifest.parent
        known = self._roots.get(folder)
        if known is None:
            known = self._roots[folder] = Roots.of(self.env.workdir,
                                                   project_root(folder))
        return known

    # -- planning ---------------------------------------------------------------
    def plan(self, export: ExportSpec) -> list[Stage]:
        return [s for s in self.stages.values() if s.applies(export)]

    def stage_names(self, export: ExportSpec) -> list[str]:
        return [s.name for s in self.plan(export)]

    def _planned_names(self, export: ExportSpec) -> frozenset[str]:
        """``stage_names`` as a set, worked out once per export."""
        known = self._planned.get(export.name)
        if known is None:
            known = self._planned[export.name] = frozenset(self.stage_names(export))
        return known

    # -- running ----------------------------------------------------------------
    def run_export(self, name: str, only: set[str] | None = None) -> list[StageResult]:
        export = self.exports[name]
        return [self.result(name, s.name) for s in self.plan(export)
                if only is None or s.name in only]

    def lookup(self, export_name: str, stage_name: str) -> StageResult | None:
        """The stage's result if it is known without running a stage (this run's,
        the cache's, or a skip/block that follows from them); else None, with nothing
        run. A shell reports such a result without setting up for real work."""
        self._lookup_only = True
        try:
            return self.result(export_name, stage_name)
        except _WouldRun:
            return None
        finally:
            self._lookup_only = False

    def result(self, export_name: str, stage_name: str) -> StageResult:
        key = (export_name, stage_name)
        if key not in self._results:
            res = self._compute(export_name, stage_name)
            self._results[key] = res
            if self.on_result:
                self.on_result(Event(export_name, stage_name, res))
        return self._results[key]

    def _blocked(self, stage: str, by: str, upstream: StageResult) -> StageResult:
        root = upstream.data.get("blocked_by") or by
        reason = upstream.data.get("reason") or upstream.summary
        if upstream.status == Status.SKIPPED and "blocked_by" not in upstream.data:
            text = f"blocked by {by} (skipped: {reason})"
        elif "blocked_by" in upstream.data:
            text = f"blocked by {root}"
        else:
            text = f"blocked by {by}"
        return StageResult(stage, Status.SKIPPED, text,
                           data={"blocked_by": root, "reason": text})

    def _compute(self, export_name: str, stage_name: str) -> StageResult:
        export = self.exports[export_name]
        stage = self.stages[stage_name]
        reason = stage.unavailable(export, self.env)
        if reason:
            return StageResult(stage_name, Status.SKIPPED, reason, data={"reason": reason})
        planned = self._planned_names(export)
        upstream: dict[str, StageResult] = {}
        for need in stage.needs_for(export, self.env):
            if need not in self.stages or need not in planned:
                continue
            res = self.result(export_name, need)
            if res.status != Status.PASSED:
                return self._blocked(stage_name, f"{export_name}::{need}", res)
            upstream[need] = res
        for gate in stage.gates:   # must not have failed; not an input (not in the key)
            if gate not in self.stages or gate not in planned:
                continue
            res = self.result(export_name, gate)
            if res.status in (Status.FAILED, Status.ERROR):
                return self._blocked(stage_name, f"{export_name}::{gate}", res)
        chosen = None if self.selected is None else self.selected.get(export_name, set())
        for name in stage.reads:   # whatever their status: read, never blocking
            if name in self.stages and name in planned and (chosen is None or name in chosen):
                upstream[name] = self.result(export_name, name)
        peer_results: dict[str, dict[str, StageResult]] = {}
        for peer in stage.peers(export):
            for need in stage.peer_needs:
                if need not in self.stages:
                    continue
                res = self.result(peer, need)
                if res.status != Status.PASSED:
                    return self._blocked(stage_name, f"{peer}::{need}", res)
                peer_results.setdefault(peer, {})[need] = res
        stage_dir = self.env.export_dir(export_name) / stage_name
        ctx = StageContext(export=export, env=self.env, workdir=stage_dir, upstream=upstream,
                           all_exports=self.exports, peer_results=peer_results)
        settled = stage.settled(ctx)
        if settled is not None:
            return settled
        lock_path = stage_dir.parent / f".{stage_name}.lock"
        try:   # before anything there is read or written (qnn_ci.util.workfolder)
            refuse_links(self.env.workdir, stage_dir / self.store.FILE, lock_path)
        except UserError as exc:
            return self._error(stage_name, exc, export)
        started = time.monotonic()
        try:
            fingerprint = stage.fingerprint(ctx)
        except UserError as exc:
            return self._error(stage_name, exc, export)
        except Exception as exc:  # a bug in a stage: contained, never cached
            if self._lookup_only:   # reported where the shell shows a stage's own work
                raise _WouldRun from None
            stage_dir.mkdir(parents=True, exist_ok=True)
            return self._crash(stage, ctx, exc)
        roots = self.roots(export)
        cache_key = plain_digest(jsonable({
            "qnn_ci": __version__, "stage": stage_name, "version": stage.version,
            "export": export_settings(export, stage), "fingerprint": fingerprint,
            "upstream": {n: _identity(r, self._keys.get((export_name, n)))
                         for n, r in upstream.items()},
            "peers": {p: {n: _identity(res, self._keys.get((p, n))) for n, res in r.items()}
                      for p, r in peer_results.items()},
        }, roots))
        self._keys[(export_name, stage_name)] = cache_key
        if self.env.use_cache:
            # A cached result needs no lock: result.json is replaced atomically, and a
            # run holding the lock with this key would have found it too.
            cached = self.store.load(stage_dir, cache_key, this_run=self.env.run_token,
                                     roots=roots)
            if cached is not None:
                log.info("%s::%s: cached (%s)", export_name, stage_name, cached.status)
                return _timed_as_cached(cached, started)
        if self._lookup_only:
            raise _WouldRun
        stage_dir.parent.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock  # only when a stage runs: a cached run needs none

        with FileLock(str(lock_path)):
            if self.env.use_cache or self.env.run_token:
                cached = self.store.load(
                    stage_dir, cache_key,
                    run_token=None if self.env.use_cache else self.env.run_token,
                    this_run=self.env.run_token, roots=roots)
                if cached is not None:
                    log.info("%s::%s: cached (%s)", export_name, stage_name, cached.status)
                    return _timed_as_cached(cached, started)
            if stage_dir.exists():
                shutil.rmtree(stage_dir)
            stage_dir.mkdir(parents=True)
            log.info("%s::%s: running", export_name, stage_name)
            if self.on_start:
                self.on_start(export_name, stage_name)
            start = time.monotonic()
            result = self._run_stage(stage, ctx)
            if result.status == Status.PASSED:
                result.data[CONTENT] = content_digest(result, roots)
            result.duration_s = round(time.monotonic() - start, 3)
            result.properties.setdefault("duration_s", result.duration_s)
            if result.status == Status.PASSED or (
                    result.status == Status.FAILED and stage.cache_failures
                    and not result.data.get(NO_CACHE)) or (
                    result.status == Status.SKIPPED and stage.cache_skips
                    and not result.data.get(NO_CACHE)):
                self.store.save(stage_dir, cache_key, result, run_token=self.env.run_token,
                                roots=roots)
            return result

    def _error(self, stage_name: str, exc: UserError, export: ExportSpec) -> StageResult:
        if exc.file is None:  # say where: the export's entry in its manifest
            exc = UserError(exc.message, file=export.manifest, line=export.line,
                            key=exc.key or f"exports.{export.name}")
        return StageResult(stage_name, Status.ERROR, exc.oneline(),
                           findings=[Finding("input", exc.oneline())])

    def _crash(self, stage: Stage, ctx: StageContext, exc: Exception) -> StageResult:
        """A bug in a stage must not take down the run; the result is not cached. It
        fails the stage (what needs it is blocked) and marks the result as an internal
        error (``qnn_ci.engine.internal_error``): `qnn-ci run` exits 3 for it, pytest too."""
        from qnn_ci.engine.internal_error import INTERNAL_ERROR, describe

        crash_log = ctx.workdir / "crash.log"
        try:   # the folder is not cleared when fingerprint() crashes: no link followed
            with open_new(crash_log) as fh:
                fh.write("".join(traceback.format_exception(exc)).encode("utf-8"))
            where = f"traceback in {crash_log}"
        except OSError as write_exc:
            where = f"traceback not saved: {write_exc}"
        msg = f"internal error in stage {stage.name}: {describe(exc)} ({where}; please report it)"
        log.error("%s", msg)
        return StageResult(stage.name, Status.FAILED, msg,
                           findings=[Finding("internal", msg, Severity.ERROR)],
                           artefacts={"crash_log": str(crash_log)},
                           data={NO_CACHE: True, INTERNAL_ERROR: str(crash_log)})

    def _run_stage(self, stage: Stage, ctx: StageContext) -> StageResult:
        try:
            result = stage.run(ctx)
        except UserError as exc:
            return self._error(stage.name, exc, ctx.export)
        except Exception as exc:
            return self._crash(stage, ctx, exc)
        if not isinstance(result, StageResult):
            raise TypeError(f"stage {stage.name} returned {type(result).__name__}")
        return result


def _timed_as_cached(result: StageResult, started: float) -> StageResult:
    """A result read from the cache takes this run's time (the read); the run that
    made it is kept as the property ``original_duration_s``."""
    if result.cached:
        result.properties["original_duration_s"] = result.duration_s
        result.duration_s = round(time.monotonic() - started, 3)
    return result


def summarize(results: dict[str, list[StageResult]]) -> dict[str, int]:
    counts = {s.value: 0 for s in Status}
    for rs in results.values():
        for r in rs:
            counts[r.status.value] += 1
    return counts


def exit_status(results: dict[str, list[StageResult]]) -> int:
    statuses = [r.status for rs in results.values() for r in rs]
    if Status.ERROR in statuses:
        return 2
    if Status.FAILED in statuses:
        return 1
    return 0


def jsonable_results(results: dict[str, list[StageResult]]) -> dict[str, Any]:
    return {e: [r.to_dict() for r in rs] for e, rs in results.items()}
