"""`qnn-ci compare`: exit codes 0 / 1 / 2, the human table, the --json shape."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.cli import main
from tests.compare.conftest import make_net_run, write_raw


@pytest.fixture
def sets(tmp_path, rng):
    ref = [rng.standard_normal(500) for _ in range(2)]
    good = [r + 1e-4 * rng.standard_normal(500) for r in ref]
    bad = [good[0], ref[1] + 0.5 * rng.standard_normal(500)]
    return (make_net_run(tmp_path / "ref", {"logits": ref}),
            make_net_run(tmp_path / "good", {"logits": good}),
            make_net_run(tmp_path / "bad", {"logits": bad}))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["compare", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_exit_0_when_within_thresholds(capsys, sets):
    ref, good, _ = sets
    rc, out, _ = run(capsys, ref, good)
    assert rc == 0
    assert "output logits  [cosine>=0.99]" in out
    assert "sample     cosine" in out and out.count(" ok\n") == 2
    last = out.rstrip().splitlines()[-1]
    assert re.fullmatch(r"compare: PASSED: worst cosine (0\.99\d{4}|1\.000000) "
                        r"\(logits, sample [01]\)", last), last


def test_exit_1_with_failure_lines(capsys, sets):
    ref, _, bad = sets
    rc, out, _ = run(capsys, ref, bad, "--threshold", "logits:cosine=0.999")
    assert rc == 1
    assert "FAIL cosine" in out
    assert "FAIL [compare.threshold] logits sample 1: cosine" in out
    assert "loosest passing bound: cosine=" in out
    assert "compare: FAILED" in out


def test_exit_1_on_missing_output_and_nan(capsys, tmp_path, sets):
    ref, good, _ = sets
    (good / "Result_1" / "logits.raw").unlink()
    rc, out, _ = run(capsys, ref, good)
    assert rc == 1 and "[compare.missing] logits sample 1" in out
    v = np.ones(10)
    write_raw(tmp_path / "n1" / "y.raw", v)
    v[3] = np.nan
    write_raw(tmp_path / "n2" / "y.raw", v)
    rc, out, _ = run(capsys, tmp_path / "n1", tmp_path / "n2")
    assert rc == 1 and "[compare.nan_inf]" in out


@pytest.mark.parametrize(("argv", "says"), [
    (["--threshold", "cosine:0.9"], "bad threshold 'cosine:0.9'"),
    (["--threshold", "logitz:cosine=0.9"], "'logitz'"),
    (["--dtype", "float33"], "unknown dtype 'float33'"),
    (["--shape", "1,x"], "bad shape '1,x'"),
    (["--quant-step", "logits:abc"], "bad quantization step 'logits:abc'"),
    (["--quant-step", "-1"], "must be a positive number"),
    (["--quant-step", "logitz:1e-3"], "'logitz'"),
])
def test_exit_2_on_bad_options(capsys, sets, argv, says):
    ref, good, _ = sets
    rc, out, err = run(capsys, ref, good, *argv)
    assert rc == 2 and out == ""
    assert says in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_exit_2_on_unreadable_path_and_bare_raw(capsys, tmp_path, sets):
    ref, *_ = sets
    rc, _, err = run(capsys, ref, tmp_path / "missing")
    assert rc == 2 and "missing: no such file or folder" in err
    raw = ref / "Result_0" / "logits.raw"
    rc, _, err = run(capsys, raw, raw)
    assert rc == 2 and "give its dtype (--dtype float32)" in err


def test_single_raw_files_with_dtype_and_shape(capsys, tmp_path, rng):
    v = rng.standard_normal(12).astype(np.float16)
    a = write_raw(tmp_path / "a.raw", v, "float16")
    b = write_raw(tmp_path / "b_htp.raw", v, "float16")
    rc, out, _ = run(capsys, a, b, "--dtype", "float16", "--shape", "3,4")
    assert rc == 0 and "output a (test: b_htp)" in out
    rc, out, _ = run(capsys, a, b, "--dtype", "float16", "--shape", "2,7")
    assert rc == 1 and "expected 14 (shape [2, 7])" in out


def test_quant_step_makes_a_near_zero_reference_plain(capsys, tmp_path, rng):
    ref = 6.8e-6 * rng.random(300) ** 6
    noisy = ref + 1.3e-6 * rng.standard_normal(300)
    a = make_net_run(tmp_path / "a", {"maps": [ref]})
    b = make_net_run(tmp_path / "b", {"maps": [noisy]})
    rc, out, _ = run(capsys, a, b)
    assert rc == 1 and "[compare.threshold] maps sample 0: cosine" in out
    rc, out, _ = run(capsys, a, b, "--quant-step", "maps:1.52587890625e-05")
    assert rc == 1 and "[compare.threshold]" not in out
    assert "FAIL [compare.reference_near_zero] maps sample 0: the reference is near zero" in out
    assert "--threshold maps:max_abs=" in out
    rc, out, _ = run(capsys, a, b, "--quant-step", "1.52587890625e-05", "-t", "max_abs=1e-5")
    assert rc == 0 and "warn [compare.reference_near_zero]" in out


def test_json_shape(capsys, sets):
    ref, _, bad = sets
    rc, out, _ = run(capsys, ref, bad, "--json", "-t", "max_abs=10")
    assert rc == 1
    d = json.loads(out)
    assert set(d) == {"passed", "summary", "failing", "reference", "test", "outputs",
                      "findings"}
    assert d["passed"] is False and d["summary"].startswith("worst cosine")
    [failing] = d["failing"]
    assert (failing["output"], failing["metric"], failing["sample"]) == ("logits", "cosine", 1)
    [o] = d["outputs"]
    assert o["name"] == "logits" and o["bounds"] == {"cosine": 0.99, "max_abs": 10.0}
    assert [s["sample"] for s in o["samples"]] == [0, 1]
    assert [s["verdict"] for s in o["samples"]] == ["ok", "FAIL cosine"]
    m = o["samples"][1]["metrics"]
    for key in ("cosine", "max_abs", "mean_abs", "snr", "psnr", "ref_peak", "quantiles",
                "histogram", "reference_near_zero", "nonfinite_mismatch", "test_peak",
                "resolution", "near_zero_reason"):
        assert key in m
    [f] = d["findings"]
    assert set(f) == {"check", "message", "severity", "subject"}
    assert (f["check"], f["severity"], f["subject"]) == ("compare.threshold", "error", "logits")


def test_installed_entry_point_runs(sets):
    ref, good, _ = sets
    proc = subprocess.run([sys.executable, "-m", "qnn_ci", "compare", str(ref), str(good),
                           "--json"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["passed"] is True


def test_summary_headlines_the_metric_that_failed(tmp_path, capsys) -> None:
    import numpy as np

    from qnn_ci.cli import main

    np.arange(10, dtype=np.float32).tofile(tmp_path / "a.raw")
    (np.arange(10, dtype=np.float32) + 0.01).tofile(tmp_path / "b.raw")
    code = main(["compare", str(tmp_path / "a.raw"), str(tmp_path / "b.raw"), "--dtype",
                 "float32", "-t", "max_abs=1e-9", "--json"])
    import json

    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["summary"].startswith("worst max_abs 0.01")
