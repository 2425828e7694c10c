"""The run history: a JSON-lines file, one record per run x export x stage.

A record (one line, keys in this order)::

    {"date": "2026-12-01T02:00:00Z", "commit": "3f2c1ab...", "export": "tiny",
     "stage": "sim_numerics", "soc": "QCS6490", "board": null, "status": "passed",
     "metrics": {"sim_vs_fp32.y.cosine": 0.99998, "sim_vs_fp32.y.snr": 44.9}}

``metrics`` holds every numeric ``qnn.*`` property of the stage's testcase in a
JUnit report qnn-ci wrote (``qnn-ci run --junit`` or pytest's ``--junitxml`` with
the plugin), except bookkeeping (``BOOKKEEPING``: durations, thresholds, exit codes,
diagnosis costs, settings echoed back) and the counters of stages that measure
nothing themselves (``COUNTING_STAGES``: the regression check's compared / worse /
improved). Stages without such numbers are not recorded, nor stages read from the
cache (``qnn.cached``): their numbers were measured by an earlier run, so a record
of them would repeat old numbers (old timings included) under this run's date.
``soc`` is the stage's ``qnn.soc`` or, when it has none, the SoC another stage of
the same export reported; ``board`` is the stage's ``qnn.board`` (board
stages only). See docs/history.md.

Every byte sequence in a JUnit report or a history file ends in records or one
``UserError`` line naming the file (and line); appending replaces the file
atomically under a lock, so a reader never sees half a record.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.util.safe_read import MiB, read_bytes

log = logging.getLogger(__name__)

JUNIT_CAP = 256 * MiB
HISTORY_CAP = 512 * MiB
MAX_NAME = 300            # longest export / stage / metric name kept
RECORD_KEYS = ("date", "commit", "export", "stage", "soc", "board", "status", "metrics")
STATUSES = ("passed", "failed", "error", "skipped")
UNKNOWN = "unknown"

# Numeric properties that are not measurements of the export.
BOOKKEEPING_PREFIXES = ("artefact.", "diagnosis.", "warnings.")
BOOKKEEPING_SUFFIXES = ("duration_s", ".min", ".max", "exit_code")
BOOKKEEPING = frozenset({
    "cached", "line", "sim_soc_id", "binary_arch", "samples", "held_out", "latency.runs",
    "act_bitwidth", "weights_bitwidth", "bias_bitwidth", "float_bitwidth",
    "float_bias_bitwidth", "percentile_calibration_value",
})

# Stages whose numbers count what they compared (the regression check: compared,
# worse, improved): no measurement of the export, never recorded or charted.
COUNTING_STAGES = frozenset({"regression"})

_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_DOCTYPES = tuple("<!DOCTYPE".encode(c) for c in ("utf-8", "utf-16-le", "utf-16-be"))
_HINT = "pass a JUnit report written by qnn-ci run --junit (or pytest --junitxml)"
_DB_HINT = ("each line must be one history record as qnn-ci history add writes it; "
            "remove or fix the line")


def number(text: str) -> int | float | None:
    """A property value as a finite number, None when it is not one (``True``,
    ``nan``, ``1_0``, a version such as ``2.31.0`` and 400-digit numbers included)."""
    if len(text) > 40 or not _NUMBER.fullmatch(text):
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    value = float(text)
    return value if math.isfinite(value) else None


def is_metric(name: str, stage: str | None = None) -> bool:
    """Whether the property ``qnn.<name>`` (of ``stage``, when given) is a measurement:
    not bookkeeping, not a counter of a stage that measures nothing itself."""
    return not (name in BOOKKEEPING or name.startswith(BOOKKEEPING_PREFIXES)
                or name.endswith(BOOKKEEPING_SUFFIXES) or stage in COUNTING_STAGES)


def is_cached(props: dict[str, str]) -> bool:
    """Whether a testcase's stage was read from the cache (``qnn.cached``: ``true`` from
    qnn-ci's JUnit writer, ``True`` from pytest's)."""
    return props.get("qnn.cached", "").strip().lower() == "true"


# --- dates and commits ------------------------------------------------------------------

def parse_date(text: str, *, where: str = "--date") -> datetime:
    """An ISO 8601 date/time as an aware datetime (UTC when no offset is given)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00")
                                       if text.strip().endswith("Z") else text.strip())
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        value.astimezone(UTC)              # 9999-12-31T23:00-05:00 is past year 9999
    except (ValueError, TypeError, OverflowError):
        raise UserError(f"{where} {text[:80]!r}: not an ISO 8601 date "
                        "(e.g. 2026-12-01 or 2026-12-01T02:00:00Z)") from None
    return value


def date_text(value: datetime) -> str:
    """The stored form: UTC, seconds, ``Z``."""
    return value.astimezone(UTC).replace(tzinfo=None, microsecond=0).isoformat() + "Z"


def now_text() -> str:
    return date_text(datetime.now(UTC))


