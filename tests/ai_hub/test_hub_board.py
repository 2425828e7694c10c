"""An export on a ``transport: ai-hub`` board, run by ``qnn-ci run`` against the AI Hub
stand-in through the REAL qai-hub client: compile (context_binary), inference and
profile (context_run), judged like a board run; failures of the service one line
each; the token never in any output."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

qai_hub = pytest.importorskip("qai_hub", reason="qai-hub is not installed (pip install qai-hub)")

from fixtures.ai_hub import HubServer, RunRequest, RunResult, StandinBackend, running_hub  # noqa: E402
from qnn_ci.cli import main  # noqa: E402
from tests.ai_hub.conftest import TOKEN  # noqa: E402
from tests.core.graphs import FLOATS_GEN, scale_model  # noqa: E402

TOKEN_ENV = "QNN_CI_TEST_HUB_TOKEN"
JOBS = r"^/api/v1/jobs/$"


def project(tmp_path: Path, hub: HubServer, *, board: str = "", defaults: str = "") -> Path:
    scale_model(tmp_path / "m.onnx", dims=["N", 8])
    (tmp_path / "gens.py").write_text(FLOATS_GEN)
    board = (board or 'device: "RB3 Gen 2 (Proxy)"').replace("\n", "\n" + " " * 12)
    p = tmp_path / "qnn-ci.yaml"
    p.write_text(textwrap.dedent(f"""
        boards:
          hub-rb3:
            transport: ai-hub
            {board}
            token_env: {TOKEN_ENV}
            api_url: "{hub.api_url}"
        defaults:
          target: {{soc: QCS6490}}
          inputs: {{x: {{shape: [1, 8]}}}}
          calibration: {{generator: "gens:floats", samples: 6, held_out: 2}}
          board: hub-rb3
          {defaults}
        exports:
          - name: a
            model: m.onnx
        """).lstrip())
    return p


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))       # no real ~/.qai_hub is read
    for var in ("QNN_SDK_ROOT", "GITHUB_ACTIONS", "QAIHUB_CLIENT_INI"):
        monkeypatch.delenv(var, raising=False)


def run(tmp_path: Path, manifest: Path, stage: str = "context_run"
        ) -> tuple[int, dict[str, ET.Element]]:
    junit = tmp_path / "report.xml"
    code = main(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--junit", str(junit),
                 "--stage", stage])
    return code, {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}


def props(case: ET.Element) -> dict[str, str]:
    """The case's ``qnn.*`` properties, without the prefix."""
    return {(p.get("name") or "").removeprefix("qnn."): p.get("value") or ""
            for p in case.iter("property")}


def outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        found = case.find(tag)
        if found is not None:
            return f"{tag}: {found.get('message')}"
    return "passed"


