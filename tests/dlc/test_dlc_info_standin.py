"""The reader on what the stand-in ``qairt-dlc-info`` prints in each layout it can print
(the ones the formats page does not confirm), for one quantized DLC of the CNN."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixtures.qairt_standin import HOST_BIN, make_sdk
from qnn_ci.sdk.dlc_info import DlcInfo, parse_dlc_info
from tests.board_run.conftest import INPUT_SHAPE, build_cnn, write_samples


def _tool(sdk: Path, name: str, *args: str) -> str:
    res = subprocess.run([str(sdk / HOST_BIN / name), *args], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def dlc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dlc")
    sdk = make_sdk(folder / "sdk", "2.31.0", dlc_tools=True)
    model = build_cnn(folder / "cnn.onnx")
    lst = write_samples(folder / "cal", 3)
    _tool(sdk, "qairt-converter", "--input_network", str(model), "--source_model_input_shape",
          "x", ",".join(map(str, INPUT_SHAPE)), "-o", str(folder / "cnn.dlc"))
    _tool(sdk, "qairt-quantizer", "--input_dlc", str(folder / "cnn.dlc"), "--output_dlc",
          str(folder / "cnn_q.dlc"), "--input_list", str(lst), "--act_bitwidth", "16",
          "--bias_bitwidth", "32", "--use_per_channel_quantization")
    return folder / "cnn_q.dlc"


def _info(tmp_path: Path, dlc: Path, variant: dict[str, str]) -> DlcInfo:
    sdk = make_sdk(tmp_path / "sdk", "2.31.0", dlc_tools=True, dlc_variants=variant)
    info = parse_dlc_info(_tool(sdk, "qairt-dlc-info", "-i", str(dlc)))
    assert info.problems == []
    assert len(info.ops) == 6 and len(info.tensors) == 13
    assert info.inputs == ["x"] and info.tensors["x"].dims == (1, 16, 16, 3)
    assert info.quantizer is not None and info.quantizer.value("act_bitwidth") == 16
    assert info.quantizer.value("use_per_channel_quantization") is True
    assert info.sdk_version == "2.31.0"
    return info


@pytest.mark.parametrize("variant,typed", [
    ({}, 13), ({"borders": "plus", "meta": "before", "columns": "qairt"}, 13),
    ({"signed_fixed": "Fxp", "names": "sanitized"}, 13),
    ({"dtypes": "column"}, 7),        # op outputs and graph I/O; weights by name only
    ({"dtypes": "io_tables"}, 3),     # the graph I/O only
])
def test_each_layout_the_standin_prints(tmp_path: Path, dlc: Path, variant: dict[str, str],
                                        typed: int) -> None:
    info = _info(tmp_path, dlc, variant)
    assert sum(1 for t in info.tensors.values() if t.data_type) == typed
    assert sorted(info.outputs) == sorted(["logits", "feat_map_0" if variant.get("names")
                                           else "feat/map:0"])
    assert info.tensors["logits"].data_type == "QNN_DATATYPE_UFIXED_POINT_16"
    if typed == 13:
        assert info.tensors["w1"].is_static and info.tensors["w1"].is_fixed_point
        assert info.tensors["b1"].data_type == "QNN_DATATYPE_SFIXED_POINT_32"
