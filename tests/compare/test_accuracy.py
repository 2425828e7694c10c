"""onnxruntime's oracle: the HTP must be at least as accurate as the CPU backend."""

from __future__ import annotations

import re

import numpy as np
import pytest

from qnn_ci.compare.accuracy import accuracy_rule
from qnn_ci.compare.outputs import load_output_set
from qnn_ci.engine.results import Severity
from tests.compare.conftest import make_net_run

TRUTH = np.linspace(0.0, 10.0, 1001)            # range 10: 0.4 % of it is 0.04


def _sets(tmp_path, cpu, htp, truth=TRUTH, name="y"):
    sets = []
    for side, values in (("truth", truth), ("cpu", cpu), ("htp", htp)):
        sets.append(load_output_set(make_net_run(tmp_path / side, {name: [values]})))
    return sets


def test_htp_better_than_cpu_holds(tmp_path, rng):
    cpu = TRUTH + 0.02 * rng.standard_normal(TRUTH.size)
    htp = TRUTH + 0.001 * rng.standard_normal(TRUTH.size)
    [f] = accuracy_rule(*_sets(tmp_path, cpu, htp))
    assert (f.check, f.severity, f.subject) == ("compare.accuracy", Severity.INFO, "y")
    assert "at least as accurate" in f.message


def test_htp_slightly_worse_within_tolerance_holds(tmp_path):
    [f] = accuracy_rule(*_sets(tmp_path, TRUTH + 0.01, TRUTH + 0.04))   # excess 0.03 < 0.04
    assert f.severity == Severity.INFO


def test_htp_worse_beyond_tolerance_fails_with_numbers(tmp_path):
    htp = TRUTH + 0.01
    htp[[3, 500, 900]] += 0.05                                          # excess 0.05 > 0.04
    [f] = accuracy_rule(*_sets(tmp_path, TRUTH + 0.01, htp))
    assert (f.check, f.severity) == ("compare.accuracy", Severity.ERROR)
    assert "on 3 of 1001 elements beyond 0.400% of the truth's range 10" in f.message
    assert "worst at index" in f.message
    need = float(re.search(r"loosest passing tolerance: ([0-9.]+)%", f.message).group(1))
    assert 0.5 <= need <= 0.502
    # ... and that tolerance does pass
    [ok] = accuracy_rule(*_sets(tmp_path / "again", TRUTH + 0.01, htp), tolerance=need / 100)
    assert ok.severity == Severity.INFO


def test_nan_on_htp_where_cpu_is_finite_breaks_the_rule(tmp_path):
    htp = TRUTH.copy()
    htp[7] = np.nan
    [f] = accuracy_rule(*_sets(tmp_path, TRUTH + 0.01, htp))
    assert f.severity == Severity.ERROR and "on 1 of 1001" in f.message
    assert "index 7" in f.message and "none (non-finite HTP values)" in f.message


def test_missing_htp_output_is_reported(tmp_path):
    truth, cpu, _ = _sets(tmp_path, TRUTH, TRUTH)
    htp = load_output_set(make_net_run(tmp_path / "h2", {"other": [TRUTH]}))
    found = accuracy_rule(truth, cpu, htp)
    assert any(f.check == "compare.missing" and f.severity == Severity.ERROR
               and "no output 'y'" in f.message for f in found)
    assert not any(f.check == "compare.accuracy" for f in found)


def test_short_cpu_output_is_reported(tmp_path):
    found = accuracy_rule(*_sets(tmp_path, TRUTH[:-1], TRUTH))
    assert [f.check for f in found] == ["compare.short"]


@pytest.mark.parametrize("chunk", [1, 64, 10_000])
def test_chunking_does_not_change_the_verdict(tmp_path, chunk):
    htp = TRUTH + 0.01
    htp[999] += 0.1
    [f] = accuracy_rule(*_sets(tmp_path, TRUTH + 0.01, htp), chunk=chunk)
    assert f.severity == Severity.ERROR and "index 999" in f.message
