"""The baselines file (`qnn-baselines.yaml`): per export x SoC x scope (`simulator`,
`sdk`, `board:<name>`) the numbers a run measured — metrics per output, nodes on the
HTP, latency, library size — with the commit, date and versions they came from.
Schema: docs/baselines.md.

Read defensively (any bytes: a ``Baselines`` or one ``UserError`` naming the file,
line and key), remembered per file until it changes (the regression check of every
export reads the same file). Written with a stable key order; an entry whose numbers
and versions did not change keeps its commit and date, so a diff shows only what
changed.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.errors import UserError

if TYPE_CHECKING:
    from qnn_ci.manifest.loader import Manifest

log = logging.getLogger(__name__)

VERSION = 1
MAX_BYTES = 1 << 20       # the YAML loader's own cap: ~3000 entries
SIMULATOR, SDK, BOARD = "simulator", "sdk", "board:"
HEADER = ("# qnn-ci baselines: written by `qnn-ci baseline update` or\n"
          "# `pytest --qnn-update-baselines`; read by the `regression` stage.\n"
          "# exports -> export -> SoC -> scope (simulator | sdk | board:<name>).\n"
          "# See docs/baselines.md. Edit by re-running the update, not by hand.\n")
# What a run's stages report that a baseline keeps: property prefix -> metrics kept.
COMPARISONS: dict[str, tuple[str, ...]] = {
    "sim_vs_fp32": ("cosine", "snr", "max_abs"),       # sim_numerics
    "htp_vs_cpu": ("cosine", "snr", "max_abs"),        # htp_vs_cpu
    "cpu_vs_fp32": ("cosine",),
    "htp_vs_fp32": ("cosine",),
    "context_vs_cpu": ("cosine", "snr", "max_abs"),    # context_run
    "context_vs_fp32": ("cosine", "snr", "max_abs"),   # context_run, route: dlc
}
LATENCY = ("latency.median_ms", "latency.p90_ms")      # htp_vs_cpu (qnn_ci.boards.latency)
# context_run's latency and load time, under the names its baseline keeps them
CONTEXT_LATENCY = {"latency.median_ms": "latency.context_median_ms",
                   "latency.p90_ms": "latency.context_p90_ms",
                   "load.init_ms": "latency.context_load_ms"}
NODES, LIBRARY = "nodes_on_htp", "library_bytes"
LATENCY_METHOD = "latency_method"      # in `versions`: latency by profile and by timing
STAGES = ("sim_npu", "sim_numerics", "model_lib", "htp_vs_cpu", "context_run")  # read


@dataclass(frozen=True)
class Entry:
    """One export x SoC x scope: the numbers and where they came from."""

    metrics: dict[str, float]
    commit: str = "unknown"
    date: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    def same_numbers(self, other: Entry) -> bool:
        """The same versions and metrics, to the 6 significant digits a JUnit report
        keeps (a baseline written from pytest's report rewrites nothing)."""
        return self.versions == other.versions and self.metrics.keys() == \
            other.metrics.keys() and all(math.isclose(v, other.metrics[k], rel_tol=2e-6,
                                                      abs_tol=1e-12)
                                         for k, v in self.metrics.items())

    def to_yaml(self) -> dict[str, Any]:
        return {"commit": self.commit, "date": self.date,
                "versions": dict(sorted(self.versions.items())),
                "metrics": dict(sorted(self.metrics.items()))}


Key = tuple[str, str, str]            # (export, soc, scope)


@dataclass
class Baselines:
    """A qnn-baselines.yaml: the recorded values per (export, SoC, scope)."""

    path: Path
    entries: dict[Key, Entry] = field(default_factory=dict)

    def get(self, export: str, soc: str, scope: str) -> Entry | None:
        return self.entries.get((export, soc, scope))


def soc_key(soc: str | None) -> str:
    return soc or "any"


def board_scope(board: str) -> str:
    return f"{BOARD}{board}"


# -- reading --------------------------------------------------------------------------
_MEMO: dict[Path, tuple[tuple[int, int, int], Baselines]] = {}


def load(path: Path) -> Baselines | None:
    """The baselines in ``path``; None when there is no such file. Remembered in the
    process until the file changes (its size, mtime or inode)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read the baselines file: {exc.strerror or exc}",
                        file=path) from None
    stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
    known = _MEMO.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    from qnn_ci.manifest.yaml_lines import load_yaml_text
    from qnn_ci.util.safe_read import read_bytes

    raw = read_bytes(path, cap=MAX_BYTES, what="baselines file",
                     hint="one entry per export x SoC x scope is a few hundred bytes")
    data, lines = load_yaml_text(_decode(raw, path), path)
    found = parse(data, lines, path)
    if len(_MEMO) >= 64:          # a run reads one or a few files
        _MEMO.clear()
    _MEMO[path] = (stamp, found)
    return found


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise UserError(f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start};"
                        " save it as UTF-8", file=path, line=line) from None


def parse(data: Any, lines: Mapping[tuple[str | int, ...], int], path: Path) -> Baselines:
    """Check the shape of a loaded baselines file; UserError naming the key otherwise."""
    def fail(keys: tuple[str | int, ...], what: str) -> UserError:
        line = None
        for n in range(len(keys), -1, -1):
            line = lines.get(keys[:n])
            if line:
                break
        key = ".".join(_shown(k) for k in keys) or None
        return UserError(f"{what} (re-create it: qnn-ci baseline update)", file=path,
                         line=line, key=key)

    def mapping(value: Any, keys: tuple[str | int, ...], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(keys, f"{what} must be a mapping, not {_kind(value)}")
        return value

    out = Baselines(path)
    if data is None:
        return out
    top = mapping(data, (), "the baselines file")
    unknown = sorted(set(top) - {"version", "exports"})
    if unknown:
        raise fail((unknown[0],), f"unknown key {unknown[0]!r}; allowed: version, exports")
    version = top.get("version", VERSION)
    if version != VERSION or isinstance(version, bool):
        raise fail(("version",), f"version {version!r} is not supported (this qnn-ci "
                   f"reads version {VERSION})")
    exports = mapping(top.get("exports") or {}, ("exports",), "exports")
    for export, socs in exports.items():
        kp: tuple[str | int, ...] = ("exports", export)
        for soc, scopes in mapping(socs or {}, kp, f"export {export!r}").items():
            for scope, raw in mapping(scopes or {}, (*kp, soc), f"SoC {soc!r}").items():
                if scope not in (SIMULATOR, SDK) and not (
                        scope.startswith(BOARD) and len(scope) > len(BOARD)):
                    raise fail((*kp, soc, scope), f"unknown scope {scope!r}; allowed: "
                               f"{SIMULATOR}, {SDK}, {BOARD}<board name>")
                out.entries[(export, soc, scope)] = _entry(raw, (*kp, soc, scope), mapping,
                                                           fail)
    return out


def _entry(raw: Any, kp: tuple[str | int, ...], mapping: Any, fail: Any) -> Entry:
    body = mapping(raw, kp, "a baseline entry")
    unknown = sorted(set(body) - {"commit", "date", "versions", "metrics"})
    if unknown:
        raise fail((*kp, unknown[0]), f"unknown key {unknown[0]!r}; allowed: commit, date, "
                   "versions, metrics")
    metrics: dict[str, float] = {}
    for name, value in mapping(body.get("metrics") or {}, (*kp, "metrics"),
                               "metrics").items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise fail((*kp, "metrics", name), f"metric {name!r} must be a finite number, "
                       f"not {_kind(value)}")
        metrics[str(name)] = value
    versions = {str(k): _scalar(v, (*kp, "versions", k), fail) for k, v in
                mapping(body.get("versions") or {}, (*kp, "versions"), "versions").items()}
    return Entry(metrics=metrics, commit=_scalar(body.get("commit", "unknown"),
                                                 (*kp, "commit"), fail),
                 date=_scalar(body.get("date", ""), (*kp, "date"), fail), versions=versions)


def _scalar(value: Any, keys: tuple[str | int, ...], fail: Any) -> str:
    if isinstance(value, (dict, list)):
        raise fail(keys, f"must be a text, not {_kind(value)}")
    return "" if value is None else str(value)


def _shown(key: str | int) -> str:
    """A key as a message shows it: quoted when it holds a line break or another
    character that is not printable."""
    text = str(key)
    return text if text.isprintable() else repr(text)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty"
    return f"{type(value).__name__} {str(value)[:40]!r}"


# -- what a run measured ----------------------------------------------------------------
def _number(value: Any) -> float | None:
    """A finite number, also from its text (a JUnit property read back); else None."""
    if isinstance(value, str):
        try:
            value = int(value) if value.lstrip("-").isdigit() else float(value)
        except (ValueError, OverflowError):
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _comparisons(props: Mapping[str, Any], prefixes: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in props.items():
        head, _, rest = key.partition(".")
        if head not in prefixes or "." not in rest:
            continue
        metric = rest.rsplit(".", 1)[1]
        if metric in COMPARISONS[head] and (v := _number(value)) is not None:
            out[key] = v
    return out


def measured(results: Mapping[str, StageResult], board: str | None
             ) -> dict[str, dict[str, float]]:
    """scope -> metric -> value from one export's stage results (those that ran to a
    verdict: passed or failed; a skipped or errored stage measured nothing)."""
    def ran(stage: str) -> StageResult | None:
        r = results.get(stage)
        return r if r is not None and r.status in (Status.PASSED, Status.FAILED) else None

    scopes: dict[str, dict[str, float]] = {}
    sim: dict[str, float] = {}
    if (npu := ran("sim_npu")) is not None and \
            (n := _number(npu.properties.get(NODES))) is not None:
        sim[NODES] = n
    if (num := ran("sim_numerics")) is not None:
        sim |= _comparisons(num.properties, ("sim_vs_fp32",))
    if sim:
        scopes[SIMULATOR] = sim
    lib = ran("model_lib")
    if lib is not None and lib.artefacts.get("library"):
        try:
            scopes[SDK] = {LIBRARY: Path(lib.artefacts["library"]).stat().st_size}
        except OSError:
            pass
    if (htp := ran("htp_vs_cpu")) is not None:
        name = str(htp.properties.get("board") or board or "board")
        on_board = _comparisons(htp.properties, ("htp_vs_cpu", "cpu_vs_fp32", "htp_vs_fp32"))
        for key in LATENCY:
            if (v := _number(htp.properties.get(key))) is not None:
                on_board[key] = v
        if on_board:
            scopes[board_scope(name)] = on_board
    if (ctx := ran("context_run")) is not None:
        name = str(ctx.properties.get("board") or board or "board")
        on_board = _comparisons(ctx.properties, ("context_vs_cpu", "context_vs_fp32"))
        for key, kept in CONTEXT_LATENCY.items():
            if (v := _number(ctx.properties.get(key))) is not None:
                on_board[kept] = v
        if on_board:
            scopes.setdefault(board_scope(name), {}).update(on_board)
    return scopes


def versions_of(results: Mapping[str, StageResult], scope: str) -> dict[str, str]:
    """The versions a scope's numbers depend on."""
    from qnn_ci import __version__

    out = {"qnn_ci": __version__}
    if scope == SIMULATOR:
        from qnn_ci.sim.availability import versions

        out["onnxruntime_qnn"] = versions().get("onnxruntime-qnn", "absent")
    else:
        stage = "model_lib" if scope == SDK else "htp_vs_cpu"
        r = results.get(stage)
        if r is not None and r.properties.get("sdk_version"):
            out["sdk"] = str(r.properties["sdk_version"])
        if r is not None and r.properties.get("board_qnn_version"):
            out["board_qnn"] = str(r.properties["board_qnn_version"])
        if r is not None and r.properties.get("latency.method"):
            out[LATENCY_METHOD] = latency_method(r.properties)
    return out


