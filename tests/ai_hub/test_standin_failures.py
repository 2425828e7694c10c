"""The AI Hub stand-in's failure knobs, as the REAL qai-hub client surfaces them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

qai_hub = pytest.importorskip("qai_hub", reason="qai-hub is not installed (pip install qai-hub)")

from qai_hub.client import InternalError, RateLimitedError, UserError  # noqa: E402

from fixtures.ai_hub import QUOTA_DETAIL, HubServer  # noqa: E402
from tests.ai_hub.conftest import use_ini  # noqa: E402

PROXY = "QCS6490 (Proxy)"
CONTEXT_BINARY = "--target_runtime qnn_context_binary"
JOB = r"^/api/v1/jobs/[^/]+/$"


def one_input() -> dict[str, list[np.ndarray]]:
    return {"x": [np.ones((1, 4), np.float32)]}


# -------------------------------------------------------------------------- job outcome

def test_failed_compile_job_shows_the_reason(hub: HubServer, client: Any, onnx_model: Path,
                                             tmp_path: Path) -> None:
    reason = "Failed to compile: Conv_0 is not supported on HTP v68"
    hub.fail_jobs(reason, kind="compile")
    model = client.upload_model(str(onnx_model))
    job = client.submit_compile_job(model, qai_hub.Device(PROXY), options=CONTEXT_BINARY)
    status = job.wait()
    assert (status.code, status.failure, status.message) == ("FAILED", True, reason)
    assert hub.jobs[job.job_id].failure_reason == reason
    with pytest.raises(UserError, match=f"its job {job.job_id} failed"):
        job.download_target_model(str(tmp_path / "never"))
    # the rule fired once: the next compile succeeds
    again = client.submit_compile_job(model, qai_hub.Device(PROXY), options=CONTEXT_BINARY)
    assert again.wait().success


def test_failed_inference_job_shows_the_reason(hub: HubServer, client: Any,
                                               onnx_model: Path) -> None:
    reason = "Inference failed: the device ran out of memory"
    hub.fail_jobs(reason, kind="inference")
    job = client.submit_inference_job(str(onnx_model), qai_hub.Device(PROXY), inputs=one_input())
    assert job.wait().message == reason
    assert job.download_output_data() is None
    assert job.download_profile() == {}
    assert f"failure_reason : {reason}" in repr(job)


def test_backend_refusals_fail_the_job(hub: HubServer, client: Any, onnx_model: Path) -> None:
    model = client.upload_model(str(onnx_model))
    tflite = client.submit_compile_job(model, qai_hub.Device(PROXY))    # AI Hub's default
    assert tflite.wait().message == "The stand-in does not produce --target_runtime tflite."
    fp16 = client.submit_compile_job(model, qai_hub.Device(PROXY),
                                     options=CONTEXT_BINARY + " --quantize_full_type float16")
    assert "does not support FP16" in fp16.wait().message
    on_phone = client.submit_compile_job(model, qai_hub.Device("Samsung Galaxy S23"),
                                         options=CONTEXT_BINARY + " --quantize_full_type float16")
    assert on_phone.wait().success
    wrong = client.submit_inference_job(model, qai_hub.Device(PROXY),
                                        inputs={"not_x": [np.ones((1, 4), np.float32)]})
    assert wrong.wait().message == "Input names ['not_x'] do not match the model's inputs ['x']."


def test_slow_job_stays_in_progress_for_n_polls(hub: HubServer, client: Any,
                                                onnx_model: Path) -> None:
    hub.slow_jobs(3, kind="compile")
    model = client.upload_model(str(onnx_model))
    job = client.submit_compile_job(model, qai_hub.Device(PROXY), options=CONTEXT_BINARY)
    # poll 1 was the client's own fetch right after submitting (CREATED)
    codes = [job.get_status().code for _ in range(3)]
    assert codes == ["OPTIMIZING_MODEL", "OPTIMIZING_MODEL", "SUCCESS"]
    assert not job.get_status().running
    polls = hub.api_requests(rf"^/api/v1/jobs/{job.job_id}/$", "GET")
    assert len(polls) == 4                  # the final status is cached by the client


def test_slow_job_times_out_a_client_wait(hub: HubServer, client: Any, onnx_model: Path,
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = client.upload_model(str(onnx_model))
    # verbose=True: the client sleeps 1 s between checks instead of 10 (client.py Job.wait)
    verbose = use_ini(monkeypatch, hub.write_client_ini(tmp_path / "verbose.ini", verbose=True),
                      tmp_path / "home")
    hub.slow_jobs(50, kind="inference")
    job = verbose.submit_inference_job(model, qai_hub.Device(PROXY), inputs=one_input(),
                                       profile=False)
    with pytest.raises(TimeoutError, match=f"job \\({job.job_id}\\) completion timed out"):
        job.wait(timeout=1)
    assert job.get_status().code == "PROVISIONING_DEVICE"


# ------------------------------------------------------------------------- auth, quota

def test_wrong_token_is_a_401_the_client_reports(hub: HubServer, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bad = use_ini(monkeypatch, hub.write_client_ini(tmp_path / "bad.ini", token="not-it"),
                  tmp_path / "home")
    with pytest.raises(UserError, match="Failed to authenticate") as caught:
        bad.get_devices()
    assert "caused by a bad or expired API" in str(caught.value)
    (seen,) = hub.requests
    assert (seen.status, seen.note, seen.token) == (401, "invalid token", "not-it")


def test_missing_token_is_refused_by_the_client_itself(hub: HubServer, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ini = tmp_path / "no-token.ini"
    ini.write_text(f"[api]\napi_url = {hub.api_url}\nweb_url = {hub.url}\n")
    client = use_ini(monkeypatch, ini, tmp_path / "home")
    with pytest.raises(UserError, match="Your API token is missing"):
        client.get_devices()
    assert hub.requests == []


def test_forbidden_is_a_user_error_with_the_detail(hub: HubServer, client: Any) -> None:
    hub.fail_requests(r"^/api/v1/devices/$", status=403,
                      detail="You do not have permission to perform this action.", times=1)
    with pytest.raises(UserError, match=r"^You do not have permission to perform this action\.$"):
        client.get_devices()
    assert len(client.get_devices()) == 3


def test_quota_once_is_retried_by_the_client(hub: HubServer, client: Any,
                                             onnx_model: Path) -> None:
    model = client.upload_model(str(onnx_model))
    hub.quota_exceeded(times=1)
    job = client.submit_inference_job(model, qai_hub.Device(PROXY), inputs=one_input(),
                                      retry=False)
    assert job.wait().success
    posts = hub.api_requests(r"^/api/v1/jobs/$", "POST")
    assert [r.status for r in posts] == [429, 200]


@pytest.mark.slow
def test_quota_exceeded_is_a_rate_limited_error(hub: HubServer, client: Any,
                                                onnx_model: Path) -> None:
    """The client retries 429 with back-off (7 tries, 0-31 s) before it gives up."""
    model = client.upload_model(str(onnx_model))
    hub.quota_exceeded()
    with pytest.raises(RateLimitedError, match=f"^{QUOTA_DETAIL}$"):
        client.submit_inference_job(model, qai_hub.Device(PROXY), inputs=one_input(),
                                    retry=False)
    posts = hub.api_requests(r"^/api/v1/jobs/$", "POST")
    assert [r.status for r in posts] == [429] * 7
    assert hub.jobs == {}


# ------------------------------------------------------------------ dropped connections

def test_dropped_poll_is_retried_by_the_client(hub: HubServer, client: Any,
                                               onnx_model: Path) -> None:
    model = client.upload_model(str(onnx_model))
    hub.drop_connections(JOB, method="GET", times=1)
    job = client.submit_compile_job(model, qai_hub.Device(PROXY), options=CONTEXT_BINARY)
    assert job.wait().success
    polls = hub.api_requests(JOB, "GET")
    assert polls[0].note == "dropped: no response" and polls[0].status is None
    assert polls[1].status == 200


def test_dropped_upload_part_is_retried_by_the_client(hub: HubServer, client: Any,
                                                      onnx_model: Path) -> None:
    hub.drop_connections(r"^/uploads/models/[^/]+/[^/]+/2$", method="PUT", times=1)
    model = client.upload_model(str(onnx_model))
    assert hub.models[model.model_id].data == onnx_model.read_bytes()
    second = [r for r in hub.requests if r.service == "storage" and r.path.endswith("/2")]
    assert [r.status for r in second] == [None, 200]


def test_truncated_answer_is_an_internal_error(hub: HubServer, client: Any,
                                               onnx_model: Path) -> None:
    model = client.upload_model(str(onnx_model))
    job = client.submit_compile_job(model, qai_hub.Device(PROXY), options=CONTEXT_BINARY)
    hub.drop_connections(JOB, method="GET", mode="truncated", times=None)
    with pytest.raises(InternalError, match="A communication error occurred with Qualcomm AI Hub"):
        client.get_job(job.job_id)
    last = hub.api_requests(JOB)[-1]
    assert last.status == 200 and "truncated" in last.note


def test_storage_errors_are_reported_as_another_service(hub: HubServer, client: Any,
                                                        onnx_model: Path, tmp_path: Path) -> None:
    model = client.upload_model(str(onnx_model))
    job = client.submit_compile_job(model, qai_hub.Device(PROXY), options=CONTEXT_BINARY)
    assert job.wait().success
    hub.fail_requests(r"^/downloads/", status=403, content_type="application/xml",
                      body=b"<Error><Code>AccessDenied</Code>"
                           b"<Message>Request has expired</Message></Error>")
    with pytest.raises(InternalError, match="AccessDenied: Request has expired") as caught:
        job.download_target_model(str(tmp_path / "t"))
    # a 4xx from the hub itself would be a UserError; from another service it is the
    # client's "Internal API failure", without the "check the service's status" line
    # the client adds for its own API
    text = str(caught.value)
    assert "contact support" in text
    assert hub.api_url not in text and "Qualcomm AI Hub" not in text
    download = [r for r in hub.requests if r.service == "storage" and r.method == "GET"]
    assert [r.status for r in download] == [403] and download[0].token is None
