"""`qnn-ci schema`: print the manifest's JSON Schema (for editors)."""

from __future__ import annotations

import argparse
import json

from qnn_ci.manifest.loader import schema


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", metavar="MANIFEST", help="validate a manifest and say so")


def run(args: argparse.Namespace) -> int:
    if args.check:
        from qnn_ci.manifest.loader import load_manifest

        m = load_manifest(args.check)
        print(f"{m.path}: valid ({len(m.exports)} export(s): "
              f"{', '.join(e.name for e in m.exports)})")
        return 0
    print(json.dumps(schema(), indent=2))
    return 0
