"""``.qualcomm-env``: the shared setup file the Qualcomm setup tooling writes once
(SDK root, eSDK environment script, how the board is reached), so no tool has to
ask again.

A file is complete only when it holds the marker line ``QC_SETUP_VERSION=...``;
the setup writes it last. A file without it is half-written: reading part of it
would be a silent partial answer, so it is one error line instead.

Where it is looked for: beside the manifest, then at the root of the repository
holding the manifest (the nearest folder above it with a ``.git``). Precedence of
each value, highest first: the command line, the manifest, the process
environment (``QNN_SDK_ROOT``, ``ESDK_ENV``), this file. Each value carries where it
came from (``file:line``) so the run can say so.

The file is shell ``KEY=VALUE`` lines (``export`` allowed, single or double quotes,
``#`` comments, ``$HOME``/``${HOME}`` and ``~`` expanded); it is never executed.
Key names vary between setup versions, so several spellings are accepted
(``KEYS``). Unknown keys are ignored (the file is shared with other tools).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.util.safe_read import read_text

log = logging.getLogger(__name__)

FILE_NAME = ".qualcomm-env"
MARKER = "QC_SETUP_VERSION"
MAX_BYTES = 1 << 20
DEFAULT_BOARD_NAME = "qualcomm-env"

# setting -> accepted key spellings, first is the canonical one
KEYS: dict[str, tuple[str, ...]] = {
    "sdk_root": ("QNN_SDK_ROOT", "QAIRT_SDK_ROOT", "QAIRT_ROOT", "SNPE_ROOT", "SDK_ROOT"),
    "esdk_env": ("ESDK_ENV", "ESDK_ENV_SCRIPT", "ESDK_ENVIRONMENT", "ESDK_SETUP"),
    "esdk_root": ("ESDK_ROOT", "ESDK_DIR"),
    "transport": ("BOARD_TRANSPORT", "BOARD_ACCESS", "BOARD_CONNECTION", "DEVICE_TRANSPORT"),
    "board_name": ("BOARD_NAME", "DEVICE_NAME"),
    "host": ("BOARD_HOST", "BOARD_IP", "BOARD_ADDRESS", "DEVICE_HOST", "DEVICE_IP",
             "SSH_HOST"),
    "user": ("BOARD_USER", "DEVICE_USER", "SSH_USER"),
    "port": ("BOARD_PORT", "BOARD_SSH_PORT", "SSH_PORT"),
    "key_file": ("BOARD_KEY_FILE", "BOARD_SSH_KEY", "SSH_KEY", "SSH_KEY_FILE"),
    "serial": ("ADB_SERIAL", "BOARD_SERIAL", "ANDROID_SERIAL", "DEVICE_SERIAL"),
    "soc": ("BOARD_SOC", "TARGET_SOC", "SOC", "QC_SOC"),
    "qnn_lib_dir": ("BOARD_QNN_LIB_DIR", "BOARD_LIB_DIR"),
    "work_root": ("BOARD_WORK_ROOT", "BOARD_WORKDIR"),
}
NO_BOARD = ("", "none", "no", "not-available", "not_available", "unavailable", "n/a")
_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)\Z")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class Sourced:
    """A setting's value and the file line it came from."""

    value: str
    where: str                      # "path/.qualcomm-env:7"