def latency_method(props: Mapping[str, Any]) -> str:
    """How a latency was measured, as far as numbers compare: ``timed``, or
    ``profile: per-inference`` (text or CSV: a true median and p90) or ``profile:
    <source>`` (a summary's average and max, or 1000 / IPS: not the same statistic)."""
    method = str(props.get("latency.method"))
    source = str(props.get("latency.source") or "")
    if method != "profile" or not source:
        return method
    return "profile: per-inference" if source.startswith("per_inference") else \
        f"profile: {source}"


def git_origin(folder: Path) -> tuple[str, str]:
    """(short commit of HEAD, today's UTC date) for the repository holding ``folder``;
    the commit is "unknown" outside git."""
    import datetime

    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown", today
    commit = done.stdout.strip() if done.returncode == 0 else ""
    return commit or "unknown", today


# -- writing ------------------------------------------------------------------------
def update(path: Path, new: Mapping[Key, Entry]) -> list[Key]:
    """Merge ``new`` into the file at ``path`` (created when missing) and return the
    keys whose numbers or versions changed. An unchanged entry keeps its commit and
    date; nothing is written when nothing changed. A file that cannot be read is not
    overwritten (UserError)."""
    current = load(path)
    entries = dict(current.entries) if current is not None else {}
    changed: list[Key] = []
    for key, entry in sorted(new.items()):
        old = entries.get(key)
        if old is not None and old.same_numbers(entry):
            continue
        entries[key] = entry
        changed.append(key)
    if changed or current is None:
        write(path, entries)
    return changed


