"""Changed-only selection: which exports of a manifest have an input that differs
from git REF (``qnn-ci run --changed-since REF``, ``pytest --qnn-changed-since REF``).

An export's inputs, each a reason when it changed:
- the model file and its external data files ("model changed");
- its manifest entry including the ``defaults:`` it inherits, compared as the
  merged mapping at REF and now ("quantization changed",
  "defaults.quantization changed", "new export");
- calibration sources: the input list and every ``.raw`` file it names, the
  generator's module and the project modules it imports (transitively), the
  ``calibration.depends`` files ("calibration input list changed", "generator
  module gens.py changed", ...);
- the AIMET encodings file, the ``original:`` model;
- the board it names: its entry in the manifest's ``boards:`` or in
  ``qnn-boards.yaml``;
- its entries in the baselines file (``qnn-baselines.yaml``: the regression check
  compares with them);
- qnn-ci itself: its source when the repository holds it, or a dependency file
  (pyproject.toml, requirements*.txt, lock files) whose change mentions qnn-ci.
``from:`` chains: an export whose calibration comes from a selected export is
selected too ("upstream export 'det' selected").

``qnn-ci run --changed-since REF`` given no manifest runs those of the git work
tree (``work_tree_manifests``: every ``qnn-ci.yaml`` / ``qnn-ci.yml`` git tracks or
would, in any folder).

What changed is read from git: ``git diff --name-only REF`` (the working tree
against REF: committed, staged and unstaged changes) plus untracked files. Files
outside the repository (a model inside an installed package) have no history:
they never select an export; the package's version is the thing to pin.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.errors import UserError

log = logging.getLogger(__name__)

DEPENDENCY_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "Pipfile", "Pipfile.lock",
                    "poetry.lock", "uv.lock", "pdm.lock")
_GIT_TIMEOUT_S = 120


@dataclass
class Selection:
    """The exports changed since a git ref, and why each was selected or deselected."""

    ref: str
    commit: str
    selected: dict[str, list[str]] = field(default_factory=dict)   # export -> reasons
    deselected: dict[str, str] = field(default_factory=dict)       # export -> reason

    def lines(self) -> list[str]:
        out = [f"changed since {self.ref} ({self.commit[:12]}): {len(self.selected)} "
               f"export(s) selected, {len(self.deselected)} deselected"]
        out += [f"  selected   {name}: {'; '.join(why)}" for name, why in
                self.selected.items()]
        out += [f"  deselected {name}: {why}" for name, why in self.deselected.items()]
        return out


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              timeout=_GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UserError("--changed-since needs git on PATH") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git {args[0]} took over {_GIT_TIMEOUT_S} s in {repo}") from None
    if done.returncode != 0:
        raise _GitFailed((done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
                         and done.stderr.decode("utf-8", "replace").strip().splitlines()[-1])
                         or f"git {args[0]} failed")
    return done.stdout.decode("utf-8", "surrogateescape")


class _GitFailed(Exception):
    pass


def repository_of(path: Path) -> Path:
    try:
        return Path(_git(path, "rev-parse", "--show-toplevel").strip())
    except _GitFailed:
        raise UserError("--changed-since needs the manifest to be in a git repository",
                        file=path) from None


def work_tree_manifests(start: Path) -> list[Path]:
    """The manifests of the git work tree holding ``start`` (``qnn-ci run
    --changed-since REF`` given no manifest): every file named ``qnn-ci.yaml`` or
    ``qnn-ci.yml`` under the repository's root, tracked or untracked but not ignored
    (git's own view: a virtualenv or work folder in ``.gitignore`` is not searched),
    sorted by path. None found, or ``start`` in no work tree: one ``UserError`` line
    saying what to do."""
    from qnn_ci.manifest.defaults import MANIFEST_NAMES

    names = " or ".join(MANIFEST_NAMES)
    try:
        repo = Path(_git(start, "rev-parse", "--show-toplevel").strip())
    except _GitFailed:
        raise UserError(f"--changed-since with no manifest given looks for the manifests "
                        f"({names}) of the git work tree, and {start} is in none: run it "
                        "inside the repository or give the manifest (qnn-ci run "
                        "path/to/qnn-ci.yaml --changed-since REF)") from None
    out = _git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
               *(f":(glob)**/{n}" for n in MANIFEST_NAMES))
    found = sorted({repo / p for p in out.split("\0")
                    if p and Path(p).name in MANIFEST_NAMES and (repo / p).is_file()})
    if not found:
        raise UserError(f"--changed-since with no manifest given: no file named {names} in "
                        f"the git work tree {repo}; name the manifest qnn-ci.yaml (any "
                        "folder of the repository) or give its path (qnn-ci run "
                        "path/to/manifest.yaml --changed-since REF)")
    return found


def resolve_ref(repo: Path, ref: str) -> str:
    if not ref or ref.startswith("-"):
        raise UserError(f"--changed-since {ref!r}: not a git revision")
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
                    f"{ref}^{{commit}}").strip()
    except _GitFailed:
        raise UserError(f"--changed-since {ref}: no such commit in {repo} (a shallow "
                        "clone may lack it: git fetch origin the base branch, or fetch "
                        "with more depth)") from None


def changed_paths(repo: Path, commit: str, workdir: Path | None = None) -> set[Path]:
    """Files that differ between ``commit`` and the working tree, plus untracked ones
    (those in qnn-ci's own ``workdir`` aside: its thousands of results are no input)."""
    out = _git(repo, "diff", "--name-only", "--no-renames", "-z", commit, "--")
    skip: list[str] = []
    if workdir is not None and workdir.resolve().is_relative_to(repo) \
            and workdir.resolve() != repo:
        skip = [".", f":(exclude){workdir.resolve().relative_to(repo).as_posix()}"]
    out += _git(repo, "ls-files", "--others", "--exclude-standard", "-z", "--", *skip)
    return {_real(repo / p) for p in out.split("\0") if p}


def _real(path: Path) -> Path:
    """git names files under its (real) top folder and never below a symlinked folder:
    only a path that is itself a link needs resolving."""
    return path.resolve() if path.is_symlink() else path


def _show(repo: Path, commit: str, path: Path) -> str | None:
    try:
        rel = path.resolve().relative_to(repo).as_posix()
    except ValueError:
        return None
    try:
        return _git(repo, "show", f"{commit}:{rel}")
    except _GitFailed:
        return None


def _entries(text: str | None, where: Path
             ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], Any] | None:
    """(defaults, export name -> own entry, boards) of a manifest's text, read with
    the manifest loader's limits; ``({}, {}, None)`` when there is no text, None when it
    cannot be read."""
    if text is None:
        return {}, {}, None
    from qnn_ci.manifest.yaml_lines import load_yaml_text

    try:
        data, _lines = load_yaml_text(text, where)
    except UserError:
        return None
    if not isinstance(data, dict):
        return None
    exports = data.get("exports") if isinstance(data.get("exports"), list) else []
    own = {e["name"]: e for e in exports if isinstance(e, dict) and isinstance(
        e.get("name"), str)}
    defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}
    return defaults, own, data.get("boards")


