"""`qnn-ci namespace FILE [--json] [--expect KEY=VALUE]...`

Read the converter's recorded argument list back from a generated source (with
or without ``.cpp``) or a ``_net.json``. Exit 0 when read (and every
``--expect`` holds), 1 when an expectation does not hold, 2 when there is no
record, the record is cut off (file truncated or edited) or the file is
unreadable.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.sdk.record import (
    ARGS_OF_INTEREST,
    ConverterRecord,
    canonical_key,
    literal,
    loose_literal,
    read_record,
    same_value,
    truncated_text,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", type=Path,
                        help="the generated model source (.cpp or no extension) or _net.json")
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    parser.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                        help="fail (exit 1) unless the record has KEY=VALUE; KEY may be an "
                             "alias spelling (act_bw); values compare semantically "
                             "(True == true, 16 == 16.0); repeatable")


def _parse_expect(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"expected KEY=VALUE, got {text!r}", key="--expect")
    return key.strip(), value


def check_expectations(rec: ConverterRecord, expects: list[str]) -> list[dict[str, Any]]:
    out = []
    for text in expects:
        key, expected = _parse_expect(text)
        recorded = rec.raw_value(key)
        ok = recorded is not None and same_value(loose_literal(expected), literal(recorded))
        out.append({"key": key, "canonical": canonical_key(key), "expected": expected,
                    "recorded": recorded, "ok": ok})
    return out


def _show(raw: str | None) -> str:
    if raw is None:
        return "(not recorded)"
    return raw if raw != "" else "(empty)"


def run(args: argparse.Namespace) -> int:
    for text in args.expect:             # bad --expect syntax first, before any file I/O
        _parse_expect(text)
    rec = read_record(args.file)
    if rec.truncated:
        raise UserError(truncated_text(rec), file=args.file)
    checks = check_expectations(rec, args.expect)
    failed = [c for c in checks if not c["ok"]]
    if args.json:
        payload = rec.to_dict() | {"expect": checks}
        print(json.dumps(payload, indent=2))
        return 1 if failed else 0
    version = rec.sdk_version or "unknown"
    if rec.sdk_version_full:
        version += f" ({rec.sdk_version_full})"
    print(f"{args.file}")
    print(f"  tool:        {rec.tool or '(not named)'}")
    print(f"  SDK version: {version}")
    sep = "'; '" if rec.era == "semicolon" else "spaces"
    print(f"  record:      {len(rec.raw_args)} arguments separated by {sep}")
    for key in ARGS_OF_INTEREST:
        if rec.has(key):
            spelled = "/".join(rec.spellings(key))
            print(f"  {spelled} = {_show(rec.raw_value(key))}")
    for c in rec.conflicts:
        print(f"warning: {c.message()}")
    for p in rec.problems:
        print(f"warning: {p}")
    for c in checks:
        if c["ok"]:
            print(f"ok: {c['key']} = {_show(c['recorded'])}")
        else:
            print(f"{c['key']}: expected {c['expected']}, recorded {_show(c['recorded'])}")
    return 1 if failed else 0
