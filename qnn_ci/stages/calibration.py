"""Stage `calibration`: write `<workdir>/<export>/calibration/input_list.txt` and
one headerless `.raw` per input per sample, in the graph input's exact dtype and
pinned shape, from real data: an input list, a generator, or another export's
real outputs.

This module declares the stage and its cache key; making the samples when it runs
is `qnn_ci.calibration.make_samples`."""

from __future__ import annotations

import ast
import functools
import shutil
from pathlib import Path
from typing import Any

from qnn_ci.calibration.project_modules import import_closure, package_versions
from qnn_ci.engine.cache import digest, file_digest
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Stage, StageContext
from qnn_ci.util.memo import MEMO_DIR


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _digest_or_name(path: Path) -> str:
    try:
        return file_digest(path) if path.is_file() else str(path)
    except OSError:
        return f"unreadable {path}"


def defined_here(file: Path | None, name: str) -> bool:
    """True when the Python file ``file`` binds ``name`` at module level exactly once,
    with an undecorated ``def`` and no ``import *``: the function the module exports
    is then the one in this file (a decorator or any other binding could hand out
    code from elsewhere). False whenever unsure."""
    if file is None or file.suffix != ".py":
        return False
    try:
        source = file.read_bytes()
    except OSError:
        return False
    return _defined_in(source, name)


@functools.lru_cache(maxsize=256)
def _defined_in(source: bytes, name: str) -> bool:
    """``defined_here`` for these bytes (memoised: one parse per content)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    bindings: list[ast.AST] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                bindings.append(node)
            # a walrus in a decorator or default binds here; `global name` in a body
            # rebinds it when called
            bindings += [n for n in ast.walk(node) if n is not node and (
                (isinstance(n, ast.Global) and name in n.names)
                or (isinstance(n, ast.NamedExpr) and _binds(n.target, name)))]
            continue
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return False
        # if / try / with / for / while / match at module level: their bodies too
        for sub in ast.walk(node):
            if isinstance(sub, ast.stmt) and sub is not node and \
                    isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if sub.name == name:
                    bindings.append(sub)
            elif _binds(sub, name):
                bindings.append(sub)
            elif isinstance(sub, ast.ImportFrom) and any(a.name == "*" for a in sub.names):
                return False
    return (len(bindings) == 1 and isinstance(bindings[0], ast.FunctionDef)
            and not bindings[0].decorator_list and bindings[0] in tree.body)


def _binds(node: ast.AST, name: str) -> bool:
    """Whether ``node`` (not a def) may bind ``name`` in its scope."""
    if isinstance(node, ast.Name):
        return node.id == name and not isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.alias):
        return (node.asname or node.name.partition(".")[0]) == name
    if isinstance(node, ast.Global | ast.Nonlocal):
        return name in node.names
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return getattr(node, "name", None) == name
    if isinstance(node, ast.MatchMapping):
        return node.rest == name
    return False


class CalibrationStage(Stage):
    name = "calibration"
    needs = ("static_shapes",)
    peer_needs = ("static_shapes", "calibration")
    settings = ("inputs", "calibration")
    version = 2    # 2: recurrent state inputs are not flagged for zeros or repeats

    def peers(self, export: ExportSpec) -> tuple[str, ...]:
        return (export.calibration.from_export,) if export.calibration.from_export else ()

    def unavailable(self, export: ExportSpec, env: Any) -> str | None:
        c = export.calibration
        if not (c.input_list or c.generator or c.from_export):
            return ("no calibration source: set calibration.input_list, .generator or .from "
                    "in the manifest")
        return None

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        """The generator's project modules (transitively imported) and the versions of
        the packages it imports, the `depends:` files, the raw files of an input list."""
        c = ctx.export.calibration
        base = ctx.export.manifest.parent
        key = f"exports.{ctx.export.name}.calibration"
        fp: dict[str, Any] = {}
        if c.generator:
            module, _, func_name = c.generator.partition(":")
            closure = import_closure(module, base)
            files = dict(closure.files) if closure else {}
            if not (closure and defined_here(files.get(module), func_name)):
                # The function may come from a file outside the closure: import the
                # module to see where (a plain top-level `def` in the module's own
                # file needs no import: that file is in the closure already).
                from qnn_ci.calibration.sources import load_generator

                func = load_generator(c.generator, base, key=f"{key}.generator")
                code = getattr(func, "__code__", None)
                if code is not None and Path(code.co_filename).is_file():
                    files.setdefault("<generator>", Path(code.co_filename).resolve())
            label = closure.label if closure else str
            fp["generator_modules"] = {label(f): file_digest(f) for f in files.values()}
            fp["generator_packages"] = package_versions(
                closure.third_party if closure else (), ctx.env.workdir / MEMO_DIR)
        if c.depends:
            from qnn_ci.calibration.depends import depends_digests

            fp["depends"] = depends_digests(c.depends, base, key=f"{key}.depends")
        if c.input_list:
            # Content of every raw file named by the list (the list's own bytes are in
            # the settings: `input_list` is a path, hashed by content).
            from qnn_ci.calibration.input_list import parse_input_list

            fp["raw"] = [[(n, _digest_or_name(Path(p))) for n, p in line.entries]
                         for line in parse_input_list(c.input_list).lines]
        return fp

    def shared_key(self, ctx: StageContext) -> str:
        """What the samples depend on, by content only (never the export's name): the
        settings and fingerprint the cache key holds, the pinned model and its inputs,
        and a `from:` chain's upstream results."""
        from qnn_ci import __version__
        from qnn_ci.engine.pipeline import content_digest, export_settings

        settings = export_settings(ctx.export, self)
        settings.pop("name", None)
        parts: dict[str, Any] = {
            "qnn_ci": __version__, "stage": self.name, "version": self.version,
            "settings": settings, "fingerprint": self.fingerprint(ctx),
            "upstream": {n: content_digest(r) for n, r in sorted(ctx.upstream.items())},
            "peers": {p: {n: content_digest(r) for n, r in sorted(rs.items())}
                      for p, rs in sorted(ctx.peer_results.items())}}
        if ctx.export.calibration.from_export:
            parts["onnxruntime"] = _version("onnxruntime")
        return digest(parts)

    def run(self, ctx: StageContext) -> StageResult:
        """The samples, computed once per content key across the work folder's exports
        (``qnn_ci.engine.shared_results``) and linked into this export's folder."""
        from qnn_ci.calibration.make_samples import compute, publish, reuse
        from qnn_ci.engine.shared_results import claim

        key = self.shared_key(ctx)
        with claim(ctx.env, self.name, key, ctx.export.name) as entry:
            if entry.hit:
                reused = reuse(ctx, entry)
                if reused is not None:
                    return reused
                shutil.rmtree(ctx.workdir)          # an entry that does not hold up:
                ctx.workdir.mkdir(parents=True)     # computed again, and replaced
            result = compute(ctx)
            if result.status == Status.PASSED:
                publish(entry, result)
            return result
