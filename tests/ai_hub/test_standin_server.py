"""The AI Hub stand-in driven by the REAL qai-hub client (unmodified, not patched):
the client reaches the stand-in only because its config file says so.

Happy paths here; failure knobs in test_standin_failures.py."""

from __future__ import annotations

import configparser
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

qai_hub = pytest.importorskip("qai_hub", reason="qai-hub is not installed (pip install qai-hub)")

from fixtures.ai_hub import (  # noqa: E402  (fixtures.ai_hub needs qai_hub)
    CompileRequest,
    CompileResult,
    HubServer,
    RunRequest,
    RunResult,
    StandinBackend,
    TensorInfo,
    running_hub,
)
from fixtures.ai_hub.backend import MODEL_TYPE_QNN_CONTEXT_BINARY  # noqa: E402
from fixtures.qairt_standin.context_blob import VERSION_HEAD, read_context_payload  # noqa: E402
from tests.ai_hub.conftest import PART_SIZE, TOKEN, use_ini  # noqa: E402

PROXY = "QCS6490 (Proxy)"
CONTEXT_BINARY = "--target_runtime qnn_context_binary"


def run_onnx(model: Path, inputs: dict[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    batches = len(next(iter(inputs.values())))
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for k in range(batches):
        for name, value in zip(names, sess.run(None, {n: v[k] for n, v in inputs.items()}),
                               strict=True):
            out[name].append(value)
    return out


def compiled(client: Any, onnx_model: Path, device: str = PROXY,
             options: str = CONTEXT_BINARY) -> Any:
    model = client.upload_model(str(onnx_model))
    return client.submit_compile_job(model, qai_hub.Device(device), options=options)


# ----------------------------------------------------------------------------- config

def test_client_reads_the_written_client_ini(hub: HubServer, client: Any) -> None:
    config = configparser.ConfigParser()
    config.read(hub.client_ini)
    assert dict(config["api"]) == {"api_token": TOKEN, "api_url": hub.api_url,
                                   "web_url": hub.url, "verbose": "False"}
    from qai_hub.api_utils import get_config_path

    assert get_config_path() == str(hub.client_ini)     # the env override, by the client
    assert client.config.api_url == hub.api_url
    assert client.config.api_token == TOKEN
    assert hub.api_url.startswith("http://127.0.0.1:")
    assert hub.storage_url.startswith("http://127.0.0.1:")
    assert hub.storage_url != hub.url


def test_module_api_and_cli_in_a_subprocess_configured_by_env_only(
        hub: HubServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    env.update(HOME=str(home), QAIHUB_CLIENT_INI=str(hub.client_ini),
               NO_PROXY="127.0.0.1,localhost")
    code = ("import json, qai_hub\n"
            "print(json.dumps([d.name for d in qai_hub.get_devices()]))\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        "QCS6490 (Proxy)", "RB3 Gen 2 (Proxy)", "Samsung Galaxy S23"]
    cli = Path(sys.executable).parent / "qai-hub"
    done = subprocess.run([str(cli), "list-devices", "--device", "RB3 Gen 2 (Proxy)"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "RB3 Gen 2 (Proxy)" in done.stdout and "qualcomm-qcs6490-proxy" in done.stdout
    assert "QCS6490 (Proxy)" not in done.stdout
    gets = hub.api_requests(r"^/api/v1/devices/$", "GET")
    assert len(gets) == 2 and all(r.token == TOKEN for r in gets)
    assert gets[1].query["name"] == ["RB3 Gen 2 (Proxy)"]


# ---------------------------------------------------------------------------- devices

def test_list_and_filter_devices(hub: HubServer, client: Any) -> None:
    devices = {d.name: d for d in client.get_devices()}
    assert set(devices) == {"QCS6490 (Proxy)", "RB3 Gen 2 (Proxy)", "Samsung Galaxy S23"}
    proxy = devices[PROXY]
    for attr in ("chipset:qualcomm-qcs6490-proxy", "hexagon:v68", "htp-supports-fp16:false",
                 "framework:qnn", "framework:onnx"):
        assert attr in proxy.attributes
    phone = devices["Samsung Galaxy S23"]
    assert "hexagon:v73" in phone.attributes and "chipset:sm8550" in phone.attributes
    both = client.get_devices(attributes="chipset:qualcomm-qcs6490-proxy")
    assert sorted(d.name for d in both) == ["QCS6490 (Proxy)", "RB3 Gen 2 (Proxy)"]
    assert [d.name for d in client.get_devices(attributes=["hexagon:v73",
                                                           "htp-supports-fp16:true"])] == [
        "Samsung Galaxy S23"]
    assert client.get_devices(name="No Such Phone") == []
    assert [d.name for d in client.get_devices(os="[13,)", attributes="os:android")] == [
        "Samsung Galaxy S23"]
    assert "htp-supports-fp16:false" in client.get_device_attributes()
    last = hub.api_requests(r"^/api/v1/devices/$")[-1]
    assert last.query == {"name": [""], "os": [""], "select": ["False"]}
    first_filtered = hub.api_requests(r"^/api/v1/devices/$")[1]
    assert first_filtered.query["attributes"] == ["chipset:qualcomm-qcs6490-proxy"]


def test_device_lookup_by_name_selects_one(hub: HubServer, client: Any,
                                           onnx_model: Path) -> None:
    job = compiled(client, onnx_model, device="RB3 Gen 2 (Proxy)")
    assert job.device.name == "RB3 Gen 2 (Proxy)"
    lookup = hub.api_requests(r"^/api/v1/devices/$")[0]
    assert lookup.query["name"] == ["RB3 Gen 2 (Proxy)"] and lookup.query["select"] == ["True"]
    with pytest.raises(qai_hub.UserError, match="is not available"):
        client.submit_compile_job(job.model, qai_hub.Device("Pixel 99"), options=CONTEXT_BINARY)


# ----------------------------------------------------------------------------- models

def test_upload_model_in_parts(hub: HubServer, client: Any, onnx_model: Path) -> None:
    data = onnx_model.read_bytes()
    model = client.upload_model(str(onnx_model))
    assert model.name == "model.onnx"
    stored = hub.models[model.model_id]
    assert stored.data == data
    puts = [r for r in hub.requests if r.service == "storage" and r.method == "PUT"]
    assert len(puts) == math.ceil(len(data) / PART_SIZE) > 1
    assert sum(r.body_size for r in puts) == len(data)
    assert all(r.token is None and "Authorization" not in r.headers for r in puts)
    fetched = client.get_model(model.model_id)
    assert fetched.model_type == qai_hub.SourceModelType.ONNX
    (graph_inputs,) = fetched.input_spec.values()
    assert [(t.name, t.shape, t.dtype) for t in graph_inputs] == [("x", (1, 4), "float32")]
    (graph_outputs,) = fetched.output_spec.values()
    assert [t.name for t in graph_outputs] == ["y", "z"]
    done = hub.api_requests(rf"^/api/v1/models/{model.model_id}/multipart_upload/$", "POST")
    assert len(done) == 1


# ---------------------------------------------------------------------------- compile

def test_compile_for_qcs6490_proxy_to_a_context_binary(hub: HubServer, client: Any,
                                                       onnx_model: Path, tmp_path: Path) -> None:
    job = compiled(client, onnx_model)
    status = job.wait()
    assert status.success and status.code == "SUCCESS"
    assert job.device.name == PROXY and job.options == CONTEXT_BINARY
    create = hub.api_requests(r"^/api/v1/jobs/$", "POST")[0]
    assert create.query == {"seed_target_model": ["true"]}
    target = job.get_target_model()
    assert target.model_type == qai_hub.SourceModelType.QNN_CONTEXT_BINARY
    assert job.get_target_shapes() == {"x": ((1, 4), "float32")}
    path = Path(job.download_target_model(str(tmp_path / "target")))
    assert path.name == "target.bin"
    blob = path.read_bytes()
    assert blob.startswith(VERSION_HEAD)
    assert b"soc_type=QCS6490;arch=68;" in blob and b"vtcm_size=2097152;" in blob
    facts = read_context_payload(path)
    assert facts is not None
    assert (facts["soc"], facts["arch"], facts["vtcm_bytes"]) == ("QCS6490", 68, 2 << 20)
    assert [t["name"] for t in facts["inputs"]] == ["x"]
    assert [t["name"] for t in facts["outputs"]] == ["y", "z"]
    assert facts["ai_hub"] == {"job_id": job.job_id, "device": PROXY, "options": CONTEXT_BINARY}
    assert target.metadata[qai_hub.ModelMetadataKey.QNN_CONTEXT_BIN_HEXAGON_VERSION] == "v68"
    (download,) = [r for r in hub.requests if r.service == "storage" and r.method == "GET"]
    assert download.path.endswith("/model.bin") and download.status == 200


def test_compile_for_the_sm8550_phone_and_other_runtimes(hub: HubServer, client: Any,
                                                         onnx_model: Path, tmp_path: Path) -> None:
    phone = compiled(client, onnx_model, device="Samsung Galaxy S23")
    facts = read_context_payload(phone.download_target_model(str(tmp_path / "phone")))
    assert facts is not None and (facts["soc"], facts["arch"]) == ("SM8550", 73)
    dlc = compiled(client, onnx_model, options="--target_runtime qnn_dlc")
    path = Path(dlc.download_target_model(str(tmp_path / "dlc")))
    assert path.suffix == ".dlc"
    with zipfile.ZipFile(path) as zf:
        assert "dlc.metadata" in zf.namelist()
        assert zf.read("standin/model.onnx") == onnx_model.read_bytes()
    onnx_job = compiled(client, onnx_model, options="--target_runtime onnx")
    assert Path(onnx_job.download_target_model(str(tmp_path / "o"))).read_bytes() == \
        onnx_model.read_bytes()


# -------------------------------------------------------------------- inference, profile

def test_inference_on_the_compiled_model_matches_onnxruntime(hub: HubServer, client: Any,
                                                             onnx_model: Path) -> None:
    job = compiled(client, onnx_model)
    rng = np.random.default_rng(3)
    inputs = {"x": [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(3)]}
    inference = client.submit_inference_job(job.get_target_model(), qai_hub.Device(PROXY),
                                            inputs=inputs, profile=False)
    outputs = inference.download_output_data()
    expected = run_onnx(onnx_model, inputs)
    assert list(outputs) == ["y", "z"]
    for name in ("y", "z"):
        assert len(outputs[name]) == 3
        for got, want in zip(outputs[name], expected[name], strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    # the stand-in read the client's h5 upload as the client wrote it
    sent = hub.datasets[inference.inputs.dataset_id].entries()
    assert list(sent) == ["x"]
    for got, want in zip(sent["x"], inputs["x"], strict=True):
        np.testing.assert_array_equal(got, want)
    assert inference.shapes == {"x": ((1, 4), "float32")}
    assert inference.download_profile() == {}          # profile=False: no profile


def test_profile_job(hub: HubServer, client: Any, onnx_model: Path, tmp_path: Path) -> None:
    model = client.upload_model(str(onnx_model))
    job = client.submit_profile_job(model, qai_hub.Device(PROXY))
    profile = job.download_profile()
    summary = profile["execution_summary"]
    for key in ("estimated_inference_time", "estimated_inference_peak_memory",
                "first_load_time", "warm_load_time"):
        assert isinstance(summary[key], int) and summary[key] > 0, key
    assert summary["estimated_inference_time"] == summary["all_inference_times"][0]
    detail = profile["execution_detail"]
    assert [(d["name"], d["type"]) for d in detail] == [
        ("matmul", "MatMul"), ("add", "Add"), ("relu", "Relu"), ("sigmoid", "Sigmoid")]
    assert {d["compute_unit"] for d in detail} == {"NPU"}
    assert job.download_output_data() is None          # no inputs: no output dataset
    saved = Path(job.download_profile(str(tmp_path / "profile")))
    assert saved.name == "profile.json" and json.loads(saved.read_text()) == profile
    cpu = client.submit_inference_job(model, qai_hub.Device(PROXY), options="--compute_unit cpu")
    assert {d["compute_unit"] for d in cpu.download_profile()["execution_detail"]} == {"CPU"}


FIXED_PROFILE: dict[str, Any] = {
    "execution_summary": {
        "estimated_inference_time": 1234, "estimated_inference_peak_memory": 5 << 20,
        "first_load_time": 40000, "first_load_peak_memory": 6 << 20,
        "warm_load_time": 3000, "warm_load_peak_memory": 7 << 20,
        "compile_time": 11, "compile_peak_memory": 12,
        "inference_memory_peak_range": (1000, 2000),
        "inference_memory_increase_range": (10, 20),
        "all_inference_times": [1234, 1250, 1199],
    },
    "execution_detail": [
        {"name": "conv", "type": "Conv2d", "compute_unit": "NPU", "execution_time": 700},
        {"name": "resize", "type": "Resize", "compute_unit": "GPU", "execution_time": 300},
        {"name": "nms", "type": "NonMaxSuppression", "compute_unit": "CPU",
         "execution_time": 234, "execution_cycles": 99},
    ],
}


class FixedBackend(StandinBackend):
    """A plugged-in backend: fixed artefact, outputs and profile."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def compile(self, request: CompileRequest) -> CompileResult:
        self.seen.append(request)
        return CompileResult(b"ARTEFACT:" + request.device.name.encode(), "net.bin",
                             MODEL_TYPE_QNN_CONTEXT_BINARY,
                             [TensorInfo("in0", (1, 4), "uint8")],
                             [TensorInfo("out0", (1, 3), "float16")])

    def run(self, request: RunRequest) -> RunResult:
        self.seen.append(request)
        x = request.inputs["in0"] if request.inputs else []
        return RunResult({"out0": [np.full((1, 3), a.sum(), np.float16) for a in x]},
                         FIXED_PROFILE, [TensorInfo("in0", (1, 4), "uint8")])


def test_a_plugged_in_backend_reaches_the_client(tmp_path: Path, onnx_model: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FixedBackend()
    with running_hub(tmp_path / "hub", token=TOKEN, backend=backend) as hub:
        client = use_ini(monkeypatch, hub.client_ini, tmp_path / "home")
        job = client.submit_compile_job(str(onnx_model), qai_hub.Device(PROXY),
                                        options=CONTEXT_BINARY + " --quantize_io",
                                        input_specs={"x": ((1, 4), "float32")})
        assert Path(job.download_target_model(str(tmp_path / "t"))).read_bytes() == \
            b"ARTEFACT:" + PROXY.encode()
        request = backend.seen[0]
        assert isinstance(request, CompileRequest)
        assert request.options == CONTEXT_BINARY + " --quantize_io"
        assert request.input_specs == {"x": ((1, 4), "float32")}
        assert request.model.data == onnx_model.read_bytes()
        assert request.device.hexagon_arch == 68 and not request.device.supports_fp16
        inputs = {"in0": [np.arange(4, dtype=np.uint8).reshape(1, 4),
                          np.ones((1, 4), np.uint8)]}
        run = client.submit_inference_job(job.get_target_model(), qai_hub.Device(PROXY),
                                          inputs=inputs)
        outputs = run.download_output_data()
        assert [o.tolist() for o in outputs["out0"]] == [[[6.0] * 3], [[4.0] * 3]]
        assert outputs["out0"][0].dtype == np.float16
        profile = run.download_profile()
        assert profile["execution_detail"] == FIXED_PROFILE["execution_detail"]
        summary = profile["execution_summary"]
        for key, value in FIXED_PROFILE["execution_summary"].items():
            assert summary[key] == value, key
        assert summary["compile_memory_peak_range"] is None      # unset stays unset
        seen_run = backend.seen[1]
        assert isinstance(seen_run, RunRequest) and seen_run.profiling
        assert seen_run.source_onnx == onnx_model.read_bytes()
        assert seen_run.model.data == b"ARTEFACT:" + PROXY.encode()


# --------------------------------------------------------------------------- the token

def test_token_is_recorded_but_never_shown(hub: HubServer, client: Any, onnx_model: Path,
                                           tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.DEBUG, logger="fixtures.ai_hub")
    job = compiled(client, onnx_model)
    job.download_target_model(str(tmp_path / "t"))
    api = [r for r in hub.requests if r.service == "api"]
    storage = [r for r in hub.requests if r.service == "storage"]
    assert api and storage
    assert all(r.token == TOKEN for r in api)
    assert all(r.headers["Authorization"] == "token <redacted>" for r in api)
    assert all(r.token is None for r in storage)
    shown = [repr(hub.requests), str(hub.requests), *map(str, hub.requests),
             "\n".join(hub.log_lines), hub.log_file.read_text(), caplog.text]
    assert len(hub.log_lines) >= len(hub.requests)
    for text in shown:
        assert text and TOKEN not in text


def test_auth_user_endpoint(hub: HubServer, client: Any, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``users/auth/user/``: the client has the call (``public_rest_api.get_auth_user``)
    but no ``Client`` method uses it; called here with the config the client loads."""
    from qai_hub.api_utils import load_default_api_config
    from qai_hub.public_rest_api import APIException, get_auth_user

    user = get_auth_user(load_default_api_config())
    assert user.email == "standin@example.invalid" and user.id == 1
    use_ini(monkeypatch, hub.write_client_ini(tmp_path / "bad.ini", token="nope"),
            tmp_path / "home2")
    with pytest.raises(APIException, match="please check your API token") as caught:
        get_auth_user(load_default_api_config())
    assert caught.value.status_code == 401
    assert [r.status for r in hub.api_requests(r"^/api/v1/users/auth/user/$")] == [200, 401]


def test_the_standin_does_not_import_qnn_ci() -> None:
    import ast

    import fixtures.ai_hub as package

    modules = sorted(Path(package.__file__).parent.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "qnn_ci" or n.startswith("qnn_ci.") for n in names), path
