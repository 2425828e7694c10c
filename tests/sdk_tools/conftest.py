"""Fixtures for the SDK-driver tests: exports, tiny ONNX graphs, the stand-in SDK."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.engine.spec import (
    ExportSpec,
    InputSpec,
    QuantizationSpec,
    SdkSpec,
    TargetSpec,
)

REPO = Path(__file__).resolve().parents[2]
PPOCR_CLS = (REPO / ".venv/lib/python3.11/site-packages/rapidocr_onnxruntime/models/"
             "ch_ppocr_mobile_v2.0_cls_infer.onnx")


def make_export(tmp_path: Path, *, inputs: dict[str, InputSpec] | None = None,
                quantization: QuantizationSpec | None = None,
                target: TargetSpec | None = None, sdk: SdkSpec | None = None,
                model: Path | None = None, name: str = "m") -> ExportSpec:
    manifest = tmp_path / "qnn-ci.yaml"
    return ExportSpec(
        name=name, model=model or tmp_path / "model.onnx", manifest=manifest, line=3,
        inputs=inputs or {}, quantization=quantization or QuantizationSpec(),
        target=target or TargetSpec(), sdk=sdk or SdkSpec())


@pytest.fixture
def export_factory(tmp_path: Path) -> Callable[..., ExportSpec]:
    def make(**kw: Any) -> ExportSpec:
        return make_export(tmp_path, **kw)
    return make


# -- converter --help texts made by argparse itself (the real tool is argparse) --

_COMMON = [
    (("--input_network", "-i"), {"required": True}),
    (("--input_dim", "-d"), {"nargs": 2, "action": "append"}),
    (("--out_node", "--out_name"), {"action": "append"}),
    (("--output_path", "-o"), {}),
    (("--input_list",), {}),
    (("--quantization_overrides",), {}),
    (("--float_fallback",), {"action": "store_true"}),
    (("--act_quantizer",), {}),
    (("--param_quantizer",), {}),
    (("--act_quantizer_calibration",), {}),
    (("--param_quantizer_calibration",), {}),
    (("--percentile_calibration_value",), {}),
    (("--use_per_channel_quantization",), {"action": "store_true"}),
    (("--input_encoding", "-e"), {"nargs": "+", "action": "append"}),
    (("--dry_run",), {"nargs": "?", "const": "info"}),
    (("--keep_int64_inputs",), {"action": "store_true"}),
    (("--debug",), {"nargs": "?", "const": 0}),
]
_SHORT = ["act_bw", "weight_bw", "bias_bw", "float_bw", "float_bias_bw"]
_LONG = ["act_bitwidth", "weights_bitwidth", "bias_bitwidth", "float_bitwidth",
         "float_bias_bitwidth"]


def converter_help_text(era: str) -> str:
    """An argparse --help like the converter's: 'old' has only the short bitwidth
    flags, 'new' the long ones plus the short ones as deprecated aliases."""
    parser = argparse.ArgumentParser(
        prog="qnn-onnx-converter", description="Script to convert ONNX model into QNN",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, width=100))
    for names, kw in _COMMON:
        parser.add_argument(*names, help="Mentions --not_a_flag and -x in prose; see "
                            "--input_list for details.", **kw)
    if era == "new":
        for long, short in zip(_LONG, _SHORT, strict=True):
            parser.add_argument(f"--{long}", type=int, help="bitwidth")
            parser.add_argument(f"--{short}", dest=long, type=int,
                                help=f"[DEPRECATED] use --{long} instead")
    else:
        for short in _SHORT:
            parser.add_argument(f"--{short}", type=int,
                                help="bitwidth (newer SDKs call it --act_bitwidth)")
    return parser.format_help()


def tiny_conv_model(path: Path, *, dynamic_batch: bool = True) -> Path:
    """x[N,3,8,8] -> Conv(weights initializer) -> Relu -> y."""
    w = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "w")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    batch: Any = "N" if dynamic_batch else 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu1")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


# -- the stand-in SDK (fixtures/qairt_standin) ------------------------------------

@pytest.fixture(scope="session")
def standin_root(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """make_sdk per (version, options), made once per session."""
    from fixtures.qairt_standin import make_sdk

    made: dict[tuple[Any, ...], Path] = {}

    def get(version: str = "2.31.0", **options: Any) -> Path:
        key = (version, repr(sorted(options.items())))
        if key not in made:
            folder = tmp_path_factory.mktemp(f"qairt-{version}")
            made[key] = make_sdk(folder / "qairt", version, **options)
        return made[key]
    return get


@pytest.fixture(scope="session")
def esdk_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fixtures.qairt_standin import make_esdk

    return make_esdk(tmp_path_factory.mktemp("esdk") / "esdk")


@pytest.fixture
def sdk_factory(standin_root: Callable[..., Path], esdk_script: Path) -> Callable[..., Any]:
    from qnn_ci.sdk.locate import Sdk, version_from_root

    def make(version: str = "2.31.0", *, esdk: bool = False, **options: Any) -> Sdk:
        root = standin_root(version, **options)
        return Sdk(root=root, esdk_env=esdk_script if esdk else None,
                   version=version_from_root(root))
    return make


def write_input_list(folder: Path, inputs: dict[str, tuple[tuple[int, ...], str]],
                     samples: int = 2, seed: int = 0) -> Path:
    """``name:=path`` input list with ``samples`` random raw samples per input."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(samples):
        parts = []
        for name, (shape, dtype) in inputs.items():
            path = folder / f"{name}_{i}.raw"
            if np.dtype(dtype).kind in "iub":
                rng.integers(0, 2 if dtype == "bool" else 8, size=shape).astype(dtype).tofile(path)
            else:
                rng.random(shape, dtype=np.float32).astype(dtype).tofile(path)
            parts.append(f"{name}:={path}")
        lines.append(" ".join(parts))
    path = folder / "input_list.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def weightless_model(path: Path) -> Path:
    """a + b -> Relu: no initializers, no Constant nodes."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["y"], name="relu")],
        "weightless",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def unsupported_op_model(path: Path) -> Path:
    """Conv -> GridSample (not in the stand-in's op list) -> y."""
    w = numpy_helper.from_array(np.full((2, 2, 1, 1), 0.5, np.float32), "w")
    grid = numpy_helper.from_array(np.zeros((1, 4, 4, 2), np.float32), "grid")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("GridSample", ["c", "grid"], ["y"], name="warp/GridSample")],
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])], [w, grid])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), path)
    return path


def int64_input_model(path: Path) -> Path:
    """ids (int64) -> Gather(table) -> y."""
    table = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="embed", axis=0)],
        "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4])], [table])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def uint8_input_model(path: Path) -> Path:
    """img (uint8 pixels) -> Cast to float -> Mul(1/255) -> y."""
    scale = numpy_helper.from_array(np.array(1 / 255, np.float32), "scale")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["img"], ["f"], name="to_float", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["f", "scale"], ["y"], name="norm")],
        "pixels", [helper.make_tensor_value_info("img", TensorProto.UINT8, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])], [scale])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path