def _entry_reasons(name: str, now_own: dict[str, Any], now_defaults: dict[str, Any],
                   old_own: dict[str, Any] | None, old_defaults: dict[str, Any]) -> list[str]:
    if old_own is None:
        return ["new export"]
    reasons = []
    for key in sorted(set(now_own) | set(old_own) | set(now_defaults) | set(old_defaults)):
        if key == "name":
            continue
        if now_own.get(key) != old_own.get(key):
            reasons.append(f"{key} changed")
        elif key not in now_own and now_defaults.get(key) != old_defaults.get(key):
            reasons.append(f"defaults.{key} changed")
    return reasons


def _input_list_files(path: Path) -> list[Path]:
    from qnn_ci.calibration.input_list import parse_input_list

    files = [path]
    try:
        parsed = parse_input_list(path)
    except UserError:
        return files
    for line in parsed.lines:
        for token in getattr(line, "entries", []) or []:
            raw = token[1] if isinstance(token, tuple) else token
            p = Path(str(raw))
            files.append(p if p.is_absolute() else path.parent / p)
    return files


def _file_reasons(export: ExportSpec, changed: set[Path], memo_root: Path | None = None
                  ) -> list[str]:
    base = export.manifest.parent
    reasons: list[str] = []

    def hit(paths: list[Path], why: str) -> None:
        if any(p.resolve() in changed for p in paths):
            reasons.append(why)

    model_files = [export.model]
    from qnn_ci.model.signature import signature

    try:
        sig = signature(export.model, memo_root)
        model_files += [export.model.parent / n for n in sig.external_data]
    except Exception:     # an unreadable model: its file is still tracked
        log.debug("no signature for %s", export.model, exc_info=True)
    hit(model_files, "model changed")
    cal = export.calibration
    if cal.input_list is not None:
        hit(_input_list_files(cal.input_list), "calibration input list changed")
    if cal.generator:
        from qnn_ci.calibration.project_modules import import_closure

        closure = import_closure(cal.generator.partition(":")[0], base)
        for mod, file in (closure.files.items() if closure else ()):
            if file.resolve() in changed:
                reasons.append(f"generator module {mod} changed")
    if cal.depends:
        from qnn_ci.calibration.depends import _matches

        files = [f for pattern in cal.depends for f in _matches(pattern, base)]
        hit(files, "calibration.depends file changed")
    if export.quantization.overrides is not None:
        hit([export.quantization.overrides], "encodings file changed")
    if export.original is not None:
        hit([export.original.model], "original model changed")
    return reasons