def _mtime_text(path: Path) -> str:
    try:
        return date_text(datetime.fromtimestamp(path.stat().st_mtime, UTC))
    except (OSError, ValueError, OverflowError):
        return now_text()


def git_commit(where: Path) -> str:
    """``git rev-parse HEAD`` at ``where``; ``unknown`` outside git (or without git)."""
    try:
        done = subprocess.run(["git", "-C", str(where), "rev-parse", "--verify", "-q", "HEAD"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError, ValueError):
        return UNKNOWN
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else UNKNOWN


# --- JUnit -> records -------------------------------------------------------------------

def _parse_xml(path: Path) -> Any:
    import xml.etree.ElementTree as ET

    data = read_bytes(path, cap=JUNIT_CAP, what="JUnit report", hint=_HINT)
    if any(d in data for d in _DOCTYPES):   # entities are declared only there
        raise UserError(f"has a DOCTYPE, which qnn-ci's reports never have; {_HINT}",
                        file=path)
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise UserError(f"not well-formed XML ({exc}); {_HINT}", file=path,
                        line=line) from None
    except (ValueError, LookupError, RecursionError, MemoryError) as exc:
        raise UserError(f"cannot read the XML ({type(exc).__name__}); {_HINT}",
                        file=path) from None


def _properties(element: Any) -> dict[str, str]:
    props: dict[str, str] = {}
    for block in element.findall("properties"):
        for prop in block.findall("property"):
            name, value = prop.get("name"), prop.get("value")
            if isinstance(name, str) and isinstance(value, str) and name not in props:
                props[name] = value
    return props


def _status(case: Any, props: dict[str, str]) -> str:
    given = props.get("qnn.status", "")
    if given in STATUSES:
        return given
    for tag, status in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
        if case.find(tag) is not None:
            return status
    return "passed"


def _name_parts(case: Any, props: dict[str, str]) -> tuple[str, str] | None:
    export, stage = props.get("qnn.export"), props.get("qnn.stage")
    if not (export and stage):
        parts = (case.get("name") or "").split("::")
        if len(parts) < 2:
            return None
        export, stage = parts[-2], parts[-1]
    if export in ("qnn-ci", "(manifest)") or not export or not stage:
        return None
    return export[:MAX_NAME], stage[:MAX_NAME]


def _metrics(props: dict[str, str], stage: str) -> dict[str, int | float]:
    out: dict[str, int | float] = {}
    for key, text in props.items():
        name = key[4:]
        if not key.startswith("qnn.") or not name or len(name) > MAX_NAME \
                or not is_metric(name, stage):
            continue
        value = number(text.strip())
        if value is not None:
            out[name] = value
    return dict(sorted(out.items()))


def _suite_value(root: Any, name: str) -> str | None:
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        value = _properties(suite).get(name)
        if value:
            return value
    return None


def _suite_date(root: Any) -> str | None:
    given = _suite_value(root, "qnn.date")
    if given:
        return given
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return next((s.get("timestamp") for s in suites if s.get("timestamp")), None)


def _suite_commit(root: Any) -> str | None:
    """The report's ``qnn.commit`` (``+dirty`` when ``qnn.dirty`` says the work tree
    had uncommitted changes)."""
    commit = _suite_value(root, "qnn.commit")
    if commit and _suite_value(root, "qnn.dirty") == "true" and not commit.endswith("+dirty"):
        commit += "+dirty"
    return commit


@dataclass
class RunRecords:
    """What a JUnit report gives the history: the records of the stages this run
    measured, and the stages with numbers it read from the cache (left out)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    cached: list[tuple[str, str]] = field(default_factory=list)    # (export, stage)


def records_from_junit(path: str | Path, *, commit: str | None = None,
                       date: str | None = None, where: Path | None = None) -> list[dict[str, Any]]:
    """The history records of the run a JUnit report describes (``read_run``)."""
    return read_run(path, commit=commit, date=date, where=where).records


def read_run(path: str | Path, *, commit: str | None = None, date: str | None = None,
             where: Path | None = None) -> RunRecords:
    """The history records of the run a JUnit report describes: one per export x
    stage that measured numbers in this run; a stage read from the cache
    (``qnn.cached``) is listed in ``cached`` instead.

    ``commit`` / ``date`` given win; else the report's suite properties ``qnn.commit``
    (with ``+dirty`` when ``qnn.dirty``) / ``qnn.date``, which qnn-ci's writers record
    when the run starts (or pytest's suite ``timestamp``); else ``git rev-parse HEAD`` at
    ``where`` (``unknown`` outside git) and the report's modification time (when the
    run wrote it last; adding the same report twice then adds nothing)."""
    path = Path(path)
    root = _parse_xml(path)
    if root.tag not in ("testsuites", "testsuite"):
        raise UserError(f"the root element is <{str(root.tag)[:40]}>, not <testsuites> or "
                        f"<testsuite>; {_HINT}", file=path)
    when = date or _suite_date(root)
    stamp = date_text(parse_date(when, where="--date" if date else f"{path}: the run's date")) \
        if when else _mtime_text(path)
    sha = commit or _suite_commit(root) or git_commit(where or Path.cwd())
    cases = list(root.iter("testcase"))
    found = 0
    rows: list[tuple[str, str, dict[str, str], str]] = []
    socs: dict[str, str] = {}
    for case in cases:
        props = _properties(case)
        named = _name_parts(case, props)
        if named is None:
            continue
        found += 1
        rows.append((*named, props, _status(case, props)))
        soc = props.get("qnn.soc")
        if soc:
            socs.setdefault(named[0], soc[:MAX_NAME])
    if not found:
        raise UserError(f"no qnn-ci stage results in it; {_HINT}", file=path)
    run = RunRecords()
    seen: set[tuple[str, str, str | None]] = set()
    for export, stage, props, status in rows:
        metrics = _metrics(props, stage)
        board = (props.get("qnn.board") or "")[:MAX_NAME] or None
        if not metrics:
            continue
        if is_cached(props):     # an earlier run's numbers: nothing measured here
            run.cached.append((export, stage))
            continue
        if (export, stage, board) in seen:   # e.g. the same export name in two manifests
            log.warning("%s: %s::%s is in the report twice; the first one is kept",
                        path, export, stage)
            continue
        seen.add((export, stage, board))
        run.records.append({
            "date": stamp, "commit": sha[:MAX_NAME], "export": export, "stage": stage,
            "soc": (props.get("qnn.soc") or "")[:MAX_NAME] or socs.get(export),
            "board": board,
            "status": status, "metrics": metrics})
    return run


# --- the history file -------------------------------------------------------------------

def _check_record(value: Any, path: Path, line: int) -> dict[str, Any]:
    def bad(what: str) -> UserError:
        return UserError(f"{what}; {_DB_HINT}", file=path, line=line)

    if not isinstance(value, dict):
        raise bad("not a JSON object")
    for key in ("date", "commit", "export", "stage"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise bad(f"{key!r} is missing or not a text")
    for key in ("soc", "board", "status"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise bad(f"{key!r} is not a text or null")
    metrics = value.get("metrics")
    if not isinstance(metrics, dict):
        raise bad("'metrics' is missing or not an object")
    for name, number_ in metrics.items():
        if isinstance(number_, bool) or not isinstance(number_, int | float) \
                or not math.isfinite(number_) or abs(number_) > 1e300:
            raise bad(f"metric {name[:80]!r} is not a finite number")
    parsed = parse_date(value["date"], where=f"{path}:{line}: date")
    record = {k: value.get(k) for k in RECORD_KEYS}
    record["_when"] = parsed            # for sorting; never written
    return record


def read_history(path: str | Path, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a history file, in file order; each has ``_when`` (an aware
    datetime) added. A missing file is ``[]`` with ``missing_ok``."""
    path = Path(path)
    if missing_ok and not os.path.lexists(path):
        return []
    data = read_bytes(path, cap=HISTORY_CAP, what="history file",
                      missing="no history file here; add a run with qnn-ci history add "
                              "JUNIT.xml --db " + str(path))
    records = []
    for number_, raw in enumerate(data.split(b"\n"), 1):
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            raise UserError(f"not a JSON line; {_DB_HINT}", file=path, line=number_) from None
        records.append(_check_record(value, path, number_))
    return records


def _identity(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in ("date", "commit", "export", "stage", "soc", "board"))


def record_line(record: dict[str, Any]) -> str:
    return json.dumps({k: record.get(k) for k in RECORD_KEYS}, ensure_ascii=False,
                      allow_nan=False)


def append(path: str | Path, records: Iterable[dict[str, Any]], *,
           lock_timeout_s: float = 60.0) -> int:
    """Add ``records`` to the history at ``path`` (created when missing); records
    already there (same date, commit, export, stage, SoC and board) are not added
    twice. The file is replaced atomically under ``<path>.lock``. Returns how many
    were added."""
    from filelock import FileLock, Timeout

    path = Path(path)
    lock = FileLock(str(path) + ".lock")
    try:
        with lock.acquire(timeout=lock_timeout_s):
            old = read_history(path, missing_ok=True)
            known = {_identity(r) for r in old}
            new = []
            for record in records:
                _check_record(record, path, len(old) + len(new) + 1)   # what will be read
                if _identity(record) not in known:
                    known.add(_identity(record))
                    new.append(record_line(record))
            if new:
                _write(path, new)
            return len(new)
    except Timeout:
        raise UserError(f"another qnn-ci history add holds {path}.lock for over "
                        f"{lock_timeout_s:.0f} s; try again", file=path) from None
    except OSError as exc:
        raise UserError(f"cannot write the history: {exc.strerror or exc}",
                        file=exc.filename or path) from None


def _write(path: Path, lines: list[str]) -> None:
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(old + ("\n".join(lines) + "\n").encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
