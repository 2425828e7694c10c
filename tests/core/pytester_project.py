"""A pytester folder for plugin tests: a tiny model, a generators module and a
manifest, with no SDK root and not under GitHub Actions."""

from __future__ import annotations

import textwrap

import pytest

from tests.core.graphs import scale_model

GEN = '''
import os
import numpy as np

def floats(count):
    with open(os.environ["GEN_LOG"], "a") as fh:
        fh.write("called\\n")
    rng = np.random.default_rng(3)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32)}

def doubles(count):
    yield {"x": np.zeros((1, 4), np.float64)}
'''


def qnn_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                manifest: str) -> pytest.Pytester:
    """``m.onnx`` (input x: [N, 4]), ``gens.py`` (``GEN``; each call of ``floats`` is
    logged in ``gen.log``) and ``qnn-ci.yaml`` (``manifest``, dedented)."""
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("GEN_LOG", str(pytester.path / "gen.log"))
    scale_model(pytester.path / "m.onnx", dims=["N", 4])
    (pytester.path / "gens.py").write_text(GEN)
    (pytester.path / "qnn-ci.yaml").write_text(textwrap.dedent(manifest).lstrip())
    return pytester
