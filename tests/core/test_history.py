"""`qnn-ci history`: records from the JUnit report of a real `qnn-ci run` (tiny export,
simulator stages, the stand-in SDK), the JSON-lines history, and the drift rule."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from qnn_ci.errors import UserError
from qnn_ci.nightly import history, trends
from tests.core.graphs import FLOATS_GEN

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "ESDK_ENV")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def cli(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qnn_ci", *args], cwd=cwd, env=_env(**extra),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def real_junit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JUnit report of a real `qnn-ci run --junit` on a tiny export with a SoC."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime_qnn")
    from fixtures.qairt_standin import make_sdk
    from tests.core.graphs import tiny_matmul_model
    from tests.core.test_travelling_cache import MANIFEST

    base = tmp_path_factory.mktemp("history")
    sdk = make_sdk(base / "sdk" / "qairt", "2.31.0")
    project = base / "project"
    tiny_matmul_model(project / "models" / "m.onnx")
    (project / "gens.py").write_text(FLOATS_GEN)
    (project / "qnn-ci.yaml").write_text(MANIFEST)
    junit = base / "run.xml"
    done = cli("run", "--workdir", str(base / "work"), "--junit", str(junit), cwd=project,
               QNN_SDK_ROOT=str(sdk))
    assert junit.is_file(), done.stdout + done.stderr
    # the same run through the pytest plugin (its own work folder: measured, not read
    # from the cache), for test_a_real_pytest_report
    pytest_xml = base / "pytest.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--qnn-workdir", str(base / "work-pytest"), "qnn-ci.yaml",
                           "--junitxml", str(pytest_xml)], cwd=project,
                          env=_env(QNN_SDK_ROOT=str(sdk)), capture_output=True, text=True,
                          timeout=600)
    assert pytest_xml.is_file(), done.stdout + done.stderr
    return junit


def test_a_real_pytest_report_gives_the_same_records(real_junit: Path, tmp_path: Path) -> None:
    """pytest --junitxml with the plugin names export and stage in properties and has a
    suite timestamp: the same numbers as qnn-ci run's report, dated by the timestamp."""
    from_run = history.records_from_junit(real_junit, commit="c", where=tmp_path)
    from_pytest = history.records_from_junit(real_junit.with_name("pytest.xml"), where=tmp_path)
    key = ["export", "stage", "soc", "board", "status"]
    assert [{k: r[k] for k in key} for r in from_pytest] == \
        [{k: r[k] for k in key} for r in from_run]
    # the same numbers; the timings were measured by each run
    assert [_untimed(r["metrics"]) for r in from_pytest] == \
        [_untimed(r["metrics"]) for r in from_run]
    stamp = ET.parse(real_junit.with_name("pytest.xml")).getroot().find("testsuite")
    assert stamp is not None
    # the run's qnn.date when the plugin recorded it (junit.add_to_pytest_junit), else
    # pytest's own timestamp
    given = {p.get("name"): p.get("value") for p in stamp.findall("properties/property")}
    assert from_pytest[0]["date"] == history.date_text(
        history.parse_date(given.get("qnn.date") or stamp.get("timestamp") or ""))


def _untimed(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if not k.endswith("_s_per_inference")}


def _props(junit: Path, stage: str) -> dict[str, str]:
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("name") == f"tiny::{stage}":
            return {p.get("name"): p.get("value") for p in case.iter("property")}
    raise AssertionError(f"no testcase tiny::{stage}")


def _lines(db: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in db.read_text().splitlines()]


