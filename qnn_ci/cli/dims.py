"""Parsing `--dim INPUT=d0,d1,...` options (shared by several commands)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from qnn_ci.errors import UserError


def parse_dims(values: list[str], inputs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """{input: dims}; every error names the option. ``inputs`` maps graph input names
    to objects with a ``dims`` attribute (or anything, when rank is not checked)."""
    out: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, text = value.rpartition("=")
        if not sep or not name:
            raise UserError(f"--dim {value!r}: expected INPUT=d0,d1,... (e.g. x=1,3,224,224)")
        if name not in inputs:
            close = difflib.get_close_matches(name, list(inputs), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"--dim {value!r}: the model has no input {name!r}{hint}; "
                            f"inputs: {', '.join(inputs)}")
        try:
            dims = tuple(int(d) for d in text.split(",")) if text.strip() else ()
        except ValueError:
            raise UserError(f"--dim {value!r}: dims must be integers separated by commas"
                            ) from None
        if any(d < 1 for d in dims):
            raise UserError(f"--dim {value!r}: dims must be positive")
        declared = getattr(inputs[name], "dims", None)
        if declared is not None and len(declared) != len(dims):
            raise UserError(f"--dim {value!r}: rank {len(dims)} but input {name!r} has rank "
                            f"{len(declared)} ({list(declared)})")
        out[name] = dims
    return out