@dataclass
class QualcommEnv:
    """A project's `.qualcomm-env` file: its version and settings."""

    path: Path
    version: str
    values: dict[str, Sourced] = field(default_factory=dict)   # setting -> value

    def get(self, setting: str) -> Sourced | None:
        return self.values.get(setting)

    def sdk_root(self) -> Sourced | None:
        return self.values.get("sdk_root")

    def esdk_env(self) -> Sourced | None:
        """The eSDK environment script: given, or found in ``ESDK_ROOT``."""
        if "esdk_env" in self.values:
            return self.values["esdk_env"]
        root = self.values.get("esdk_root")
        if root is None:
            return None
        scripts = sorted(Path(root.value).glob("environment-setup-*"))
        return Sourced(str(scripts[0]), root.where) if scripts else None

    def board(self) -> tuple[str, Any] | None:
        """The board the file describes, as (name, BoardConfig), or None."""
        transport = self.values.get("transport")
        if transport is None and "host" in self.values:
            transport = Sourced("ssh", self.values["host"].where)
        elif transport is None and "serial" in self.values:
            transport = Sourced("adb", self.values["serial"].where)
        if transport is None or transport.value.strip().lower() in NO_BOARD:
            return None
        from qnn_ci.manifest.boards_file import parse_boards

        name = self.values.get("board_name", Sourced(DEFAULT_BOARD_NAME, "")).value
        raw: dict[str, Any] = {"transport": transport.value.strip().lower()}
        lines: dict[tuple[Any, ...], int] = {}
        wanted = {"ssh": ("host", "user", "port", "key_file"), "adb": ("serial",),
                  "local": ()}.get(raw["transport"], ())
        for setting in (*wanted, "soc", "qnn_lib_dir", "work_root"):
            got = self.values.get(setting)
            if got is None:
                continue
            raw[setting] = int(got.value) if setting == "port" and got.value.isdigit() \
                else got.value
        try:
            boards = parse_boards({name: raw}, source=self.path, lines=lines, prefix=())
        except UserError as exc:
            key = (exc.key or "").rpartition(".")[2]
            where = self.values.get(key) or self.values.get("transport") or transport
            raise UserError(f"{exc.message} (board from {FILE_NAME}: set "
                            f"{_spelling(key)})", file=where.where.rpartition(":")[0],
                            line=_line(where.where)) from None
        return name, boards[name]

    def describe(self) -> list[str]:
        """One line per value taken, for the run's log: ``sdk_root = ... (file:line)``."""
        return [f"{k} = {v.value} ({v.where})" for k, v in sorted(self.values.items())]


def _spelling(setting: str) -> str:
    return next((keys[0] for s, keys in KEYS.items() if s == setting), setting or "it")


def _line(where: str) -> int | None:
    tail = where.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def _unquote(raw: str, path: Path, lineno: int) -> str:
    text = raw.strip()
    if not text:
        return ""
    if "\x00" in text:
        raise UserError("a NUL byte in this value; rewrite the line", file=path, line=lineno)
    try:
        parts = shlex.split(text, comments=True, posix=True)
    except ValueError as exc:
        raise UserError(f"cannot read this line ({exc}); quote the value",
                        file=path, line=lineno) from None
    value = " ".join(parts)
    single_quoted = text.startswith("'")
    if not single_quoted:
        value = _VAR.sub(lambda m: os.environ.get(m.group(1) or m.group(2), m.group(0)),
                         value)
    if value.startswith("~"):
        try:
            return os.path.expanduser(value)
        except (KeyError, ValueError):       # an odd ~user: keep the text as written
            return value
    return value


def parse(path: Path) -> QualcommEnv:
    """Read ``path``; a file without the marker line is a ``UserError``."""
    text = read_text(path, cap=MAX_BYTES, what=FILE_NAME)
    seen: dict[str, tuple[str, int]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue          # shell the setup may write (functions, `if`): not ours
        seen[m.group(1)] = (_unquote(m.group(2), path, lineno), lineno)
    if MARKER not in seen:
        raise UserError(f"{FILE_NAME} has no {MARKER}= line: it is half-written (the setup "
                        "writes that marker last); finish the setup (qualcomm-setup) or add "
                        f"the missing values and the line {MARKER}=1", file=path)
    env = QualcommEnv(path, seen[MARKER][0])
    for setting, spellings in KEYS.items():
        for key in spellings:
            if key in seen and seen[key][0] != "":
                value, lineno = seen[key]
                if setting in ("sdk_root", "esdk_env", "esdk_root", "key_file"):
                    p = Path(value)
                    value = str(p if p.is_absolute() else (path.parent / p))
                env.values[setting] = Sourced(value, f"{path}:{lineno}")
                break
    log.info("read %s (setup version %s): %s", path, env.version,
             "; ".join(env.describe()) or "no values qnn-ci uses")
    return env


def repository_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def find(manifest: Path) -> Path | None:
    """``.qualcomm-env`` beside the manifest, else at its repository's root."""
    folder = manifest.resolve().parent
    candidates = [folder / FILE_NAME]
    root = repository_root(folder)
    if root is not None and root != folder:
        candidates.append(root / FILE_NAME)
    return next((c for c in candidates if c.is_file() or c.exists()), None)


def load_for(manifest: Path) -> QualcommEnv | None:
    path = find(manifest)
    return parse(path) if path is not None else None