def test_add_records_the_numbers_of_a_real_run(real_junit: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    done = cli("history", "add", str(real_junit), "--db", str(db), "--commit", "3f2c1ab",
               "--date", "2026-11-28T02:00:00+01:00", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"added \d+ record\(s\) for 1 export\(s\) to .*h\.jsonl\n", done.stdout)
    records = {r["stage"]: r for r in _lines(db)}
    numerics = _props(real_junit, "sim_numerics")
    sim = records["sim_numerics"]
    assert list(sim) == list(history.RECORD_KEYS)
    assert (sim["date"], sim["commit"], sim["export"], sim["soc"], sim["board"]) == \
        ("2026-11-28T01:00:00Z", "3f2c1ab", "tiny", "QCS6490", None)
    for metric in ("cosine", "snr", "max_abs"):
        name = f"sim_vs_fp32.y.{metric}"
        assert sim["metrics"][name] == pytest.approx(float(numerics[f"qnn.{name}"]))
    assert records["sim_npu"]["metrics"]["nodes_on_htp"] == int(
        _props(real_junit, "sim_npu")["qnn.nodes_on_htp"])
    # the SoC of stages that do not report one comes from the export's other stages
    assert records["static_shapes"]["soc"] == "QCS6490"
    statuses = {c.get("name").split("::")[1]: c for c in ET.parse(real_junit).iter("testcase")}
    for stage, record in records.items():
        failed = statuses[stage].find("failure") is not None
        assert (record["status"] == "failed") == failed
        assert not [m for m in record["metrics"] if m.endswith(("duration_s", ".min"))
                    or m.startswith("diagnosis.")], record
    # stages without numbers (skipped board stages, calibration's counts) are not recorded
    assert "htp_vs_cpu" not in records and "calibration" not in records


def test_the_same_report_is_added_once(real_junit: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    first = cli("history", "add", str(real_junit), "--db", str(db), cwd=tmp_path)
    again = cli("history", "add", str(real_junit), "--db", str(db), cwd=tmp_path)
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert "added 0 record(s)" in again.stdout and "already there" in again.stdout
    records = _lines(db)
    assert len({(r["date"], r["stage"]) for r in records}) == len(records)
    # no --date: the run's date the report carries; no --commit outside git: unknown
    suite = ET.parse(real_junit).getroot().find("testsuite")
    assert suite is not None
    run_date = {p.get("name"): p.get("value") for p in suite.iter("property")}["qnn.date"]
    assert {r["date"] for r in records} == {run_date}
    assert {r["commit"] for r in records} == {"unknown"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.jsonl", "h.jsonl.lock"]


@pytest.fixture(scope="module")
def cached_runs(real_junit: Path) -> dict[str, Path]:
    """After ``real_junit``'s run: its baselines written (``qnn-ci baseline update``),
    the same run again with every stage but the regression check read from the cache
    (``qnn-ci run --junit`` and pytest ``--junitxml``), and once more with
    sim_numerics' stored result removed, so that it alone measures again."""
    base = real_junit.parent
    project, work, sdk = base / "project", base / "work", base / "sdk" / "qairt"
    done = cli("baseline", "update", "--workdir", str(work), cwd=project,
               QNN_SDK_ROOT=str(sdk))
    assert done.returncode == 0, done.stdout + done.stderr
    reports = {name: base / f"{name}.xml" for name in ("cached", "pytest-cached", "partly")}
    done = cli("run", "--workdir", str(work), "--junit", str(reports["cached"]), cwd=project,
               QNN_SDK_ROOT=str(sdk))
    assert reports["cached"].is_file(), done.stdout + done.stderr
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--qnn-workdir", str(work), "qnn-ci.yaml",
                           "--junitxml", str(reports["pytest-cached"])], cwd=project,
                          env=_env(QNN_SDK_ROOT=str(sdk)), capture_output=True, text=True,
                          timeout=600)
    assert reports["pytest-cached"].is_file(), done.stdout + done.stderr
    (work / "tiny" / "sim_numerics" / "result.json").unlink()
    done = cli("run", "--workdir", str(work), "--junit", str(reports["partly"]), cwd=project,
               QNN_SDK_ROOT=str(sdk))
    assert reports["partly"].is_file(), done.stdout + done.stderr
    return reports


@pytest.mark.parametrize("report", ["cached", "pytest-cached"])
def test_a_run_read_from_the_cache_adds_no_record(cached_runs: dict[str, Path], report: str,
                                                  tmp_path: Path) -> None:
    """Every stage with numbers read from the cache: the old numbers (old timings
    included) are not recorded again under this run's date; one line, exit 0."""
    junit = cached_runs[report]
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    cached = [c for c in cases if any(p.get("name") == "qnn.cached" and
                                      p.get("value") in ("true", "True")
                                      for p in c.iter("property"))]
    assert len(cached) >= 4              # static_shapes .. sim_numerics, model_lib
    db = tmp_path / "h.jsonl"
    done = cli("history", "add", str(junit), "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == (f"{junit}: every stage with numbers was read from the cache "
                           f"(qnn.cached): the run measured nothing new, nothing added to "
                           f"{db} (qnn-ci run --no-cache or pytest --qnn-no-cache measures "
                           "again)\n")
    assert not db.exists()


def test_a_partly_cached_run_records_what_it_measured(cached_runs: dict[str, Path],
                                                     real_junit: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    done = cli("history", "add", str(cached_runs["partly"]), "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"added 1 record\(s\) for 1 export\(s\) to .*h\.jsonl; \d+ stage\(s\) "
                        r"read from the cache left out \(measured by an earlier run\)\n",
                        done.stdout), done.stdout
    [record] = _lines(db)
    assert record["stage"] == "sim_numerics"
    first = {r["stage"]: r for r in history.records_from_junit(real_junit, where=tmp_path)}
    # measured again: the same numbers, its own timings
    assert _untimed(record["metrics"]) == _untimed(first["sim_numerics"]["metrics"])
    assert "sim_s_per_inference" in record["metrics"]


def test_the_regression_checks_counters_are_no_metrics(cached_runs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """The regression check ran (its baselines are new) and reported its counters
    (worse, improved, compared): they are neither recorded nor charted."""
    props = {p.get("name"): p.get("value")
             for c in ET.parse(cached_runs["cached"]).getroot().iter("testcase")
             if c.get("name") == "tiny::regression" for p in c.iter("property")}
    assert props["qnn.worse"] == "0" and "qnn.improved" in props, props
    run = history.read_run(cached_runs["cached"], where=tmp_path)
    assert run.records == [] and run.cached and ("tiny", "regression") not in run.cached
    # a history written before counters were left out: they are not trended
    db = tmp_path / "h.jsonl"
    history.append(db, [{"date": f"2026-11-0{d}", "commit": f"c{d}", "export": "tiny",
                         "stage": stage, "soc": "QCS6490", "board": None, "status": "passed",
                         "metrics": metrics}
                        for d in (1, 2)
                        for stage, metrics in (("regression", {"worse": d, "improved": 0,
                                                               "simulator.compared": 4}),
                                               ("sim_numerics", {"sim_vs_fp32.y.cosine": 0.99}))])
    found = trends.trends(history.read_history(db))
    assert [(t.stage, t.metric) for t in found] == [("sim_numerics", "sim_vs_fp32.y.cosine")]
    from qnn_ci.report.trend_data import read_trends

    assert list(read_trends(db).series["tiny"]) == ["sim_vs_fp32.y.cosine (sim_numerics, QCS6490)"]


def test_commit_defaults_to_the_checkout_head(real_junit: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    done = cli("history", "add", str(real_junit), "--db", "h.jsonl", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert {r["commit"] for r in _lines(repo / "h.jsonl")} == {head}


def test_the_commit_and_date_of_the_run_win_over_where_and_when_it_is_added(
        tmp_path: Path) -> None:
    """A report `qnn-ci run --junit` wrote for a manifest in a git work tree carries
    that commit and the run's date: `history add` from another folder (another git
    work tree), days later (the file touched since), records them, not its own."""
    from qnn_ci.engine.results import StageResult, Status
    from qnn_ci.report.junit import JUnitWriter, testcase
    from tests.core.test_junit_writer import git_repo

    head = git_repo(tmp_path / "repo")
    junit = tmp_path / "repo" / "out" / "run.xml"
    writer = JUnitWriter(junit)
    writer.add(testcase(tmp_path / "repo" / "qnn-ci.yaml", "tiny", 2, StageResult(
        "sim_numerics", Status.PASSED, "ok",
        properties={"soc": "QCS6490", "sim_vs_fp32.y.cosine": 0.9991})))
    writer.flush()
    run_date = writer.run["qnn.date"]
    os.utime(junit, (1_900_000_000, 1_900_000_000))          # touched in 2030
    other = tmp_path / "other"
    git_repo(other)                                            # HEAD here is another commit
    done = cli("history", "add", str(junit), "--db", "h.jsonl", cwd=other)
    assert done.returncode == 0, done.stderr
    [record] = _lines(other / "h.jsonl")
    assert (record["commit"], record["date"]) == (head, run_date)
    assert record["metrics"] == {"sim_vs_fp32.y.cosine": 0.9991}
    # uncommitted changes to the manifest's repository: the commit says so
    (tmp_path / "repo" / "qnn-ci.yaml").write_text("exports: [] # edited\n")
    writer = JUnitWriter(junit)
    writer.add(testcase(tmp_path / "repo" / "qnn-ci.yaml", "tiny", 2, StageResult(
        "sim_numerics", Status.PASSED, "ok", properties={"sim_vs_fp32.y.cosine": 0.5})))
    writer.flush()
    assert [r["commit"] for r in history.records_from_junit(junit, where=other)] == \
        [head + "+dirty"]


def _night(real_junit: Path, out: Path, cosine: float) -> Path:
    """The real report with the simulator's cosine set to ``cosine``."""
    text = real_junit.read_text()
    text, n = re.subn(r'(name="qnn\.sim_vs_fp32\.y\.cosine" value=")[^"]*"',
                      rf'\g<1>{cosine:.6f}"', text)
    assert n == 1
    out.write_text(text)
    return out


def test_show_flags_a_slow_slide_over_seven_nights(real_junit: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    # each night 0.0003 worse (inside the 0.001 tolerance), 0.0018 over the week
    for night in range(7):
        report = _night(real_junit, tmp_path / f"n{night}.xml", 0.9995 - 0.0003 * night)
        done = cli("history", "add", str(report), "--db", str(db), "--commit", f"c{night}",
                   "--date", f"2026-11-{20 + night}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    shown = cli("history", "show", "--db", str(db), cwd=tmp_path)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    drift = [line for line in shown.stdout.splitlines() if "DRIFT" in line]
    assert drift == ["    DRIFT: sim_vs_fp32.y.cosine got worse on 6 of the last 6 nights: "
                     "0.9995 → 0.9977 (-0.0018; more than the tolerance 0.001)"]
    assert "tiny  (QCS6490)" in shown.stdout and "1 drift(s) flagged" in shown.stdout
    cos_line = next(line for line in shown.stdout.splitlines()
                    if "sim_vs_fp32.y.cosine" in line and "DRIFT" not in line)
    assert "2026-11-20 → 2026-11-26" in cos_line and "0.9977" in cos_line

    as_json = cli("history", "show", "--db", str(db), "--json", "--last", "3", cwd=tmp_path)
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    [cos] = [t for t in data["trends"] if t["metric"] == "sim_vs_fp32.y.cosine"]
    assert [v["commit"] for v in cos["values"]] == ["c4", "c5", "c6"]
    assert cos["drift"] and data["drifts"] == 1
    # a looser tolerance: the same week is no drift
    loose = cli("history", "show", "--db", str(db), "--tolerance", "cosine=0.002", cwd=tmp_path)
    assert loose.returncode == 0 and "no drift flagged" in loose.stdout, loose.stdout
    # ... also when the export's manifest says so (regression.tolerances)
    from tests.core.test_travelling_cache import MANIFEST

    project = real_junit.parent / "project"
    manifest = project / "loose.yaml"
    manifest.write_text(MANIFEST + "    regression: {tolerances: {cosine: 0.002}}\n")
    loose = cli("history", "show", "--db", str(db), "--manifest", str(manifest), cwd=tmp_path)
    assert loose.returncode == 0 and "no drift flagged" in loose.stdout, loose.stdout
    strict = cli("history", "show", "--db", str(db), "--manifest", str(manifest),
                 "--tolerance", "sim_vs_fp32.y.cosine=0.001", cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr


def test_show_with_a_steady_week_flags_nothing(real_junit: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    for night, cosine in enumerate([0.9995, 0.9990, 0.9996, 0.9989, 0.9994, 0.9991, 0.9995]):
        report = _night(real_junit, tmp_path / f"n{night}.xml", cosine)
        assert cli("history", "add", str(report), "--db", str(db), "--date",
                   f"2026-11-{20 + night}", cwd=tmp_path).returncode == 0
    shown = cli("history", "show", "--db", str(db), "--export", "tiny", cwd=tmp_path)
    assert shown.returncode == 0 and "DRIFT" not in shown.stdout, shown.stdout


# --- the drift rule, hand-written series ---------------------------------------------

def _drift(values: list[float], metric: str = "htp_vs_cpu.logits.cosine",
           **overrides: float) -> str | None:
    return trends.drift(values, metric, trends.rule_for(metric, overrides or None))


def test_drift_rule() -> None:
    slide = [0.9995 - 0.0003 * i for i in range(7)]
    assert _drift(slide)                                          # 6 worse steps, -0.0018
    assert _drift(slide[1:])                                      # 5 of 5 steps: enough
    assert _drift(slide[2:]) is None                              # 4 steps: too few
    assert _drift(slide[::-1]) is None                            # getting better
    assert _drift([0.9995 - 0.0001 * i for i in range(7)]) is None  # adds up to 0.0006 only
    assert _drift(slide, cosine=0.002) is None                    # manifest-sized tolerance
    bumpy = [0.9995, 0.9990, 0.9992, 0.9985, 0.9980, 0.9976, 0.9970]  # 5 of 6 steps worse
    assert _drift(bumpy)
    assert _drift([0.9995, 0.9990, 0.9992, 0.9985, 0.9987, 0.9976, 0.9970]) is None  # 4 of 6
    # older nights do not count: only the last 7
    assert _drift([0.5, 0.6, 0.7, *slide]) and _drift([*slide, 0.9996]) is None


def test_drift_directions_and_relative_tolerances() -> None:
    latency = [10.0, 10.2, 10.4, 10.6, 10.8, 11.0, 11.2]           # +12 % in 2 % steps
    assert _drift(latency, "latency.median_ms") == (
        "latency.median_ms got worse on 6 of the last 6 nights: 10 → 11.2 (+1.2; more than "
        "the tolerance 10% = 1)")
    assert _drift(latency, "latency.median_ms", latency=0.15) is None
    assert _drift(latency[::-1], "latency.median_ms") is None        # faster is fine
    assert _drift([1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4], "htp_vs_cpu.y.snr") is None  # 0.6 dB
    assert _drift([40, 39.7, 39.4, 39.1, 38.8, 38.5, 38.2], "htp_vs_cpu.y.snr")   # 1.8 dB
    assert _drift([0.01, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016], "sim_vs_fp32.y.max_abs")
    assert _drift([60, 59, 58, 57, 56, 55, 54], "nodes_on_htp")
    assert _drift([60, 59, 58, 57, 56, 55, 54], "nodes_total") is None   # direction unknown


def test_trends_group_and_order(tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    rows = [{"date": f"2026-11-{d:02d}", "commit": f"c{d}", "export": e, "stage": "htp_vs_cpu",
             "soc": "SM8550", "board": b, "status": "passed",
             "metrics": {"latency.median_ms": 10.0 + d}}
            for d in (3, 1, 2) for e, b in (("b", "rb5"), ("a", "rb5"), ("a", "qcm"))]
    history.append(db, rows)
    found = trends.trends(history.read_history(db), last=2)
    assert [(t.export, t.board) for t in found] == [("a", "qcm"), ("a", "rb5"), ("b", "rb5")]
    assert [p[1] for p in found[0].points] == ["c2", "c3"]        # by date, not file order
    text = cli("history", "show", "--db", str(db), "--export", "a", cwd=tmp_path).stdout
    assert "a  (SM8550, board qcm)" in text and "b  (" not in text


def test_pytest_style_report(tmp_path: Path) -> None:
    """pytest --junitxml with the plugin: export and stage as properties, the date from
    the suite's timestamp, other tests of the session ignored."""
    junit = tmp_path / "pytest.xml"
    junit.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" '
        'timestamp="2026-11-30T03:04:05.123456+00:00">'
        '<testcase classname="tests.test_x" name="test_other"/>'
        '<testcase classname="qnn-ci.yaml" name="[det::htp_vs_cpu]"><properties>'
        '<property name="qnn.export" value="det"/><property name="qnn.stage" value="htp_vs_cpu"/>'
        '<property name="qnn.status" value="failed"/><property name="qnn.board" value="rb3"/>'
        '<property name="qnn.soc" value="QCS6490"/>'
        '<property name="qnn.latency.median_ms" value="4.25"/>'
        '<property name="qnn.htp_vs_cpu.out.cosine" value="nan"/>'
        '<property name="qnn.htp_vs_cpu.out.snr" value="1e999"/>'
        '<property name="qnn.sdk_version" value="2.31.0"/>'
        '<property name="qnn.cached" value="False"/>'
        '</properties><failure message="x"/></testcase></testsuite></testsuites>')
    [record] = history.records_from_junit(junit, where=tmp_path)
    assert record == {"date": "2026-11-30T03:04:05Z", "commit": "unknown", "export": "det",
                      "stage": "htp_vs_cpu", "soc": "QCS6490", "board": "rb3",
                      "status": "failed", "metrics": {"latency.median_ms": 4.25}}


def test_a_stage_twice_in_a_report_is_recorded_once(tmp_path: Path) -> None:
    """(found by the fuzz target: a duplicated testcase) the first one is kept."""
    case = ("<testcase name='e::s'><properties><property name='qnn.x.cosine' value='{}'/>"
            "</properties></testcase>")
    junit = tmp_path / "r.xml"
    junit.write_text(f"<testsuite>{case.format(0.5)}{case.format(0.7)}</testsuite>")
    [record] = history.records_from_junit(junit, date="2026-11-01", where=tmp_path)
    assert record["metrics"] == {"x.cosine": 0.5}
    assert history.append(tmp_path / "h.jsonl", [record]) == 1


BAD_REPORTS = {
    "not xml": (b"\x00\xffgarbage", "not well-formed XML"),
    "laughs": (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]>'
               b"<testsuites>&b;</testsuites>", "DOCTYPE"),
    "html": (b"<html><body/></html>", "root element is <html>"),
    "empty suite": (b"<testsuites><testsuite><testcase name='x'/></testsuite></testsuites>",
                    "no qnn-ci stage results"),
    "bad date": (b"<testsuite timestamp='yesterday'><testcase name='e::s'/></testsuite>",
                 "not an ISO 8601 date"),
}


@pytest.mark.parametrize("name", list(BAD_REPORTS))
def test_a_bad_report_is_one_line(name: str, tmp_path: Path) -> None:
    data, words = BAD_REPORTS[name]
    (tmp_path / "r.xml").write_bytes(data)
    done = cli("history", "add", "r.xml", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "r.xml" in done.stderr and words in done.stderr, done.stderr
    assert not (tmp_path / "history.jsonl").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["add", "missing.xml"], "missing.xml: file not found"),
    (["add", "."], "it is a folder"),
    (["add", "r.xml", "--date", "soon"], "--date 'soon': not an ISO 8601 date"),
    (["show", "--db", "none.jsonl"], "none.jsonl: no history file here; add a run"),
    (["show", "--db", "bad.jsonl"], "bad.jsonl:3: not a JSON line"),
    (["show", "--db", "nan.jsonl"], "nan.jsonl:1: metric 'm' is not a finite number"),
    (["show", "--db", "ok.jsonl", "--last", "0"], "--last 0"),
    (["show", "--db", "ok.jsonl", "--tolerance", "cosine"], "--tolerance 'cosine'"),
    (["show", "--db", "ok.jsonl", "--tolerance", "cosine=-1"], "give KIND=VALUE"),
    (["show", "--db", "ok.jsonl", "--tolerance", "cosin=0.1"], "did you mean 'cosine'"),
    (["show", "--db", "ok.jsonl", "--export", "nope"], "--export nope: not in the history"),
])
def test_bad_input_is_one_line(args: list[str], words: str, tmp_path: Path) -> None:
    good = ('{"date": "2026-11-01", "commit": "c", "export": "e", "stage": "s", '
            '"metrics": {"m": 1}}\n')
    (tmp_path / "r.xml").write_text("<testsuite><testcase name='e::s'/></testsuite>")
    (tmp_path / "ok.jsonl").write_text(good)
    (tmp_path / "bad.jsonl").write_text(good + "\n{not json\n")
    (tmp_path / "nan.jsonl").write_text(good.replace('"m": 1', '"m": NaN'))
    done = cli("history", *args, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert words in done.stderr, done.stderr


def test_concurrent_adds_keep_every_record(tmp_path: Path) -> None:
    reports = []
    for i in range(4):
        report = tmp_path / f"r{i}.xml"
        report.write_text(f"<testsuite><testcase name='e{i}::s'><properties><property "
                          f"name='qnn.x' value='{i}'/></properties></testcase></testsuite>")
        reports.append(report)
    procs = [subprocess.Popen([sys.executable, "-m", "qnn_ci", "history", "add", str(r),
                               "--db", "h.jsonl"], cwd=tmp_path, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in reports]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    assert sorted(r["export"] for r in _lines(tmp_path / "h.jsonl")) == ["e0", "e1", "e2", "e3"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_append_keeps_a_hand_edited_last_line(tmp_path: Path) -> None:
    db = tmp_path / "h.jsonl"
    db.write_text('{"date": "2026-11-01", "commit": "c", "export": "e", "stage": "s", '
                  '"metrics": {"m": 1}}')                     # no final newline
    assert history.append(db, [{"date": "2026-11-02T00:00:00Z", "commit": "d", "export": "e",
                                "stage": "s", "metrics": {"m": 2}}]) == 1
    assert [r["metrics"]["m"] for r in history.read_history(db)] == [1, 2]
    with pytest.raises(UserError, match="'export' is missing"):
        history.append(db.with_name("x.jsonl"), [{"date": "2026-11-02", "commit": "d"}])
