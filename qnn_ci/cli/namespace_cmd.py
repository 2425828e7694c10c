"""`qnn-ci namespace FILE [--json] [--expect KEY=VALUE]... [--model MODEL.onnx]`

Read the converter's recorded argument list back from a generated source (with
or without ``.cpp``) or a ``_net.json``, with the SDK version and where it was
read (the ``QNN_SDK_VERSION`` stamp, or the recorded tool path for sources up to
2.22). With ``--model``, also check that every integer/bool graph input of the
model stayed an integer/bool QNN data type in FILE and in its sibling
(``_net.json`` beside a source, the source beside a ``_net.json``) when present.
Exit 0 when read (and every ``--expect`` and the input check hold), 1 when an
expectation or the input check does not hold, 2 when there is no record, the
record is cut off (file truncated or edited) or a file is unreadable.
"""

from __future__ import annotations

import argparse
import json
import os
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
    version_text,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", type=Path,
                        help="the generated model source (.cpp or no extension) or _net.json")
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    parser.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE",
                        help="fail (exit 1) unless the record has KEY=VALUE; KEY may be an "
                             "alias spelling (act_bw); values compare semantically "
                             "(True == true, 16 == 16.0, [False] == False); repeatable")
    parser.add_argument("--model", type=Path, metavar="MODEL.onnx",
                        help="the ONNX model converted: fail (exit 1) when an integer or "
                             "bool graph input is not an integer/bool data type in the "
                             "converter output (quantized by mistake)")


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


def sibling(path: Path) -> Path | None:
    """The other converter output of the pair: ``X_net.json`` beside the source ``X.cpp``
    (or ``X``), the source beside ``X_net.json``; None when it does not exist."""
    stem = os.path.splitext(os.path.realpath(path))[0]
    if stem.endswith("_net") and path.suffix.lower() == ".json":
        candidates = [Path(stem[:-4] + ".cpp"), Path(stem[:-4])]
    else:
        candidates = [Path(stem + "_net.json")]
    return next((c for c in candidates if c.is_file()), None)


def check_integer_inputs(file: Path, model: Path, rec: ConverterRecord) -> list[Any]:
    """``QuantizedInput`` problems of ``model``'s integer inputs in ``file`` and its sibling."""
    from qnn_ci.model.onnx_io import load_model
    from qnn_ci.sdk.cpp_model import read_cpp_model
    from qnn_ci.sdk.integer_inputs import check_outputs, integer_inputs_of, overrides_names
    from qnn_ci.sdk.net_json import read_net_json
    from qnn_ci.sdk.record import looks_like_json
    from qnn_ci.util.safe_read import open_regular

    wanted = integer_inputs_of(load_model(model))
    if not wanted:
        return []
    outputs: list[Any] = []
    for path in (file, sibling(file)):
        if path is None:
            continue
        with open_regular(path, cap=1 << 62, what="converter output",
                          hint="pass the generated model source or its _net.json") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
        outputs.append(read_net_json(path) if looks_like_json(head, path)
                       else read_cpp_model(path))
    found = check_outputs(wanted, outputs, record=rec)
    recorded = rec.raw_value("quantization_overrides")
    if found and recorded not in (None, "", "None"):
        ov = Path(str(recorded)).expanduser()
        ov = ov if ov.is_absolute() else file.resolve().parent / ov
        named = overrides_names(ov) if ov.is_file() else set()
        found = check_outputs(wanted, outputs, record=rec, overridden=named & set(wanted))
    return found


def run(args: argparse.Namespace) -> int:
    for text in args.expect:             # bad --expect syntax first, before any file I/O
        _parse_expect(text)
    rec = read_record(args.file)
    if rec.truncated:
        raise UserError(truncated_text(rec), file=args.file)
    checks = check_expectations(rec, args.expect)
    failed = [c for c in checks if not c["ok"]]
    unkept = check_integer_inputs(args.file, args.model, rec) if args.model else []
    if args.json:
        payload = rec.to_dict() | {"expect": checks, "integer_inputs": [
            {"input": q.input, "dtype": q.dtype, "file": q.file, "data_type": q.data_type,
             "keep_with": q.flags, "recorded": q.recorded, "cause": q.cause,
             "message": q.message()} for q in unkept]}
        print(json.dumps(payload, indent=2))
        return 1 if failed or unkept else 0
    print(f"{args.file}")
    print(f"  tool:        {rec.tool or '(not named)'}")
    if rec.tool_path:
        print(f"  tool path:   {rec.tool_path}")
    print(f"  SDK version: {version_text(rec)}")
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
    for q in unkept:
        print(f"error: {q.message()}")
    if args.model and not unkept:
        print(f"ok: the integer/bool inputs of {args.model.name} stayed integer")
    return 1 if failed or unkept else 0