def render(entries: Mapping[Key, Entry]) -> str:
    import yaml

    tree: dict[str, Any] = {}
    for (export, soc, scope), entry in sorted(entries.items()):
        tree.setdefault(export, {}).setdefault(soc, {})[scope] = entry.to_yaml()
    body = yaml.safe_dump({"version": VERSION, "exports": tree}, sort_keys=False,
                          default_flow_style=False, allow_unicode=True, width=1000)
    return HEADER + body


def write(path: Path, entries: Mapping[Key, Entry]) -> None:
    """Write atomically (a temporary file beside it, then renamed)."""
    text = render(entries)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write the baselines file: {exc.strerror or exc}",
                        file=path) from None
    _MEMO.pop(path, None)
    log.info("baselines written: %s", path)


def entries_for(export: str, soc: str | None, results: Mapping[str, StageResult],
                board: str | None, origin: tuple[str, str]) -> dict[Key, Entry]:
    """The entries one export's results make (what `baseline update` writes)."""
    commit, date = origin
    return {(export, soc_key(soc), scope): Entry(metrics=m, commit=commit, date=date,
                                                 versions=versions_of(results, scope))
            for scope, m in measured(results, board).items()}


def write_for_manifest(manifest: Manifest, results: Mapping[str, Mapping[str, StageResult]]
                       ) -> tuple[list[Key], list[str]]:
    """Baselines from one manifest's collected results (``{export: {stage: result}}``)
    into its baselines file: (keys changed, exports that measured nothing). What
    `qnn-ci baseline update` and `pytest --qnn-update-baselines` call."""
    from qnn_ci.manifest.loader import BASELINES_FILE

    path = manifest.baselines or manifest.path.parent / BASELINES_FILE
    origin = git_origin(manifest.path.parent)
    new: dict[Key, Entry] = {}
    empty: list[str] = []
    by_name = manifest.by_name
    for name, by_stage in results.items():
        export = by_name[name]
        made = entries_for(name, export.target.soc, by_stage, export.board, origin)
        if not made:
            empty.append(name)
        new |= made
    return (update(path, new) if new else []), empty
