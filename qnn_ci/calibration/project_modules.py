"""The Python files of the user's project that a calibration generator runs: its
module, the packages above it, and every project module those import, transitively.

Found statically (``ast``), never by running the code: each ``import`` /
``from ... import`` anywhere in a file (also inside functions), and
``importlib.import_module("literal")`` / ``__import__("literal")`` calls, are
resolved the way the import system would resolve them with the manifest's folder
first on ``sys.path``. A module is part of the project when its file lies under the
manifest's folder or under the folder the generator's top-level package was found
in — and not in the standard library, a site-packages/dist-packages folder, or
qnn-ci itself. Third-party modules are not hashed: their distributions' versions
are recorded instead (the standard library is covered by the Python version).
Names built at run time (``import_module(f"...")``) cannot be seen: list those
files under ``calibration.depends``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import logging
import os
import site
import sys
import sysconfig
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

import qnn_ci
from qnn_ci.engine.cache import file_digest

log = logging.getLogger(__name__)

_SKIP_PARTS = ("site-packages", "dist-packages")


@dataclass(frozen=True)
class Closure:
    """The project's own modules a calibration generator imports, and the rest it names."""

    files: dict[str, Path] = field(default_factory=dict)   # module name -> project file
    roots: tuple[Path, ...] = ()                             # the project's folders
    third_party: tuple[str, ...] = ()                        # top-level names imported

    def label(self, path: Path) -> str:
        """``path`` relative to the manifest's folder when inside it, else absolute
        (for cache keys: moving the whole project keeps them)."""
        if self.roots and path.is_relative_to(self.roots[0]):
            return path.relative_to(self.roots[0]).as_posix()
        return str(path)


@functools.cache
def _excluded_dirs() -> tuple[Path, ...]:
    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib",
                                                     "platlib")}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    paths.add(user if isinstance(user, str) else None)
    out = {Path(p).resolve() for p in paths if p}
    out.add(Path(qnn_ci.__file__).resolve().parent)
    return tuple(sorted(out))


def _is_excluded(path: Path) -> bool:
    return any(part in _SKIP_PARTS for part in path.parts) or any(
        path.is_relative_to(d) for d in _excluded_dirs())


def _find(name: str, search: list[str]) -> list[tuple[str, ModuleSpec]]:
    """Specs of ``a``, ``a.b``, ``a.b.c`` for ``name`` = ``a.b.c``, found without
    importing anything; stops at the first part that cannot be found."""
    chain: list[tuple[str, ModuleSpec]] = []
    path: list[str] | None = search
    parts = name.split(".")
    for i in range(len(parts)):
        full = ".".join(parts[:i + 1])
        if path is None:
            break
        try:
            spec = PathFinder.find_spec(full, path)
        except (ImportError, ValueError, OSError):
            spec = None
        if spec is None:
            break
        chain.append((full, spec))
        locations = spec.submodule_search_locations
        path = list(locations) if locations is not None else None
    return chain


def _spec_file(spec: ModuleSpec) -> Path | None:
    if spec.origin and spec.has_location:
        p = Path(spec.origin)
        return p.resolve() if p.is_file() else None
    return None


