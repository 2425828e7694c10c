"""The baselines file: written in a stable order, only what changed rewritten, read
back whatever the bytes (a result or one line naming file, line and key), and the
metrics a run's stage results give; the tolerance rules and the failure line."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.errors import UserError
from qnn_ci.nightly import baselines as bl
from qnn_ci.nightly.regression import Rule, check_tolerances, compare, rule_for

SIM = ("det", "QCS6490", "simulator")


def _entry(cosine: float = 0.99912, **extra: float) -> bl.Entry:
    return bl.Entry(metrics={"sim_vs_fp32.logits.cosine": cosine, "nodes_on_htp": 34} | extra,
                    commit="3f2c1ab", date="2026-11-28",
                    versions={"qnn_ci": "0.1.0", "onnxruntime_qnn": "1.22.0"})


def test_written_sorted_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "qnn-baselines.yaml"
    board = ("det", "QCS6490", "board:rb3")
    other = ("cls", "SM8550", "simulator")
    changed = bl.update(path, {board: _entry(0.9), SIM: _entry(), other: _entry(0.5)})
    assert changed == sorted([board, SIM, other])
    text = path.read_text()
    assert text.startswith("# qnn-ci baselines")
    # exports, SoCs and scopes sorted; keys of an entry in a fixed order
    assert text.index("cls:") < text.index("det:")
    det = text.index("det:")
    assert det < text.index("board:rb3:") < text.index("simulator:", det)
    entry = text[text.index("simulator:", text.index("det:")):]
    assert [k for k in ("commit:", "date:", "versions:", "metrics:") if k in entry] == \
        ["commit:", "date:", "versions:", "metrics:"]
    assert entry.index("nodes_on_htp") < entry.index("sim_vs_fp32.logits.cosine")
    back = bl.load(path)
    assert back is not None and back.get(*SIM) == _entry()
    assert back.get("det", "QCS6490", "board:rb3").metrics["sim_vs_fp32.logits.cosine"] == 0.9
    # the same content gives the same bytes
    bl.write(tmp_path / "again.yaml", back.entries)
    assert (tmp_path / "again.yaml").read_text() == text


def test_only_what_changed_is_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "qnn-baselines.yaml"
    board = ("det", "QCS6490", "board:rb3")
    bl.update(path, {SIM: _entry(), board: _entry(0.9)})
    before = path.read_text()
    stamp = path.stat().st_mtime_ns
    # the same numbers from a later commit (and 6-digit JUnit text): nothing written
    later = bl.Entry(metrics={"sim_vs_fp32.logits.cosine": 0.9991200001, "nodes_on_htp": 34},
                     commit="9999999", date="2027-01-01", versions=_entry().versions)
    assert bl.update(path, {SIM: later}) == []
    assert path.read_text() == before and path.stat().st_mtime_ns == stamp
    # one number moved: that entry (and only it) takes the new commit
    moved = bl.Entry(metrics={"sim_vs_fp32.logits.cosine": 0.998, "nodes_on_htp": 34},
                     commit="9999999", date="2027-01-01", versions=_entry().versions)
    assert bl.update(path, {SIM: moved}) == [SIM]
    after = path.read_text()
    diff = [d for d in difflib.ndiff(before.splitlines(), after.splitlines())
            if d[:1] in "+-"]
    assert sorted(d[0] + d[1:].strip() for d in diff) == sorted([
        "+commit: '9999999'", "+date: '2027-01-01'", "+sim_vs_fp32.logits.cosine: 0.998",
        "-commit: 3f2c1ab", "-date: '2026-11-28'", "-sim_vs_fp32.logits.cosine: 0.99912"])
    assert bl.load(path).get(*board).commit == "3f2c1ab"     # untouched


@pytest.mark.parametrize(("text", "where", "what"), [
    ("exports: [1, 2]\n", ":1: exports", "must be a mapping, not a list"),
    ("version: 2\n", ":1: version", "version 2 is not supported"),
    ("version: true\n", ":1: version", "is not supported"),
    ("colour: red\n", ":1: colour", "unknown key 'colour'"),
    ("exports:\n  det:\n    QCS6490:\n      simlator: {}\n",
     ":4: exports.det.QCS6490.simlator", "unknown scope 'simlator'"),
    ("exports:\n  det:\n    QCS6490:\n      simulator:\n        metrics:\n"
     "          nodes_on_htp: many\n",
     ":6: exports.det.QCS6490.simulator.metrics.nodes_on_htp",
     "must be a finite number, not str 'many'"),
    ("exports:\n  det:\n    X:\n      board:b:\n        metrics: {a: .nan}\n",
     "exports.det.X.board:b.metrics.a", "must be a finite number"),
    ("exports:\n  det:\n    X:\n      sdk:\n        commit: [1]\n",
     ":5: exports.det.X.sdk.commit", "must be a text, not a list"),
    ("exports: {det: 3}\n", "exports.det", "must be a mapping, not int"),
    ("\x00\x01", "", "invalid YAML"),
    ('"a\\nb": 1\n', ":1: 'a\\nb'", "unknown key 'a\\nb'"),
    ("a: &a [*a]\n", "", ""),
])
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, where: str,
                                               what: str) -> None:
    path = tmp_path / "qnn-baselines.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        bl.load(path)
    line = exc.value.oneline()
    assert "\n" not in line and str(path) in line
    assert where in line and what in line


def test_a_bad_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "qnn-baselines.yaml"
    path.write_text("exports: [oops]\n")
    with pytest.raises(UserError):
        bl.update(path, {SIM: _entry()})
    assert path.read_text() == "exports: [oops]\n"


def test_folder_and_missing_file(tmp_path: Path) -> None:
    assert bl.load(tmp_path / "none.yaml") is None
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(UserError, match=r"dir\.yaml"):
        bl.load(tmp_path / "dir.yaml")


def test_measured_from_stage_results(tmp_path: Path) -> None:
    lib = tmp_path / "libdet.so"
    lib.write_bytes(b"\x7fELF" + b"\0" * 96)
    results = {
        "sim_npu": StageResult("sim_npu", Status.PASSED, properties={"nodes_on_htp": 34}),
        # failed still measured; thresholds (.min) and counts are not metrics
        "sim_numerics": StageResult("sim_numerics", Status.FAILED, properties={
            "sim_vs_fp32.logits.cosine": 0.5, "sim_vs_fp32.logits.cosine.min": 0.99,
            "sim_vs_fp32.a.b.snr": "12.5", "sim_vs_fp32.logits.near_zero_samples": 1,
            "sim_vs_fp32.x.max_abs": "inf", "samples": 2}),
        "model_lib": StageResult("model_lib", Status.PASSED, artefacts={"library": str(lib)}),
        "htp_vs_cpu": StageResult("htp_vs_cpu", Status.PASSED, properties={
            "board": "rb3", "htp_vs_cpu.logits.cosine": 0.999, "cpu_vs_fp32.logits.cosine":
            0.9999, "latency.median_ms": 1.5, "latency.p90_ms": 2, "sdk_version": "2.31"}),
    }
    got = bl.measured(results, board=None)
    assert got == {
        "simulator": {"nodes_on_htp": 34, "sim_vs_fp32.logits.cosine": 0.5,
                      "sim_vs_fp32.a.b.snr": 12.5},
        "sdk": {"library_bytes": 100},
        "board:rb3": {"htp_vs_cpu.logits.cosine": 0.999, "cpu_vs_fp32.logits.cosine": 0.9999,
                      "latency.median_ms": 1.5, "latency.p90_ms": 2}}
    assert bl.versions_of(results, "board:rb3")["sdk"] == "2.31"
    skipped = {k: StageResult(k, Status.SKIPPED, "no board", properties=r.properties)
               for k, r in results.items()}
    assert bl.measured(skipped, board=None) == {}


def test_the_failure_line_and_the_rules() -> None:
    base = _entry(0.99912, **{"latency.median_ms": 2.0, "htp_vs_cpu.y.max_abs": 0.1})
    out = compare({"sim_vs_fp32.logits.cosine": 0.9962, "nodes_on_htp": 34,
                   "latency.median_ms": 2.19, "htp_vs_cpu.y.max_abs": 0.2}, base, {})
    assert out.worse == [
        "HTP vs CPU y max_abs 0.1 → 0.2 (baseline from 3f2c1ab, 2026-11-28; tolerance 25%)",
        "logits cosine 0.99912 → 0.99620 (baseline from 3f2c1ab, 2026-11-28; tolerance 0.001)"]
    assert out.compared == 4 and out.improved == []      # latency +9.5 %: within 10 %
    slower = compare({"latency.median_ms": 2.3}, base, {})
    assert slower.worse == ["latency median_ms 2.00 → 2.30 (baseline from 3f2c1ab, "
                            "2026-11-28; tolerance 10%)"]
    assert slower.not_measured == ["htp_vs_cpu.y.max_abs", "nodes_on_htp",
                                   "sim_vs_fp32.logits.cosine"]
    better = compare({"sim_vs_fp32.logits.cosine": 0.99999, "nodes_on_htp": 33},
                     _entry(0.99), {})
    assert better.improved == ["logits cosine 0.99000 → 0.99999 (baseline from 3f2c1ab, "
                               "2026-11-28; tolerance 0.001)"]
    assert better.worse == ["nodes_on_htp 34 → 33 (baseline from 3f2c1ab, 2026-11-28; "
                            "tolerance 0)"]
    # overrides: by kind, and for one metric
    loose = compare({"sim_vs_fp32.logits.cosine": 0.9962}, base, {"cosine": 0.01})
    assert loose.worse == [] and loose.compared == 1
    assert rule_for("htp_vs_cpu.y.max_abs", {"htp_vs_cpu.y.max_abs": 2}) == Rule(False, 2.0,
                                                                                True)
    assert compare({"new.metric": 1.0}, base, {}).new == ["new.metric"]


def test_unknown_tolerance_names() -> None:
    assert check_tolerances({"cosine": 0.1, "latency": 0.2, "sim_vs_fp32.logits.snr": 1,
                             "latency.p90_ms": 0.3, "nodes_on_htp": 1}) is None
    msg = check_tolerances({"cosin": 0.1})
    assert msg is not None and "unknown metric 'cosin' (did you mean 'cosine'?)" in msg


def test_git_origin(tmp_path: Path) -> None:
    commit, date = bl.git_origin(tmp_path)
    assert commit == "unknown" and len(date) == 10
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert bl.git_origin(repo)[0] == head


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qnn_ci", "baseline", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_cli_bad_input_is_one_line(tmp_path: Path) -> None:
    done = _cli("update", "nope.yaml", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "nope.yaml: manifest not found" in done.stderr
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "qnn-ci.yaml").write_text("exports:\n  - name: a\n    model: m.onnx\n")
    done = _cli("update", "--export", "b", cwd=tmp_path)
    assert done.returncode == 2 and "--export 'b': no such export" in done.stderr
    done = _cli("fix", cwd=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'fix'" in done.stderr


def test_the_manifest_names_the_file_and_results_are_written_there(tmp_path: Path) -> None:
    from qnn_ci.manifest.loader import load_manifest

    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "qnn-ci.yaml").write_text(
        "baselines: ci/nightly.yaml\nexports:\n  - name: a\n    model: m.onnx\n"
        "    target: {soc: SM8550}\n  - name: b\n    model: m.onnx\n")
    manifest = load_manifest(tmp_path / "qnn-ci.yaml")
    where = tmp_path / "ci" / "nightly.yaml"
    assert manifest.baselines == where
    assert all(e.regression.baselines == where for e in manifest.exports)
    (tmp_path / "ci").mkdir()
    npu = StageResult("sim_npu", Status.PASSED, properties={"nodes_on_htp": 3})
    changed, empty = bl.write_for_manifest(manifest, {"a": {"sim_npu": npu}, "b": {}})
    assert changed == [("a", "SM8550", "simulator")] and empty == ["b"]
    entry = bl.load(where).get("a", "SM8550", "simulator")
    assert entry.metrics == {"nodes_on_htp": 3} and entry.versions["qnn_ci"]


def test_a_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    """Remembered in the process, but never past a change of the file."""
    path = tmp_path / "qnn-baselines.yaml"
    bl.write(path, {SIM: _entry()})
    first = bl.load(path)
    assert bl.load(path) is first                           # unchanged: remembered
    path.write_text("exports: 3\n")                        # new content: parsed, refused
    with pytest.raises(UserError, match="must be a mapping"):
        bl.load(path)


def test_latency_methods_compare_only_like_with_like() -> None:
    """A summary's average is not a median: each way of measuring is its own method;
    per-inference text and CSV give the same statistic."""
    from qnn_ci.nightly import baselines as bl

    def method(m: str, source: str | None = None) -> str:
        props = {"latency.method": m} | ({"latency.source": source} if source else {})
        return bl.latency_method(props)

    text, csv = method("profile", "per_inference_text"), method("profile", "per_inference_csv")
    assert text == csv == "profile: per-inference"
    assert method("profile", "summary_average_max") == "profile: summary_average_max"
    assert len({text, method("profile", "summary_average_max"), method("profile", "overall_ips"),
                method("timed", "wall_clock")}) == 4
    assert method("profile") == "profile"        # results from before latency.source