def assert_no_token(tmp_path: Path, *texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
    for path in tmp_path.rglob("*"):
        if path.is_file() and "hub" not in path.relative_to(tmp_path).parts[:1]:
            assert TOKEN.encode() not in path.read_bytes(), path


def test_compile_inference_and_profile_through_the_real_client(
        tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    step_summary = tmp_path / "step-summary.md"
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "us/r"}}))
    for name, value in (("GITHUB_ACTIONS", "true"), ("GITHUB_EVENT_NAME", "push"),
                        ("GITHUB_EVENT_PATH", str(event)),
                        ("GITHUB_STEP_SUMMARY", str(step_summary))):
        monkeypatch.setenv(name, value)       # a push: the fork guard lets it through
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        manifest = project(tmp_path, hub)
        code, got = run(tmp_path, manifest)
        out = capsys.readouterr()
        assert code == 0, out.out
        assert outcome(got["a::context_binary"]) == "passed"
        assert outcome(got["a::context_run"]) == "passed"
        assert "so_load" not in " ".join(got)           # --stage: only what is needed
        built, ran = props(got["a::context_binary"]), props(got["a::context_run"])
        # compile (quantize: qnn-ci, the default): sim_npu's QDQ model, device pinned
        (compile_job,) = [j for j in hub.jobs.values() if j.kind == "compile"]
        assert built["hub.compile_job"] == compile_job.job_id
        assert built["hub.compile_url"].endswith(f"/jobs/{compile_job.job_id}/")
        assert compile_job.options == "--target_runtime qnn_context_binary"
        assert compile_job.device.name == "RB3 Gen 2 (Proxy)"
        assert compile_job.input_specs == {"x": ((1, 8), "float32")}
        assert compile_job.calibration_id is None           # qnn-ci quantized it already
        uploaded = hub.models[compile_job.model_id].data
        assert uploaded == (tmp_path / "w" / "a" / "sim_npu").joinpath(
            Path(props(got["a::sim_npu"])["artefact.qdq_model"]).name).read_bytes()
        assert (built["context.soc"], built["context.htp_arch"]) == ("QCS6490", "68")
        # inference on the 2 held-out samples, and a profile job, both on the compiled model
        runs = [j for j in hub.jobs.values() if j.kind == "inference"]
        inference = next(j for j in runs if not j.profiling)
        profile = next(j for j in runs if j.profiling)
        assert inference.model_id == profile.model_id == built["hub.target_model"]
        assert len(hub.datasets[str(inference.dataset_id)].entries()["x"]) == 2
        assert (ran["hub.inference_job"], ran["hub.profile_job"]) == (inference.job_id,
                                                                      profile.job_id)
        # judged as htp_vs_cpu judges a board: against the QDQ model on the CPU (the
        # stand-in runs the compiled QDQ model with onnxruntime: the same numbers)
        assert ran["reference"] == "qnn-ci's QDQ model on onnxruntime's CPU"
        assert float(ran["context_vs_cpu.y.cosine"]) > 0.99999
        assert ran["accuracy_rule"] == "held on 2 of 2"
        assert float(ran["cpu_vs_fp32.y.cosine"]) > 0.99 and "context_vs_fp32.y.cosine" in ran
        assert float(ran["latency.median_ms"]) > 0 and ran["latency.source"] == "ai_hub_profile"
        assert float(ran["load.init_ms"]) > 0 and float(ran["memory.peak_mib"]) >= 0
        assert ran["layers.npu"] == ran["layers"] and ran["layers.gpu"] == "0"
        assert ran["board"] == "hub-rb3"
        assert "AI Hub 'RB3 Gen 2 (Proxy)'" in out.out and inference.job_id in out.out
        assert all(r.token == TOKEN for r in hub.requests if r.service == "api")
        # job links: the job summary and the HTML report
        assert (f"AI Hub: [inference job {inference.job_id}]({hub.url}/jobs/{inference.job_id}/), "
                f"[profile job {profile.job_id}]") in step_summary.read_text()
        html = tmp_path / "report.html"
        assert main(["report", "--junit", str(tmp_path / "report.xml"), "-o", str(html)]) == 0
        page = html.read_text()
        assert f'<a href="{hub.url}/jobs/{compile_job.job_id}/">compile job' in page
        assert "latency.median_ms" in page and "load.init_ms" in page
        assert_no_token(tmp_path, out.out, out.err, page)
        # Nothing changed: nothing is submitted again.
        posts = len(hub.api_requests(JOBS, "POST"))
        code, got = run(tmp_path, manifest)
        assert code == 0 and len(hub.api_requests(JOBS, "POST")) == posts
        assert "(cached)" in capsys.readouterr().out
        # Other bit widths: another QDQ model, compiled again.
        manifest.write_text(manifest.read_text().replace(
            "board: hub-rb3", "board: hub-rb3\n  quantization: {act_bitwidth: 8}"))
        code, got = run(tmp_path, manifest)
        assert code == 0, capsys.readouterr().out
        compiles = [j for j in hub.jobs.values() if j.kind == "compile"]
        assert len(compiles) == 2 and compiles[1].model_id != compiles[0].model_id


def test_quantize_ai_hub_sends_the_float_model_bit_widths_and_samples(
        tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str]) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        manifest = project(tmp_path, hub, board='device: "RB3 Gen 2 (Proxy)"\nquantize: ai-hub',
                           defaults="quantization: {per_channel: true}")
        code, got = run(tmp_path, manifest)
        out = capsys.readouterr().out
        assert code == 0, out
        (compile_job,) = [j for j in hub.jobs.values() if j.kind == "compile"]
        assert compile_job.options == ("--target_runtime qnn_context_binary "
                                       "--quantize_full_type w8a16")
        assert hub.models[compile_job.model_id].data == \
            (tmp_path / "w" / "a" / "static_shapes").joinpath(
                Path(props(got["a::static_shapes"])["artefact.model"]).name).read_bytes()
        assert len(hub.datasets[str(compile_job.calibration_id)].entries()["x"]) == 6
    built, ran = props(got["a::context_binary"]), props(got["a::context_run"])
    assert "sim_npu" not in " ".join(got)           # no QDQ model needed
    assert built["hub.quantize"] == "ai-hub"
    assert "AI Hub's compile does not take per_channel: the device result is for AI Hub's " \
        "own quantization" in out
    assert ran["reference"] == "fp32 onnxruntime (pinned model, on the host)"
    assert float(ran["context_vs_fp32.y.cosine"]) > 0.9999 and "context_vs_cpu.y.cosine" \
        not in ran