def _imports(file: Path, module: str) -> list[str]:
    """Absolute module names ``file`` (module ``module``) may import."""
    try:
        source = file.read_bytes()
    except OSError:
        return []    # the import itself reports an unreadable module
    try:
        tree = ast.parse(source, filename=str(file))
    except (SyntaxError, ValueError):
        return []    # the import itself reports a broken module
    except SystemError:
        # CPython 3.11's AST recursion-depth check can misfire in a threaded process
        # (gh-106905); a second parse answers. Never guess an empty import list.
        tree = ast.parse(source, filename=str(file))
    is_pkg = file.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue
                base = ".".join(parts[:len(parts) - (node.level - 1)])
            else:
                base = ""
            target = ".".join(p for p in (base, node.module or "") if p)
            if not target:
                continue
            names.append(target)
            names += [f"{target}.{a.name}" for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else \
                func.id if isinstance(func, ast.Name) else ""
            value = node.args[0].value
            if called in ("import_module", "__import__") and \
                    all(part.isidentifier() for part in value.split(".")):
                names.append(value)
    return names


def _root_of(module: str, file: Path) -> Path:
    """The sys.path folder ``module`` was found in."""
    depth = module.count(".") + (1 if file.name == "__init__.py" else 0)
    return file.parents[depth]


# (module, base folder, sys.path) -> the closure and its files' digests when found.
_CLOSURES: dict[tuple[str, Path, tuple[str, ...]], tuple[Closure | None, dict[Path, str]]] = {}


def import_closure(module: str, base_dir: Path) -> Closure | None:
    """The project files ``module`` runs (None when it cannot be found).

    Memoised for this process while every file of the closure keeps its content (by
    ``file_digest``: a project file edited during a run is parsed again); a module
    that could not be found is looked for again every time."""
    base = base_dir.resolve()
    memo_key = (module, base, tuple(sys.path))
    known = _CLOSURES.get(memo_key)
    if known is not None and known[0] is not None and _digests(known[0]) == known[1]:
        return known[0]
    closure = _import_closure(module, base)
    if closure is not None:
        _CLOSURES[memo_key] = (closure, _digests(closure))
    return closure


def _import_closure(module: str, base: Path) -> Closure | None:
    search = [str(base)] + [p for p in sys.path if p != str(base)]
    chain = _find(module, search)
    if len(chain) != module.count(".") + 1:
        return None
    own = _spec_file(chain[-1][1])
    roots = [base]
    if own is not None:
        root = _root_of(module, own)
        if root not in roots and not _is_excluded(root):
            roots.append(root)
    root_tuple = tuple(roots)

    def in_project(p: Path) -> bool:
        return any(p.is_relative_to(r) for r in root_tuple) and not _is_excluded(p)

    files: dict[str, Path] = {}
    third: set[str] = set()
    queue = [module]
    seen: set[str] = set()
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        for full, spec in _find(name, search):
            file = _spec_file(spec)
            if file is None or not in_project(file):
                top = full.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in sys.builtin_module_names:
                    third.add(top)
                continue
            if full not in files:
                files[full] = file
                if file.suffix == ".py":
                    queue += [n for n in _imports(file, full) if n not in seen]
    return Closure(dict(sorted(files.items())), root_tuple, tuple(sorted(third)))


@functools.cache
def _distributions() -> dict[str, list[str]]:
    import importlib.metadata  # ~35 ms of imports: only when versions are read

    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:   # broken metadata of some installed package: no versions
        log.debug("cannot list installed distributions", exc_info=True)
        return {}


@functools.cache
def _version(dist: str) -> str | None:
    """A distribution's version, read once per process."""
    import importlib.metadata  # ~35 ms of imports: only when versions are read

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _dists_of(top: str) -> tuple[str, ...]:
    """The distributions providing top-level module ``top``. The usual case — a
    distribution named like its module that says so in ``top_level.txt`` — costs one
    lookup; then every distribution's ``top_level.txt`` is read (a few ms); only a
    module no such file names pays for listing every installed file (~60-80 ms)."""
    import importlib.metadata  # ~35 ms of imports: only when versions are read

    for name in {top, top.replace("_", "-")}:
        try:
            dist = importlib.metadata.distribution(name)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
        try:
            declared = (dist.read_text("top_level.txt") or "").split()
        except OSError:
            declared = []
        if not declared:    # no top_level.txt (meson/flit wheels): the installed files
            here = Path(str(dist.locate_file(top)))
            if here.is_dir() or here.with_suffix(".py").is_file():
                declared = [top]    # the module sits beside the metadata (one stat)
            else:
                declared = list({str(f).split("/", 1)[0].removesuffix(".py")
                                 for f in (dist.files or [])})
        if top in declared:
            return (dist.metadata["Name"] or name,)
    declared_by = _top_level_index().get(top)
    if declared_by:
        return tuple(d.metadata["Name"] for d in declared_by if d.metadata["Name"])
    return tuple(_distributions().get(top, []))


@functools.cache
def _top_level_index() -> dict[str, list[importlib.metadata.Distribution]]:
    """Top-level module -> the distributions whose ``top_level.txt`` names it (a few
    ms; distributions without that file are left to ``_distributions``)."""
    import importlib.metadata  # ~35 ms of imports: only when versions are read

    index: dict[str, list[importlib.metadata.Distribution]] = {}
    try:
        for dist in importlib.metadata.distributions():
            try:
                text = dist.read_text("top_level.txt") or ""
            except OSError:
                continue
            for top in text.split():
                index.setdefault(top, []).append(dist)
    except Exception:   # broken metadata of some installed package
        log.debug("cannot read top_level.txt files", exc_info=True)
    return index


def _installed_state() -> str:
    """What changes when a package is installed, removed or upgraded: the
    site-packages folders on ``sys.path`` and their modification times (pip adds and
    removes ``*.dist-info`` folders there)."""
    parts = [sys.version]
    for entry in sys.path:
        if not any(k in entry for k in _SKIP_PARTS):
            continue              # project folders (the cwd) change on every run
        try:
            parts.append(f"{entry}:{os.stat(entry or '.').st_mtime_ns}")
        except OSError:
            parts.append(f"{entry}:-")
    return "\n".join(parts)


def package_versions(top_level: tuple[str, ...], memo_root: Path | None = None
                     ) -> dict[str, str]:
    """``{distribution: version}`` for the third-party top-level modules (installed
    versions are read once per process; with ``memo_root``, remembered on disk until
    a package is installed or removed)."""
    from qnn_ci.util.memo import Memo, memo_key

    key = memo_key("package_versions", "1", _installed_state(), "\n".join(sorted(top_level)))
    if key in _VERSIONS:           # this process read them under the same installed state
        return dict(_VERSIONS[key])
    memo = Memo(memo_root)
    known = memo.get("package_versions", key) if memo_root is not None else None
    if isinstance(known, dict) and all(isinstance(v, str) for v in known.values()):
        found = dict(known)
    else:
        found = _package_versions(top_level)
        if memo_root is not None:
            memo.put("package_versions", key, found)
    _VERSIONS[key] = found
    return dict(found)


# package_versions' answers in this process, by the same key as on disk.
_VERSIONS: dict[str, dict[str, str]] = {}


def _package_versions(top_level: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for top in top_level:
        for dist in _dists_of(top):
            version = _version(dist)
            if version is not None:
                out[dist] = version
    out["python"] = ".".join(map(str, sys.version_info[:3]))
    return dict(sorted(out.items()))


# Digest of each project file when this process last imported it for a generator.
_IMPORTED: dict[Path, str] = {}


def _digests(closure: Closure) -> dict[Path, str]:
    out = {}
    for file in closure.files.values():
        try:
            out[file] = file_digest(file)
        except OSError:
            out[file] = "unreadable"
    return out


def refresh(closure: Closure) -> None:
    """Before importing a generator: when a project file it runs changed since this
    process imported it (or was imported by someone else), forget every loaded module
    of the closure so the import reads them all from disk again (a module that did
    ``from helper import SEED`` holds the old value otherwise)."""
    now = _digests(closure)
    loaded = [n for n in closure.files if n in sys.modules]
    if any(_IMPORTED.get(closure.files[n]) != now[closure.files[n]]
           or _module_file(n) != closure.files[n] for n in loaded):
        for name in loaded:
            del sys.modules[name]
        log.debug("re-importing changed project modules: %s", ", ".join(loaded))
    importlib.invalidate_caches()


def _module_file(name: str) -> Path | None:
    file = getattr(sys.modules.get(name), "__file__", None)
    try:
        return Path(file).resolve() if file else None
    except (OSError, TypeError, ValueError):
        return None


def remember(closure: Closure) -> None:
    """After importing a generator: the digests its project files were imported at."""
    _IMPORTED.update(_digests(closure))
