"""A cached `qnn-ci run --junit` reports this run's time per stage (the cache read),
and the run that made the result as the property `qnn.original_duration_s`."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qnn_ci.cli import main
from tests.core.graphs import scale_model

SLOW_GEN = '''
import time
import numpy as np

def slow(count):
    time.sleep(2.0)                     # the original run takes at least this long
    rng = np.random.default_rng(3)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 8)).astype(np.float32)}
'''


def _cases(junit: Path) -> dict[str, ET.Element]:
    return {c.get("name") or "": c for c in ET.parse(junit).getroot().iter("testcase")}


def _props(case: ET.Element) -> dict[str, str]:
    return {p.get("name") or "": p.get("value") or "" for p in case.iter("property")}


def test_a_cached_run_reports_its_own_time(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    scale_model(tmp_path / "m.onnx", dims=["N", 8])
    (tmp_path / "gens.py").write_text(SLOW_GEN)
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text(textwrap.dedent("""
        defaults:
          inputs: {x: {shape: [1, 8]}}
          calibration: {generator: "gens:slow", samples: 4, held_out: 1}
        exports:
          - name: a
            model: m.onnx
        """).lstrip())
    args = ["run", str(manifest), "--workdir", str(tmp_path / "w"), "--stage", "calibration"]
    assert main([*args, "--junit", str(tmp_path / "first.xml")]) == 0, capsys.readouterr()
    first = _cases(tmp_path / "first.xml")["a::calibration"]
    original = float(first.get("time") or 0)
    assert original >= 2.0
    assert "qnn.cached" not in _props(first) and "qnn.original_duration_s" not in _props(first)

    assert main([*args, "--junit", str(tmp_path / "again.xml")]) == 0, capsys.readouterr()
    again = _cases(tmp_path / "again.xml")
    cal = again["a::calibration"]
    props = _props(cal)
    assert props["qnn.cached"] == "true"
    assert float(props["qnn.original_duration_s"]) == pytest.approx(original, abs=1e-3)
    # This run's time: the read, not the 2 s generator (a generous bound).
    assert cal.get("time") is not None and float(cal.get("time") or 0) < 1.0
    shapes = again["a::static_shapes"]
    assert _props(shapes)["qnn.cached"] == "true" and shapes.get("time") is not None
    # The suite's time adds up this run's times, not the original ones.
    suite_time = float(ET.parse(tmp_path / "again.xml").getroot().get("time") or 0)
    assert suite_time < 1.0 <= original
