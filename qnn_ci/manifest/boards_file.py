"""Board declarations: the manifest's ``boards:`` key or ``qnn-boards.yaml``.

One table (``_FIELDS``) drives both the validation here and ``BOARD_SCHEMA``
(the JSON-Schema fragment the manifest schema embeds). Every problem is a
one-line ``UserError`` naming the file, line and key path.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.manifest.yaml_lines import KeyPath, dotted, line_of
from qnn_ci.tables import get_soc
from qnn_ci.transport.config import BoardConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
TRANSPORTS = ("ssh", "adb", "local", "ai-hub")
SHELL_TRANSPORTS = ("ssh", "adb", "local")      # the boards qnn-ci runs commands on
HOST_KEY_POLICIES = ("reject", "accept-new", "ignore")


@dataclass(frozen=True)
class _Field:
    """One key of a board declaration: its kind, help text and the values it accepts."""

    kind: str                     # str, abs, int, number, path, env, enum
    help: str
    only: str | None = None       # the one transport the key applies to
    shell: bool = False           # applies to boards with a shell only (not ai-hub)
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_min: bool = False


_FIELDS: dict[str, _Field] = {
    "transport": _Field("enum", "How qnn-ci reaches the board.", choices=TRANSPORTS),
    "soc": _Field("str", "The board's SoC (e.g. QCS6490), checked against the export's."),
    "host": _Field("str", "SSH host name or address.", only="ssh"),
    "port": _Field("int", "SSH port.", only="ssh", minimum=1, maximum=65535),
    "user": _Field("str", "SSH user (default: the local user name).", only="ssh"),
    "key_file": _Field("path", "Private key to log in with (relative: to this file).",
                       only="ssh"),
    "known_hosts": _Field("path", "known_hosts file that holds the board's host key "
                          "(default ~/.ssh/known_hosts; relative: to this file).", only="ssh"),
    "host_key_policy": _Field("enum", "reject unknown host keys (default), accept-new "
                              "(trust and save on first connect) or ignore (unsafe).",
                              only="ssh", choices=HOST_KEY_POLICIES),
    "serial": _Field("str", "ADB serial (host:port for TCP devices).", only="adb"),
    "adb_server_port": _Field("int", "Port of the adb server to use (default 5037).",
                              only="adb", minimum=1, maximum=65535),
    "qnn_lib_dir": _Field("abs", "Folder on the board with the QNN backend libraries.",
                          shell=True),
    "net_run": _Field("str", "qnn-net-run on the board: an absolute path or a name on PATH.",
                      shell=True),
    "work_root": _Field("abs", "Scratch folder on the board (default /tmp/qnn-ci: tmpfs).",
                        shell=True),
    "env": _Field("env", "Environment variables for every command on the board.", shell=True),
    "timeout_s": _Field("number", "Time limit per board command, seconds.", minimum=0,
                        exclusive_min=True, shell=True),
    "connect_timeout_s": _Field("number", "Time limit to connect, seconds.", minimum=0,
                                exclusive_min=True, shell=True),
    "retries": _Field("int", "Reconnect attempts after a connection error.", minimum=0,
                      maximum=20, shell=True),
    "retry_delay_s": _Field("number", "Pause before each reconnect, seconds.", minimum=0,
                            shell=True),
    "lock_max_age_s": _Field("number", "Age, seconds, after which another host's lock on "
                             "the board counts as stale and is taken over (default 21600: "
                             "6 h; longer than your longest board run).", minimum=0,
                             exclusive_min=True, shell=True),
    "lock_timeout_s": _Field("number", "How long a board stage waits for the board's lock "
                             "while another run holds it, seconds (default 300); the wait "
                             "is logged every 30 s.", minimum=0, shell=True),
    "device": _Field("str", "The AI Hub device to run on, by name (e.g. 'RB3 Gen 2 (Proxy)').",
                     only="ai-hub"),
    "chipset": _Field("str", "Or the AI Hub chipset attribute (e.g. qualcomm-qcs6490-proxy): "
                      "the first device that has it.", only="ai-hub"),
    "token_env": _Field("envname", "The environment variable that holds the AI Hub API token "
                        "(default QAI_HUB_API_TOKEN); the token itself never goes in a file.",
                        only="ai-hub"),
    "project": _Field("str", "The AI Hub project jobs are filed under.", only="ai-hub"),
    "options": _Field("str", "Extra AI Hub compile options (e.g. --compute_unit npu).",
                      only="ai-hub"),
    "api_url": _Field("str", "The AI Hub API address (default: AI Hub's own).", only="ai-hub"),
    "quantize": _Field("enum", "Who quantizes: qnn-ci (default: AI Hub compiles the QDQ model "
                       "qnn-ci made with the export's settings, run on the CPU as the reference) "
                       "or ai-hub (AI Hub quantizes from the bit widths).", only="ai-hub",
                       choices=("qnn-ci", "ai-hub")),
    "job_timeout_s": _Field("number", "Time limit per AI Hub job, submission to end, seconds "
                            "(default 3600).", only="ai-hub", minimum=0, exclusive_min=True),
    "max_parallel": _Field("int", "At most this many exports on AI Hub at once from this "
                           "machine (pytest -n workers share it; default 4).", only="ai-hub",
                           minimum=1, maximum=64),
}
_REQUIRED = {"ssh": ("host", "key_file"), "adb": ("serial",), "local": (), "ai-hub": ()}


def _applies(f: _Field, transport: str) -> bool:
    if f.only is not None:
        return f.only == transport
    return not f.shell or transport in SHELL_TRANSPORTS


def _schema_for(f: _Field) -> dict[str, Any]:
    s: dict[str, Any]
    if f.kind == "enum":
        s = {"type": "string", "enum": list(f.choices)}
    elif f.kind in ("str", "path"):
        s = {"type": "string", "minLength": 1}
    elif f.kind == "envname":
        s = {"type": "string", "pattern": "^" + _ENV_NAME.pattern[:-2] + "$"}
    elif f.kind == "abs":
        s = {"type": "string", "pattern": "^/"}
    elif f.kind == "env":
        s = {"type": "object", "propertyNames": {"pattern": "^" + _ENV_NAME.pattern[:-2] + "$"},
             "additionalProperties": {"type": ["string", "number"]}}
    else:
        s = {"type": "integer" if f.kind == "int" else "number"}
        if f.minimum is not None:
            s["exclusiveMinimum" if f.exclusive_min else "minimum"] = f.minimum
        if f.maximum is not None:
            s["maximum"] = f.maximum
    s["description"] = f.help
    return s


BOARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One board: how to reach it and where to work on it.",
    "additionalProperties": False,
    "required": ["transport"],
    "properties": {name: _schema_for(f) for name, f in _FIELDS.items()},
    "allOf": [
        {"if": {"properties": {"transport": {"const": t}}, "required": ["transport"]},
         "then": {"required": list(req),
                  "properties": {k: False for k, f in _FIELDS.items() if not _applies(f, t)}}}
        for t, req in _REQUIRED.items()
    ] + [{"if": {"properties": {"transport": {"const": "ai-hub"}}, "required": ["transport"]},
          "then": {"anyOf": [{"required": ["device"]}, {"required": ["chipset"]}]}}],
}
BOARDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Boards by name.",
    "propertyNames": {"pattern": NAME_PATTERN},
    "additionalProperties": BOARD_SCHEMA,
}


class _Ctx:
    def __init__(self, source: Path, lines: dict[KeyPath, int] | None,
                 prefix: KeyPath) -> None:
        self.source = source
        self.lines = lines or {}
        self.prefix = prefix

    def error(self, path: KeyPath, message: str) -> UserError:
        full = (*self.prefix, *path)
        return UserError(message, file=self.source, line=line_of(self.lines, full),
                         key=dotted(full) or None)


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _value(ctx: _Ctx, path: KeyPath, f: _Field, value: Any) -> Any:
    key = str(path[-1])
    if f.kind == "enum":
        if value not in f.choices:
            hint = _did_you_mean(str(value), list(f.choices))
            raise ctx.error(path, f"{key} must be one of {', '.join(f.choices)}, "
                                  f"got {value!r}{hint}")
        return value
    if f.kind == "envname":
        if not isinstance(value, str) or not _ENV_NAME.match(value):
            raise ctx.error(path, f"{key} must name an environment variable (letters, digits, "
                                  f"'_'), got {value!r}; put the token itself in that variable")
        return value
    if f.kind in ("str", "path", "abs"):
        if not isinstance(value, str) or not value.strip():
            raise ctx.error(path, f"{key} must be a non-empty string, got "
                                  f"{_type_name(value)} {value!r}")
        if f.kind == "abs" and not value.startswith("/"):
            raise ctx.error(path, f"{key} must be an absolute path on the board, got {value!r}")
        if f.kind == "path":
            p = Path(value).expanduser()
            return p if p.is_absolute() else (ctx.source.parent / p).resolve()
        return value
    if f.kind == "env":
        if not isinstance(value, dict):
            raise ctx.error(path, f"env must be a mapping of NAME: value, got "
                                  f"{_type_name(value)}")
        out: dict[str, str] = {}
        for name, v in value.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ctx.error((*path, str(name)), f"{name!r} is not a valid environment "
                                                    "variable name")
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise ctx.error((*path, name), f"env values must be strings or numbers, got "
                                               f"{_type_name(v)} {v!r}")
            out[name] = str(v)
        return out
    want_int = f.kind == "int"
    ok = isinstance(value, int) if want_int else isinstance(value, int | float)
    if isinstance(value, bool) or not ok:
        raise ctx.error(path, f"{key} must be {'an integer' if want_int else 'a number'}, "
                              f"got {_type_name(value)} {value!r}")
    if f.minimum is not None and (value <= f.minimum if f.exclusive_min else value < f.minimum):
        raise ctx.error(path, f"{key} must be {'>' if f.exclusive_min else '>='} "
                              f"{f.minimum:g}, got {value!r}")
    if f.maximum is not None and value > f.maximum:
        raise ctx.error(path, f"{key} must be <= {f.maximum:g}, got {value!r}")
    return value


def _parse_board(ctx: _Ctx, name: Any, raw: Any) -> BoardConfig:
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        raise ctx.error((str(name),), f"board name {name!r} must be letters, digits, '_', "
                                      "'.' or '-'")
    if not isinstance(raw, dict):
        raise ctx.error((name,), f"board {name} must be a mapping of settings, got "
                                 f"{_type_name(raw)}")
    for key in raw:
        if key not in _FIELDS:
            hint = _did_you_mean(str(key), list(_FIELDS))
            raise ctx.error((name, str(key)), f"unknown key {key!r}{hint}; allowed: "
                                              f"{', '.join(_FIELDS)}")
    if "transport" not in raw:
        raise ctx.error((name,), f"board {name} needs transport: ({', '.join(TRANSPORTS)})")
    transport = _value(ctx, (name, "transport"), _FIELDS["transport"], raw["transport"])
    values: dict[str, Any] = {}
    for key, value in raw.items():
        f = _FIELDS[key]
        if f.only and f.only != transport:
            raise ctx.error((name, key), f"{key} applies to {f.only} boards only, not to "
                                         f"this {transport} board; remove it")
        if not _applies(f, transport):
            raise ctx.error((name, key), f"{key} applies to boards qnn-ci runs commands on "
                                         f"({', '.join(SHELL_TRANSPORTS)}), not to this "
                                         f"{transport} board (AI Hub runs jobs); remove it")
        values[key] = _value(ctx, (name, key), f, value)
    for key in _REQUIRED[transport]:
        if key not in values:
            raise ctx.error((name,), f"{transport} board {name} needs {key}: "
                                     f"({_FIELDS[key].help})")
    if transport == "ai-hub" and "device" not in values and "chipset" not in values:
        raise ctx.error((name,), f"ai-hub board {name} needs device: (an AI Hub device name, "
                                 "e.g. 'RB3 Gen 2 (Proxy)') or chipset: (e.g. "
                                 "qualcomm-qcs6490-proxy)")
    if "soc" in values:
        line = line_of(ctx.lines, (*ctx.prefix, name, "soc"))
        values["soc"] = get_soc(values["soc"], file=str(ctx.source), line=line,
                                key=dotted((*ctx.prefix, name, "soc"))).name
    if values.get("work_root", "/tmp/qnn-ci").rstrip("/") == "":
        raise ctx.error((name, "work_root"), "work_root must be a dedicated folder, not /")
    net_run = values.get("net_run", "")
    if "/" in net_run and not net_run.startswith("/"):
        raise ctx.error((name, "net_run"), f"net_run must be absolute or a bare name on "
                                           f"PATH, got {net_run!r}")
    return BoardConfig(name=name, **values)


def parse_boards(data: Any, *, source: Path, lines: dict[KeyPath, int] | None = None,
                 prefix: KeyPath = ("boards",)) -> dict[str, BoardConfig]:
    """Boards from the mapping under ``boards:``; ``source`` is the file it came from.

    ``lines`` maps key paths (from the file's root, e.g. ``("boards", "kit",
    "host")``) to line numbers, as ``qnn_ci.manifest.yaml_lines`` produces them.
    """
    ctx = _Ctx(Path(source), lines, prefix)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ctx.error((), f"boards must be a mapping of board name to settings, got "
                            f"{_type_name(data)}")
    return {str(name): _parse_board(ctx, name, raw) for name, raw in data.items()}


def load_boards_file(path: Path) -> dict[str, BoardConfig]:
    """Boards from a ``qnn-boards.yaml`` (a top-level ``boards:`` mapping)."""
    from qnn_ci.manifest.yaml_lines import load_yaml_with_lines

    path = Path(path)
    data, lines = load_yaml_with_lines(path)
    ctx = _Ctx(path, lines, ())
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ctx.error((), "expected a mapping with a top-level boards: key")
    for key in data:
        if key not in ("boards", "version"):
            hint = _did_you_mean(str(key), ["boards", "version"])
            raise ctx.error((str(key),), f"unknown key {key!r}{hint}; a boards file holds "
                                         "boards: (and optionally version: 1)")
    if data.get("version", 1) != 1:
        raise ctx.error(("version",), f"unsupported version {data['version']!r}; use 1")
    return parse_boards(data.get("boards"), source=path, lines=lines)