class Skewed(StandinBackend):
    """The stand-in, with outputs that are fast and wrong, and a layer on the GPU."""

    def run(self, request: RunRequest) -> RunResult:
        result = super().run(request)
        if result.outputs is not None:
            result.outputs = {k: [np.asarray(a) * np.float32(-1.0) for a in v]
                              for k, v in result.outputs.items()}
        if result.profile is not None:
            result.profile["execution_detail"][0]["compute_unit"] = "GPU"
        return result


def test_a_wrong_answer_and_a_layer_off_the_npu_fail_with_names(
        tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str]) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN, backend=Skewed()) as hub:
        code, got = run(tmp_path, project(tmp_path, hub))
    out = capsys.readouterr().out
    assert code == 1
    text = outcome(got["a::context_run"])
    assert text.startswith("failure: ")
    failure = got["a::context_run"].find("failure")
    assert failure is not None
    body = (failure.text or "") + (failure.get("message") or "")
    assert "AI Hub 'RB3 Gen 2 (Proxy)' vs qnn-ci's QDQ model on onnxruntime's CPU: " in body
    assert "accuracy rule vs fp32: " in body
    assert "cosine" in body
    assert "layers run on the GPU of 'RB3 Gen 2 (Proxy)', not the NPU:" in body
    assert float(props(got["a::context_run"])["layers.gpu"]) == 1
    assert "FAIL  context_run" in out


def test_a_failed_compile_job_is_quoted_and_blocks_the_run(
        tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str]) -> None:
    reason = "Tensor 'x' could not be quantized: calibration range is empty"
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        hub.fail_jobs(reason, kind="compile")
        code, got = run(tmp_path, project(tmp_path, hub))
        (job,) = hub.jobs
    assert code == 1
    text = outcome(got["a::context_binary"])
    assert text == (f"failure: board hub-rb3 (AI Hub): compile job {job} "
                    f"({hub.url}/jobs/{job}/) failed on 'RB3 Gen 2 (Proxy)': {reason}")
    assert outcome(got["a::context_run"]).startswith("skipped: blocked by a::context_binary")
    assert_no_token(tmp_path, capsys.readouterr().out)


def test_a_device_of_another_soc_is_refused_before_any_job(
        tmp_path: Path, env: None) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        code, got = run(tmp_path, project(tmp_path, hub, board='device: "Samsung Galaxy S23"'))
        assert hub.jobs == {}
    assert code == 1
    assert outcome(got["a::context_binary"]) == (
        "failure: board hub-rb3 is the AI Hub device 'Samsung Galaxy S23' (chipset "
        "qualcomm-snapdragon-8gen2: SM8550) but export a targets QCS6490 (target.soc): a run "
        "there proves nothing about the QCS6490; choose a QCS6490 device (device: or "
        "chipset:) or correct target.soc")


