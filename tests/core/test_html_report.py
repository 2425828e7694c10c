"""The HTML report (`qnn-ci report`, `pytest --qnn-html`): built from a real run of a
tiny export on the HTP simulator, loaded in a REAL headless Chromium (Debian's
`chromium`, installed by scripts/install-system-deps.sh): no console message, no
network request (Chromium's own NetLog), a screenshot with real content; every
user string escaped; bad inputs refused in one line."""

from __future__ import annotations

import functools
import html.parser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_ci.errors import UserError
from qnn_ci.report.html import render
from qnn_ci.report.report_data import ReportInput, StageEntry, read_junit
from qnn_ci.report.trend_data import read_trends
from tests.core.graphs import FLOATS_GEN, tiny_matmul_model

MANIFEST = """\
exports:
  - name: tiny
    model: models/m.onnx
    inputs: {x: {shape: [1, 8]}}
    calibration: {generator: 'gens:floats', samples: 6, held_out: 2}
    target: {soc: QCS6490}
"""
ROOT = Path(__file__).resolve().parents[2]




def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "QNN_SDK_ROOT")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qnn_ci", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project after `qnn-ci run --junit` (the simulator stages ran: metrics, an
    error histogram, a failed sim_numerics with its diagnosis plot) and two nights of
    history from that report."""
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn is not installed")
    project = tmp_path_factory.mktemp("report")
    (project / "qnn-ci.yaml").write_text(MANIFEST)
    (project / "gens.py").write_text(FLOATS_GEN)
    tiny_matmul_model(project / "models" / "m.onnx")
    done = _cli("run", "--workdir", "work", "--junit", "junit.xml", cwd=project)
    assert done.returncode in (0, 1), done.stderr
    for commit, date in (("aaa1111", "2026-11-28T02:00:00Z"), ("bbb2222", "2026-11-29T02:00:00Z")):
        added = _cli("history", "add", "junit.xml", "--db", "history.jsonl", "--commit", commit,
                     "--date", date, cwd=project)
        assert added.returncode == 0, added.stderr
    return project


# -- the browser -----------------------------------------------------------------------

@functools.cache
def _runnable(browser: str) -> str:
    """"" when ``browser --version`` says it is Chromium, else why not (Ubuntu's
    ``chromium-browser`` package is a stub that wants snapd, which containers lack)."""
    try:
        done = subprocess.run([browser, "--version"], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode == 0 and "chrom" in done.stdout.lower():
        return ""
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            why = _runnable(found)
            if why:   # listed in tests/conftest.py PLATFORM_SKIPS
                pytest.skip(f"chromium cannot run on this platform: {found}: {why}")
            return found
    pytest.skip("chromium is not installed (make system: scripts/install-system-deps.sh)")


_QUIET = ["--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--no-first-run", "--disable-default-apps", "--disable-domain-reliability",
          "--disable-client-side-phishing-detection", "--mute-audio",
          # the browser's own calls home go nowhere (the page's are what is checked)
          "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost"]


def _netlog_page_urls(netlog: Path) -> list[str]:
    """The URLs the PAGE asked for (requests whose isolation key is the file:// page;
    the browser's own background requests have another), data: and file: excluded."""
    text = netlog.read_text("utf-8", errors="replace")
    try:
        log = json.loads(text)
    except ValueError:      # a log the browser did not close: end it
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event.get("type") != start or "file://" not in str(
                params.get("network_isolation_key", "")):
            continue
        url = str(params.get("url", ""))
        if not url.startswith(("file:", "data:")):
            urls.append(url)
    return urls


def load_in_chromium(page: Path, shot: Path, *, height: int = 2400,
                     width: int = 1200) -> tuple[list[str], list[str]]:
    """Load ``page`` in headless Chromium and screenshot it: (console messages, URLs
    the page requested)."""
    browser = _chromium()
    netlog = shot.with_suffix(".netlog.json")
    profile = shot.parent / f"{shot.stem}-profile"
    done = subprocess.run(
        [browser, *_QUIET, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         f"--log-net-log={netlog}", f"--screenshot={shot}", f"--window-size={width},{height}",
         page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert shot.is_file(), f"no screenshot; chromium said:\n{done.stderr[-3000:]}"
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return console, _netlog_page_urls(netlog)


def _distinct_colours(png: Path) -> int:
    from PIL import Image

    with Image.open(png) as im:
        small = im.convert("RGB").resize((300, 600))
        return len(small.getcolors(300 * 600) or [])


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(text)
    return p.tags


def _no_fetch(text: str) -> None:
    """No element refers to anything outside the page (every src is a data: URI,
    no link / script / iframe / object at all)."""
    for tag, attrs in _tags(text):
        assert tag not in ("script", "link", "iframe", "object", "embed", "base"), tag
        for key in ("src", "href", "srcset", "action", "data", "poster"):
            value = attrs.get(key)
            if value is not None:
                assert value.startswith(("data:", "#")), (tag, key, value[:80])
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)


# -- the real run's page ----------------------------------------------------------------

def test_report_of_a_real_run_loads_in_chromium_cleanly(run: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = _cli("report", "--junit", "junit.xml", "--workdir", "work", "--history",
                "history.jsonl", "-o", str(page), cwd=run)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{page}: 1 export(s), "), done.stdout
    text = page.read_text("utf-8")
    _no_fetch(text)
    # the stage table with its one-line reasons and status colours
    assert '<td>sim_numerics</td><td><span class="st failed">failed</span>' in text
    assert '<td>sim_npu</td><td><span class="st passed">passed</span>' in text
    assert "QNN_SDK_ROOT is not set" in text
    # the per-output metrics against the threshold the run applied (cosine >= 0.99)
    assert "<td>sim_vs_fp32</td><td>y</td><td>cosine</td>" in text
    assert '<span class="ok">≥ 0.99 ✓</span>' in text
    # the worst output's error histogram (from the work folder's comparison data)
    assert "Error distribution of the worst output" in text
    assert "y (sample " in text and "|error| by decade" in text
    # the diagnosis' per-layer plot, embedded
    assert '<img class="diag"' in text and 'src="data:image/png;base64,iVBORw0KGgo' in text
    # trends: two nights of the cosine
    assert "<h3>Trends</h3>" in text and "sim_vs_fp32.y.cosine (sim_numerics, QCS6490)" in text
    assert "2026-11-28" in text and "2026-11-29" in text

    shot = tmp_path / "report.png"
    console, urls = load_in_chromium(page, shot)
    assert console == [], console
    assert urls == [], urls
    assert shot.stat().st_size > 20_000
    assert _distinct_colours(shot) > 50      # text, status colours, bars, the plot


def test_the_browser_check_sees_console_messages_and_fetches(tmp_path: Path) -> None:
    """The check above can fail: a page that logs and fetches is caught by both."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><p>bad</p>'
                    '<img src="http://127.0.0.1:9/x.png">'
                    '<script>console.error("boom from the page")</script></body></html>')
    console, urls = load_in_chromium(page, tmp_path / "bad.png", height=400)
    assert any("boom from the page" in line for line in console), console
    assert urls == ["http://127.0.0.1:9/x.png"]


def test_pytest_qnn_html_writes_the_page_at_session_end(run: Path, tmp_path: Path) -> None:
    page = tmp_path / "pytest-report.html"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--qnn-workdir",
         "work", "--qnn-html", str(page), "qnn-ci.yaml"],
        cwd=run, env=_env(), capture_output=True, text=True, timeout=300)
    assert f"qnn-ci: HTML report written to {page}" in done.stdout, done.stdout[-3000:]
    text = page.read_text("utf-8")
    _no_fetch(text)
    assert '<td>sim_numerics</td><td><span class="st failed">failed</span>' in text
    assert "|error| by decade" in text            # the work folder's histogram joined in
    assert 'src="data:image/png;base64,' in text


def test_pytest_qnn_html_unwritable_is_one_line(run: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--qnn-workdir",
         "work", "--qnn-html", str(blocker / "r.html"), "qnn-ci.yaml"],
        cwd=run, env=_env(), capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if "HTML report not written" in ln]
    assert len(lines) == 1 and str(blocker / "r.html") in lines[0], done.stdout[-2000:]
    assert "Traceback" not in done.stdout + done.stderr


# -- escaping, baselines, drifts -----------------------------------------------------------

HOSTILE = '<script>alert("x")</script><img src=http://evil/x onerror=alert(1)>&amp;'


def test_every_user_string_is_escaped(tmp_path: Path) -> None:
    entry = StageEntry(
        export=HOSTILE, stage=HOSTILE, status="failed", summary=HOSTILE, findings=[HOSTILE],
        properties={f"sim_vs_fp32.{HOSTILE}.cosine": HOSTILE,
                    f"sim_vs_fp32.{HOSTILE}.cosine.min": "0.99",
                    "diagnosis.headline": HOSTILE, "latency.median_ms": HOSTILE},
        data={"comparison": {"outputs": [{"name": HOSTILE, "samples": [
            {"sample": HOSTILE, "metrics": {"cosine": 0.5, "histogram": [[0, 0, 1],
                                                                         [1e-3, 1e-2, 3]]}}]}]}},
        manifest=HOSTILE, line=3)
    text = render(ReportInput([entry], [HOSTILE]), title=HOSTILE)
    _no_fetch(text)
    assert "<script" not in text and "<img src=http" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    page = tmp_path / "hostile.html"
    page.write_text(text, "utf-8")
    console, urls = load_in_chromium(page, tmp_path / "hostile.png", height=800)
    assert console == [] and urls == []


def test_baselines_column_when_the_file_exists(run: Path, tmp_path: Path) -> None:
    from qnn_ci.nightly import baselines as bl

    primary = read_junit(run / "junit.xml")
    page = tmp_path / "r.html"
    from qnn_ci.report.html_report import make_report

    make_report(primary, page)                         # no qnn-baselines.yaml: no column
    assert "<th>baseline</th>" not in page.read_text("utf-8")
    base = tmp_path / "qnn-baselines.yaml"
    bl.write(base, {("tiny", "QCS6490", "simulator"): bl.Entry(
        metrics={"sim_vs_fp32.y.cosine": 0.99999, "sim_vs_fp32.y.snr": 40.0},
        commit="3f2c1ab", date="2026-11-28")})
    make_report(read_junit(run / "junit.xml"), page, baselines=base)
    text = page.read_text("utf-8")
    assert "<th>baseline</th>" in text
    # cosine 0.999984 below the baseline 0.99999: worse (▼); snr 44.9 above 40: better
    assert '<td class="n">0.99999 <span class="bad">▼</span></td>' in text
    assert '<td class="n">40 <span class="ok">▲</span></td>' in text
    broken = tmp_path / "broken.yaml"
    broken.write_text("exports: [1, 2\n")
    make_report(read_junit(run / "junit.xml"), page, baselines=broken)
    text = page.read_text("utf-8")
    assert "<th>baseline</th>" not in text and "baselines not shown: " in text


def test_baselines_from_the_manifests_baselines_key(run: Path, tmp_path: Path) -> None:
    """A manifest whose ``baselines:`` names another file: the report shows that file's
    numbers, not those of a qnn-baselines.yaml beside the manifest; for the manifest
    the JUnit names and for one given with --manifest (a work folder alone names none)."""
    from qnn_ci.nightly import baselines as bl

    project = tmp_path / "project"
    shutil.copytree(run / "models", project / "models")
    shutil.copy(run / "gens.py", project / "gens.py")
    (project / "qnn-ci.yaml").write_text("baselines: ../shared/nightly.yaml\n" + MANIFEST)
    for path, cosine in ((tmp_path / "shared" / "nightly.yaml", 0.91234),
                         (project / "qnn-baselines.yaml", 0.95678)):
        path.parent.mkdir(parents=True, exist_ok=True)
        bl.write(path, {("tiny", "QCS6490", "simulator"): bl.Entry(
            metrics={"sim_vs_fp32.y.cosine": cosine}, commit="3f2c1ab", date="2026-11-28")})
    junit = tmp_path / "junit.xml"
    text = (run / "junit.xml").read_text("utf-8")
    junit.write_text(text.replace(f'file="{run / "qnn-ci.yaml"}"',
                                  f'file="{project / "qnn-ci.yaml"}"'), "utf-8")
    assert str(project / "qnn-ci.yaml") in junit.read_text("utf-8")
    for args in (["--junit", str(junit)],
                 ["--workdir", str(run / "work"), "--manifest", str(project)]):
        done = _cli("report", *args, "-o", "r.html", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        page = (tmp_path / "r.html").read_text("utf-8")
        assert '<td class="n">0.91234 <span class="ok">▲</span></td>' in page, args
        assert "0.95678" not in page
    # a manifest that no longer loads: a note, and the file beside it
    (project / "qnn-ci.yaml").write_text("baselines: ../shared/nightly.yaml\nexports: [\n")
    done = _cli("report", "--junit", str(junit), "-o", "r.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text("utf-8")
    assert "manifest not read for its baselines: key" in page and "0.95678" in page
    done = _cli("report", "--junit", str(junit), "--manifest", str(tmp_path / "nope.yaml"),
                "-o", "r.html", cwd=tmp_path)
    assert done.returncode == 2 and "manifest not found" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_drift_is_flagged_above_its_chart(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    lines = []
    for night, cosine in enumerate((0.9999, 0.9997, 0.9995, 0.9993, 0.9991, 0.9989, 0.9987)):
        lines.append(json.dumps({"date": f"2026-11-{10 + night:02d}T02:00:00Z",
                                 "commit": f"c{night}", "export": "slide",
                                 "stage": "sim_numerics", "soc": "QCS6490", "board": None,
                                 "status": "passed",
                                 "metrics": {"sim_vs_fp32.logits.cosine": cosine}}))
    history.write_text("\n".join(lines) + "\n")
    text = render(ReportInput(), trends=read_trends(history))
    assert '<div class="bad">drift: sim_vs_fp32.logits.cosine (sim_numerics, QCS6490): ' \
        in text
    assert "<h2>slide" in text        # an export only in the history still gets its section


# -- bad inputs: one line ----------------------------------------------------------------------

@pytest.mark.parametrize(("content", "needle"), [
    (b"\x00\xffnot xml", "not valid XML"),
    (b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>', "declares some"),
])
def test_bad_junit_is_one_line(tmp_path: Path, content: bytes, needle: str) -> None:
    junit = tmp_path / "j.xml"
    junit.write_bytes(content)
    with pytest.raises(UserError, match=needle):
        read_junit(junit)
    done = _cli("report", "--junit", str(junit), "-o", str(tmp_path / "r.html"),
                cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"qnn-ci report: error: {junit}: ")


def test_nothing_to_report_and_a_fifo_are_one_line(tmp_path: Path) -> None:
    done = _cli("report", "-o", "r.html", cwd=tmp_path)
    assert done.returncode == 2 and "nothing to report" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)
    done = _cli("report", "--junit", str(fifo), "-o", "r.html", cwd=tmp_path)
    assert done.returncode == 2 and "FIFO" in done.stderr.upper()
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_broken_result_in_the_work_folder_is_a_note(run: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(run / "work" / "tiny" / "sim_npu", work / "tiny" / "sim_npu")
    (work / "tiny" / "calibration").mkdir(parents=True)
    (work / "tiny" / "calibration" / "result.json").write_text("{not json")
    done = _cli("report", "--workdir", str(work), "-o", "r.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "r.html").read_text("utf-8")
    assert "Not everything could be read" in text and "calibration/result.json" in text
    assert '<td>sim_npu</td><td><span class="st passed">passed</span>' in text


def test_odd_histogram_buckets_are_left_out_not_a_crash() -> None:
    entry = StageEntry(export="e", stage="sim_numerics", status="passed", data={
        "comparison": {"outputs": [{"name": "y", "samples": [{"sample": 0, "metrics": {
            "cosine": 0.9, "histogram": [[0, 1e-4, float("inf")], [1e-4, 1e-3, float("nan")],
                                         [1e-3, 1e-2, -1], "junk", [1e-2, 1e-1, 7]]}}]}]}})
    text = render(ReportInput([entry]))
    assert text.count('<area shape="rect"') == 1 and "<span>1e-02</span>" in text
    assert "<span>7</span>" in text and 'title="0.01 ≤ |err| &lt; 0.1: 7"' in text


def test_the_latency_table_has_the_so_run_and_the_context_binary_run() -> None:
    so = StageEntry(export="cnn", stage="htp_vs_cpu", status="passed", summary="ok",
                    findings=[], properties={"latency.median_ms": "1.25"}, data={},
                    manifest="qnn-ci.yaml", line=3)
    ctx = StageEntry(export="cnn", stage="context_run", status="passed", summary="ok",
                     findings=[], properties={"latency.median_ms": "1.1", "load.init_ms": "42.5",
                                              "context_vs_so.y.cosine": "1.0"},
                     data={}, manifest="qnn-ci.yaml", line=3)
    text = render(ReportInput([so, ctx], []), title="t")
    table = text[text.index("<h3>Latency</h3>"):]
    table = table[:table.index("</table>")]
    assert "<td>htp_vs_cpu</td><td>latency.median_ms</td>" in table
    assert "<td>context_run</td><td>latency.median_ms</td>" in table
    assert "<td>context_run</td><td>load.init_ms</td>" in table
    assert "context_vs_so" not in table


def test_a_value_equal_to_its_baseline_at_the_digits_kept_has_no_arrow(tmp_path: Path) -> None:
    """JUnit keeps 6 significant digits (SNR 37.748731 is written 37.7487), the baselines
    file the full value: read back, the same SNR is unchanged ("="), not worse (▼)."""
    from qnn_ci.engine.results import StageResult, Status
    from qnn_ci.nightly import baselines as bl
    from qnn_ci.report.html_report import make_report
    from qnn_ci.report.junit import JUnitWriter

    junit = tmp_path / "junit.xml"
    writer = JUnitWriter(junit)
    writer.add_result(tmp_path / "qnn-ci.yaml", "tiny", 3, StageResult(
        "sim_numerics", Status.PASSED, "ok", properties={
            "soc": "QCS6490", "sim_vs_fp32.y.snr": 37.748731,
            "sim_vs_fp32.y.cosine": 0.99871234, "sim_vs_fp32.y.max_abs": 0.0123451}))
    writer.flush()
    assert 'value="37.7487"' in junit.read_text("utf-8")
    base = tmp_path / "qnn-baselines.yaml"
    bl.write(base, {("tiny", "QCS6490", "simulator"): bl.Entry(
        metrics={"sim_vs_fp32.y.snr": 37.748731, "sim_vs_fp32.y.cosine": 0.99912,
                 "sim_vs_fp32.y.max_abs": 0.0123449},
        commit="3f2c1ab", date="2026-11-28")})
    page = tmp_path / "r.html"
    make_report(read_junit(junit), page, baselines=base)
    text = page.read_text("utf-8")
    assert '<td class="n">37.749 <span class="ok">=</span></td>' in text      # unchanged
    assert '<td class="n">0.99912 <span class="bad">▼</span></td>' in text    # really worse
    # 0.0123451 and 0.0123449 both show as 0.012345: the same at the digits shown
    assert '<td class="n">0.012345 <span class="ok">=</span></td>' in text
    assert "▲" not in text


def test_series_beyond_those_charted_are_named_with_a_count_of_the_rest() -> None:
    from qnn_ci.report.html import TRENDS_SHOWN
    from qnn_ci.report.trend_data import Point, Trends

    labels = [f"sim_vs_fp32.out{i:02}.cosine (sim_numerics)" for i in range(TRENDS_SHOWN + 25)]
    trends = Trends(series={"tiny": {lab: [Point("2026-11-28", "c", 0.99)] for lab in labels}})
    entry = StageEntry(export="tiny", stage="sim_numerics", status="passed", summary="ok",
                       findings=[], properties={}, data={}, manifest="qnn-ci.yaml", line=3)
    text = render(ReportInput([entry], []), trends=trends, title="t")
    assert "+25 more series: " in text and text.count("out") >= 20
    assert "(+5 more)</p>" in text and "…" not in text
