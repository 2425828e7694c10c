"""The stand-in host qnn-context-binary-generator (formats page, section 4)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from fixtures.qairt_standin import read_standin_payload
from tests.standin_sdk.conftest import convert, htp_config, run_bash, run_tool

X86 = "x86_64-linux-clang"


def _build(sdk: Path, model: Path, out: Path, name: str, *flags: str) -> Path:
    cpp = out / f"{name}.cpp"
    run = convert(sdk, "-i", model, "-o", cpp, *flags)
    assert run.code == 0, run.text
    run = run_tool(sdk, "qnn-model-lib-generator", "-c", cpp, "-b", out / f"{name}.bin",
                   "-t", X86, "-o", out / "lib", cwd=out)
    assert run.code == 0, run.text
    return out / "lib" / X86 / f"lib{name}.so"


@pytest.fixture(scope="module")
def libs(sdk: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
         ) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("ctx")
    return {
        "float": _build(sdk, models["tiny"], out, "big", "-d", "x", "1,3,256,256"),
        "fp16": _build(sdk, models["tiny"], out, "half", "-d", "x", "1,3,8,8",
                       "--float_bitwidth", "16"),
    }


def _generate(sdk: Path, lib: Path, out: Path, config: Path | None = None) -> str:
    extra = f" --config_file {config}" if config else ""
    return (f"{sdk}/bin/x86_64-linux-clang/qnn-context-binary-generator --model {lib} "
            f"--backend libQnnHtp.so --binary_file ctx --output_dir {out}{extra}; echo rc=$?")


def test_context_binary_carries_the_model(sdk: Path, libs: dict[str, Path],
                                          tmp_path: Path) -> None:
    config = htp_config(tmp_path / "cfg", "big", {"soc_id": 43, "dsp_arch": "v73"}, vtcm_mb=8)
    run = run_bash(_generate(sdk, libs["float"], tmp_path / "out", config), cwd=tmp_path)
    assert "rc=0" in run.stdout, run.text
    assert run.stdout.startswith("qnn-context-binary-generator pid:")
    payload = read_standin_payload(tmp_path / "out/ctx.bin")
    assert payload["context"]["htp_arch"] == "v73" and payload["context"]["vtcm_mb"] == 8
    assert base64.b64decode(payload["onnx_b64"]) == base64.b64decode(
        read_standin_payload(libs["float"])["onnx_b64"])


@pytest.mark.parametrize(("device", "lib", "aborts"), [
    ({"soc_id": 35}, "fp16", True),                      # QCS6490: v68, no FP16
    ({"soc_model": 35}, "fp16", True),                   # the older key
    ({"soc_id": 43, "dsp_arch": "v73"}, "fp16", False),
    ({"soc_id": 35, "dsp_arch": "v68"}, "float", False),
])
def test_fp16_on_v68_aborts(sdk: Path, libs: dict[str, Path], tmp_path: Path, device: dict,
                            lib: str, aborts: bool) -> None:
    graph = "half" if lib == "fp16" else "big"
    config = htp_config(tmp_path / "cfg", graph, device, vtcm_mb=64)
    run = run_bash(_generate(sdk, libs[lib], tmp_path / "out", config), cwd=tmp_path)
    if aborts:
        assert "rc=134" in run.stdout, run.text
        assert "FP16" in run.stderr
        assert not (tmp_path / "out/ctx.bin").exists()
    else:
        assert "rc=0" in run.stdout, run.text
        assert (tmp_path / "out/ctx.bin").is_file()


def test_vtcm_overflow_fails_graph_finalize(sdk: Path, libs: dict[str, Path],
                                           tmp_path: Path) -> None:
    config = htp_config(tmp_path / "cfg", "big", {"soc_id": 35, "dsp_arch": "v68"}, vtcm_mb=1)
    run = run_bash(_generate(sdk, libs["float"], tmp_path / "out", config), cwd=tmp_path)
    assert "rc=1" in run.stdout
    assert re.search(r"\[ ERROR \] Requires 0x[0-9a-f]+ bytes of TCM, which is greater than the "
                     r"TCM size of 0x100000!", run.stderr)
    assert "Failed to finalize graph (id: 1) with err 1002" in run.stderr
    assert "Graph Finalize failure" in run.stderr


def test_board_library_cannot_load_on_the_host(sdk: Path, esdk: Path, libs: dict[str, Path],
                                               tmp_path: Path) -> None:
    src = libs["float"].parents[2]
    run = run_bash(f"source {esdk} && source {sdk}/bin/envsetup.sh >/dev/null && "
                   f"qnn-model-lib-generator -c {src}/big.cpp -b {src}/big.bin "
                   f"-t aarch64-oe-linux-gcc11.2 -o {tmp_path}/lib", cwd=tmp_path)
    assert run.code == 0, run.text
    lib = tmp_path / "lib/aarch64-oe-linux-gcc11.2/libbig.so"
    run = run_bash(_generate(sdk, lib, tmp_path / "out"), cwd=tmp_path)
    assert "rc=1" in run.stdout and f"Could not load model : {lib}!" in run.stderr