def _baseline_entries(text: str | None, where: Path) -> dict[str, Any] | None:
    """export -> its entries (as plain values) in a baselines file's text; None when it
    cannot be read, {} when there is none."""
    if text is None:
        return {}
    from qnn_ci.manifest.yaml_lines import load_yaml_text
    from qnn_ci.nightly.baselines import parse

    try:
        data, lines = load_yaml_text(text, where)
        parsed = parse(data, lines, where)
    except UserError:
        return None
    out: dict[str, Any] = {}
    for (export, soc, scope), entry in parsed.entries.items():
        out.setdefault(export, {})[f"{soc}/{scope}"] = entry.to_yaml()
    return out


def _baseline_reasons(repo: Path, commit: str, path: Path | None, changed: set[Path]
                      ) -> dict[str, str] | str | None:
    """export -> reason when its entries in the baselines file changed; a reason for
    every export when the file cannot be compared; None when it did not change."""
    if path is None or path.resolve() not in changed:
        return None
    old = _baseline_entries(_show(repo, commit, path), path)
    try:
        now_text = path.read_text("utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        now_text = ""
    now = _baseline_entries(now_text, path)
    if old is None or now is None:
        return f"{path.name} changed"
    return {e: f"baseline entries changed ({path.name})"
            for e in set(old) | set(now) if old.get(e) != now.get(e)}


def _qnn_ci_reason(repo: Path, commit: str, changed: set[Path]) -> str | None:
    import qnn_ci

    own = Path(qnn_ci.__file__).resolve().parent
    if own.is_relative_to(repo) and any(p.is_relative_to(own) for p in changed):
        return "qnn-ci itself changed"
    for p in sorted(changed):
        if p.name in DEPENDENCY_FILES or (p.name.startswith(("requirements", "constraints"))
                                          and p.suffix in (".txt", ".in")):
            try:
                diff = _git(repo, "diff", commit, "--", str(p))
            except _GitFailed:
                continue
            if any(("qnn-ci" in line or "qnn_ci" in line) and line[:1] in "+-"
                   for line in diff.splitlines()):
                return f"qnn-ci's version changed ({p.relative_to(repo).as_posix()})"
    return None


def select(manifest_path: Path, exports: list[ExportSpec], raw_text: str | None, ref: str,
           *, memo_root: Path | None = None, baselines: Path | None = None) -> Selection:
    """The exports of one manifest whose inputs changed since ``ref`` (the manifest at
    ``ref`` is read with the manifest loader's limits: unreadable there selects all).
    ``raw_text``: the manifest's current text (read again when None); ``memo_root``:
    the work folder's memo (model signatures, as the manifest loader keeps them)."""
    repo = repository_of(manifest_path.parent)
    commit = resolve_ref(repo, ref)
    changed = changed_paths(repo, commit, memo_root.parent if memo_root else None)
    sel = Selection(ref, commit)
    old = _entries(_show(repo, commit, manifest_path), manifest_path)
    unreadable = old is None
    old_defaults, old_own, old_boards = old if old is not None else ({}, {}, None)
    text = raw_text if raw_text is not None else manifest_path.read_text("utf-8")
    now = _entries(text, manifest_path) or ({}, {}, None)
    now_defaults, now_own = now[0], now[1]
    now_boards = now[2] if isinstance(now[2], dict) else {}
    boards_file = manifest_path.parent / "qnn-boards.yaml"
    boards_file_changed = boards_file.resolve() in changed
    everything = _qnn_ci_reason(repo, commit, changed)
    by_baseline = _baseline_reasons(repo, commit, baselines, changed)
    for export in exports:
        reasons = [everything] if everything else []
        if unreadable:
            reasons.append(f"the manifest at {ref} cannot be read")
        reasons += _entry_reasons(export.name, now_own.get(export.name, {}), now_defaults,
                                  old_own.get(export.name), old_defaults)
        reasons += _file_reasons(export, changed, memo_root)
        if isinstance(by_baseline, str):
            reasons.append(by_baseline)
        elif by_baseline and export.name in by_baseline:
            reasons.append(by_baseline[export.name])
        if export.board:
            old_board = old_boards.get(export.board) if isinstance(old_boards, dict) \
                else None
            if now_boards.get(export.board) != old_board and export.board in now_boards:
                reasons.append(f"board {export.board} changed")
            elif boards_file_changed:
                reasons.append("qnn-boards.yaml changed")
        if reasons:
            sel.selected[export.name] = list(dict.fromkeys(reasons))
    # `from:` chains: a selected upstream selects its downstream, transitively.
    grew = True
    while grew:
        grew = False
        for export in exports:
            up = export.calibration.from_export
            if up and up in sel.selected and export.name not in sel.selected:
                sel.selected[export.name] = [f"upstream export {up!r} selected"]
                grew = True
    ordered = {e.name: sel.selected[e.name] for e in exports if e.name in sel.selected}
    sel.selected = ordered
    for export in exports:
        if export.name not in sel.selected:
            outside = not export.model.resolve().is_relative_to(repo)
            sel.deselected[export.name] = "no input changed" + (
                " (its model is outside the repository: pin its package version)"
                if outside else "")
    for line in sel.lines():
        log.info("%s", line)
    return sel