def test_json_output_stays_one_json_document(tmp_path: Path, env: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The client prints "Downloaded model to ..." whatever its verbosity: not on our
    stdout, which `qnn-ci run --json` keeps to one JSON document."""
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        manifest = project(tmp_path, hub)
        capsys.readouterr()
        code = main(["run", str(manifest), "--workdir", str(tmp_path / "w"), "--json",
                     "--stage", "context_binary"])
    out = capsys.readouterr().out
    assert code == 0
    rows = {r["stage"]: r for r in json.loads(out)}
    assert rows["context_binary"]["status"] == "passed"
    assert "Downloaded" not in out


def test_a_chipset_picks_the_first_device_that_has_it(tmp_path: Path, env: None) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        code, got = run(tmp_path, project(tmp_path, hub,
                                          board="chipset: qualcomm-qcs6490-proxy"),
                        "context_binary")
        assert code == 0
        assert [j.device.name for j in hub.jobs.values()] == ["QCS6490 (Proxy)"]
    assert props(got["a::context_binary"])["hub.device"] == "QCS6490 (Proxy)"


def test_a_wrong_token_is_one_line_and_never_shown(
        tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    wrong = "not-the-token-9e8d7c"
    monkeypatch.setenv(TOKEN_ENV, wrong)
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        code, got = run(tmp_path, project(tmp_path, hub))
    out = capsys.readouterr()
    assert code == 1
    text = outcome(got["a::context_binary"])
    assert text.startswith("failure: board hub-rb3 (AI Hub): device lookup: ")
    assert "check the token in the board's token_env variable" in text
    assert "\n" not in text and wrong not in text
    assert wrong not in out.out + out.err
    assert wrong.encode() not in (tmp_path / "report.xml").read_bytes()


def test_no_token_or_a_forks_code_is_a_skip_that_reaches_no_service(
        tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        manifest = project(tmp_path, hub)
        monkeypatch.delenv(TOKEN_ENV)
        code, got = run(tmp_path, manifest)
        assert code == 0
        assert outcome(got["a::context_run"]) == (
            f"skipped: board hub-rb3: {TOKEN_ENV} is not set (the AI Hub API token; in GitHub "
            f"Actions: env: {TOKEN_ENV}: ${{{{ secrets.{TOKEN_ENV} }}}})")
        monkeypatch.setenv(TOKEN_ENV, TOKEN)
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {
            "number": 7, "head": {"repo": {"id": 2, "full_name": "someone/fork"}},
            "base": {"repo": {"id": 1, "full_name": "us/repo"}}}}))
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request_target")
        monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
        monkeypatch.delenv("QNN_CI_ALLOW_FORK_PRS", raising=False)
        for stage in ("context_binary", "context_run"):
            code, got = run(tmp_path, manifest, stage)
            assert code == 0
            assert outcome(got[f"a::{stage}"]) == (
                "skipped: AI Hub is not used for pull request #7 from the fork someone/fork: "
                "a fork's code must not spend this repository's AI Hub token; set "
                "QNN_CI_ALLOW_FORK_PRS=true to allow it")
        assert hub.requests == []


def test_a_job_past_its_time_limit_is_one_line(tmp_path: Path, env: None) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        hub.slow_jobs(1000, kind="compile")
        manifest = project(tmp_path, hub, board='device: "RB3 Gen 2 (Proxy)"\n'
                                                "job_timeout_s: 2")
        code, got = run(tmp_path, manifest, "context_binary")
        (job,) = hub.jobs
    assert code == 1
    assert outcome(got["a::context_binary"]) == (
        f"failure: board hub-rb3 (AI Hub): compile job {job} ({hub.url}/jobs/{job}/) still "
        "OPTIMIZING_MODEL after 2 s (job_timeout_s); it goes on on AI Hub: see its page")


def test_baselines_and_the_regression_check_work_as_for_a_board(
        tmp_path: Path, env: None, capsys: pytest.CaptureFixture[str]) -> None:
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        manifest = project(tmp_path, hub)
        code, _ = run(tmp_path, manifest, "regression")
        assert code == 0, capsys.readouterr().out
        assert main(["baseline", "update", str(manifest), "--workdir",
                     str(tmp_path / "w")]) == 0
        saved = (tmp_path / "qnn-baselines.yaml").read_text()
        assert "board:hub-rb3" in saved and "latency.context_median_ms" in saved
        assert "context_vs_fp32" in saved
        code, got = run(tmp_path, manifest, "regression")
    assert code == 0
    assert outcome(got["a::regression"]) == "passed"
    assert TOKEN not in saved


def test_interrupted_waits_name_the_jobs_left_on_ai_hub(
        tmp_path: Path, env: None, caplog: pytest.LogCaptureFixture) -> None:
    from qnn_ci.hub.client import HubClient
    from qnn_ci.hub.jobs import submit, wait_all
    from qnn_ci.transport.config import BoardConfig

    def interrupt(_seconds: float) -> None:
        raise KeyboardInterrupt

    model = scale_model(tmp_path / "m.onnx", dims=[1, 8])
    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        hub.slow_jobs(1000, kind="compile")
        board = BoardConfig("hub-rb3", "ai-hub", device="RB3 Gen 2 (Proxy)",
                            token_env=TOKEN_ENV, api_url=hub.api_url)
        client = HubClient(board, {TOKEN_ENV: TOKEN})
        job = submit(client, "compile", lambda: client.client.submit_compile_job(
            str(model), qai_hub.Device("RB3 Gen 2 (Proxy)"),
            options="--target_runtime qnn_context_binary"))
        with pytest.raises(KeyboardInterrupt):
            wait_all(client, [job], sleep=interrupt)
    assert f"these go on on AI Hub (stop them on their pages): compile job {job.job_id} " \
           f"({hub.url}/jobs/{job.job_id}/)" in caplog.text
    assert TOKEN not in caplog.text



def test_pytest_gives_the_same_answers(tmp_path: Path, env: None) -> None:
    """The pytest shell runs the same engine: `pytest -m qnn` on the manifest passes
    the AI Hub stages, skips the shell-board ones with the reason, and shows no token."""
    import os
    import subprocess
    import sys

    with running_hub(tmp_path / "hub", token=TOKEN) as hub:
        manifest = project(tmp_path, hub)
        environ = dict(os.environ, PYTHONPATH=str(tmp_path))
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-m",
             "qnn", "-q", "-rA", "--junitxml", str(tmp_path / "pytest.xml"), str(manifest)],
            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300)
        assert len([j for j in hub.jobs.values() if j.kind == "compile"]) == 1
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "PASSED qnn-ci.yaml::a::context_binary" in out
    assert "PASSED qnn-ci.yaml::a::context_run" in out
    assert "board hub-rb3 is an AI Hub board: htp_vs_cpu runs qnn-net-run" in out
    assert TOKEN not in out and TOKEN not in (tmp_path / "pytest.xml").read_text()
