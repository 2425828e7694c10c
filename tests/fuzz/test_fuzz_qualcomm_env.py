"""Fuzz `.qualcomm-env` reading: any bytes give a result or a `UserError`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.errors import UserError
from qnn_ci.manifest.qualcomm_env import KEYS, MARKER, parse

_KEYS = [k for spellings in KEYS.values() for k in spellings] + [MARKER, "X", "export"]
_line = st.builds(lambda k, v, q: f"{k}={q}{v}{q}", st.sampled_from(_KEYS),
                  st.text(max_size=30), st.sampled_from(["", "'", '"']))


def _check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ".qualcomm-env"
        path.write_bytes(data)
        try:
            env = parse(path)
            env.board()
            env.esdk_env()
            env.describe()
        except UserError as exc:
            assert "\n" not in str(exc)


@given(st.binary(max_size=400))
def test_any_bytes(data: bytes) -> None:
    _check(data)


@given(st.lists(_line, max_size=12))
def test_plausible_lines(lines: list[str]) -> None:
    _check("\n".join(lines).encode("utf-8", errors="surrogatepass"))
