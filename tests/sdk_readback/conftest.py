"""Test material for the read-back parsers: the real converter outputs in
/work/shared/reference/real-outputs (skipped when absent), samples written from
the format page (qairt-formats.md sections 1 and 5), and a real QNN JSON graph
dumped by onnxruntime-qnn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import ExportSpec, QuantizationSpec, TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from tests.conftest import REAL_OUTPUTS


def real_file(name: str) -> Path:
    path = REAL_OUTPUTS / name
    if not path.is_file():
        pytest.skip(f"real converter output {path} is not available")
    return path


@pytest.fixture
def head_227() -> Path:
    return real_file("passthrough-qairt2.27-head.cpp")


@pytest.fixture
def cpp_231() -> Path:
    return real_file("naf_block_sota-qairt2.31.cpp")


@pytest.fixture
def bin_231() -> Path:
    return real_file("naf_block_sota-qairt2.31.bin")


# -- samples written from the format page ------------------------------------

# About 2.18: single spaces, alias pairs side by side, a pair that disagrees,
# nested list values and list values containing spaces.
RECORD_218 = (
    "qnn-onnx-converter act_bitwidth=8 act_bw=8 act_quantizer=tf "
    "act_quantizer_calibration=min-max algorithms=[] bias_bitwidth=32 bias_bw=32 "
    "copyright_file=None debug=-1 dry_run=None float_bias_bitwidth=0 float_bias_bw=32 "
    "float_bitwidth=32 float_bw=32 float_fallback=False "
    "input_dim=[['input_data', '1,3,224,224']] "
    "input_encoding=[['input_data', 'other', 'bgr']] "
    "input_list=/data/calib run/input_list.txt out_names=['a', 'b'] "
    "percentile_calibration_value=99.99 quantization_overrides= "
    "use_per_channel_quantization=True weight_bw=8 weights_bitwidth=8"
)

# 2.27+ layout: '; ' separated, sorted keys; a float-fallback conversion to FP16.
RECORD_FP16 = (
    "qnn-onnx-converter; act_bitwidth=16; bias_bitwidth=32; float_bitwidth=16; float_bw=16; "
    "float_fallback=True; input_dim=[['x', '1,4']]; input_encoding=[]; "
    "input_list=/calib/input_list.txt; out_names=['y']; quantization_overrides=; "
    "weights_bitwidth=8"
)

HEADER = ("/* COPYRIGHT HEADER GOES HERE: No CopyRight Header String Passed During Model "
          "Conversion */\n")


def source_text(record: str, *, version: str | None = "qaisw-v2.18.0.231212153618_71297",
                tensors: str = "") -> str:
    lines = [HEADER, "/* Command Line used:", record, "*/", "",
             '#include "QnnOpDef.h"', '#include "QnnModel.hpp"', "",
             "using namespace qnn_wrapper_api;"]
    if version:
        lines.append('const __attribute__((visibility("default"))) char* QNN_SDK_VERSION = '
                     f'"{version}";')
    lines += ['extern "C" {', tensors, COMPOSE, "}"]
    return "\n".join(lines) + "\n"


COMPOSE = """QNN_API
ModelError_t QnnModel_composeGraphs(Qnn_BackendHandle_t backendHandle) {
  ModelError_t err = MODEL_NO_ERROR;
  return err;
} // PREPARE_GRAPHS
"""


def tensor_fn(name: str, ttype: str, dtype: str, dims: list[int]) -> str:
    """One `addTensor_<name>` function in the 2.27+ layout described on the page."""
    dims_txt = ", ".join(str(d) for d in dims)
    return f"""static ModelError_t addTensor_{name}(QnnModel& model){{
  ModelError_t err = MODEL_NO_ERROR;
  uint32_t dimensions_{name}[] = {{{dims_txt}}};
  VALIDATE(model.addTensor("{name}", // Tensor Name
                           (Qnn_Tensor_t) {{
                               .version= QNN_TENSOR_VERSION_2,
                               {{.v2= {{
                                 .id=0,
                                 .name= "{name}",
                                 .type= QNN_TENSOR_TYPE_{ttype},
                                 .dataFormat= QNN_TENSOR_DATA_FORMAT_DENSE,
                                 .dataType= {dtype},
                                 .quantizeParams= {{ QNN_DEFINITION_UNDEFINED,
                                                    QNN_QUANTIZATION_ENCODING_UNDEFINED,
                                                    {{.scaleOffsetEncoding= {{.scale= 0.0f,
                                                                            .offset= 0}}}}}},
                                 .rank= {len(dims)},
                                 .dimensions=dimensions_{name},
                                 .memType= QNN_TENSORMEMTYPE_RAW,
                                 {{.clientBuf= {{ .data=nullptr,
                                                .dataSize=0}}}},
                                 .isProduced= 0}}}}}}
  ), err);
  return err;
}}
"""


def node_call(name: str, op: str, inputs: list[str]) -> str:
    ins = ",\n    ".join(f'"{i}"' for i in inputs)
    return f"""static ModelError_t addNode_{name}(QnnModel& model){{
  ModelError_t err = MODEL_NO_ERROR;
  const char*  inputs_{name}[] = {{
    {ins}
  }};
  VALIDATE(model.addNode(QNN_OPCONFIG_VERSION_1, // Op_Config_t Version
                         "{name}", // Node Name
                         "qti.aisw", // Package Name
                         "{op}", // Qnn Node Type
                         nullptr, // Node Params
                         0, // Num Node Params
                         inputs_{name}, // Input Tensor Names
                         {len(inputs)}, // Num Input Tensor Names
                         nullptr, // Output Tensors
                         0// Num Output Tensors
  ), err);
  return err;
}}
"""


FP16_TENSORS = (
    tensor_fn("x", "APP_WRITE", "QNN_DATATYPE_FLOAT_32", [1, 4])
    + tensor_fn("x_fp16", "NATIVE", "QNN_DATATYPE_FLOAT_16", [1, 4])
    + tensor_fn("w", "STATIC", "QNN_DATATYPE_FLOAT_16", [1, 4])
    + node_call("add0", "ElementWiseAdd", ["x_fp16", "w"])
    + tensor_fn("y", "APP_READ", "QNN_DATATYPE_UFIXED_POINT_16", [1, 4])
)


def net_json_dict(record: str, tensors: dict[str, dict], nodes: dict | None = None) -> dict:
    """A `_net.json` with the top-level keys listed on the page."""
    return {"model.cpp": "/out/model.cpp", "model.bin": "/out/model.bin",
            "converter_command": record, "copyright_str": "", "op_types": ["ElementWiseAdd"],
            "Total parameters": "4 (0 MB assuming single precision float)",
            "Total MACs per inference": "4 (100%)",
            "graph": {"tensors": tensors, "nodes": nodes or {}}}


def net_tensor(tid: int, ttype: int, data_type: int, dims: list[int], *, old: bool = False
               ) -> dict:
    t = {"id": tid, "type": ttype, "dataFormat": 0, "data_type": data_type,
         "quant_params": {"definition": 2147483647, "encoding": 2147483647,
                          "scale_offset": {"bitwidth": 32, "minimum": 0.0, "maximum": 0.0,
                                           "scale": 0.0, "offset": 0, "is_symmetric": False,
                                           "is_fixed_point": False}}}
    if old:
        t["current_dims"] = dims
        t["max_dims"] = dims
    else:
        t["dims"] = dims
    return t


@pytest.fixture
def fp16_net_json(tmp_path: Path) -> Path:
    path = tmp_path / "model_net.json"
    tensors = {"x": net_tensor(0, 0, 562, [1, 4]), "x_fp16": net_tensor(1, 3, 534, [1, 4]),
               "w": net_tensor(2, 4, 534, [1, 4], old=True),
               "y": net_tensor(3, 1, 1046, [1, 4])}
    nodes = {"add0": {"package": "qti.aisw", "type": "ElementWiseAdd",
                      "tensor_params": {}, "scalar_params": {},
                      "input_names": ["x_fp16", "w"], "output_names": ["y"],
                      "macs_per_inference": 4}}
    path.write_text(json.dumps(net_json_dict(RECORD_FP16, tensors, nodes)), "utf-8")
    return path


# -- a real QNN JSON graph from onnxruntime-qnn -------------------------------

def _fp16_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.ones((1, 4), np.float16), "w")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xh"], name="cast_in", to=TensorProto.FLOAT16),
         helper.make_node("Add", ["xh", "w"], ["t"], name="add0"),
         helper.make_node("Cast", ["t"], ["y"], name="cast_out", to=TensorProto.FLOAT)],
        "fp16", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def ort_qnn_fp16_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The QNN JSON graph onnxruntime-qnn dumps (dump_json_qnn_graph) for a graph
    with a float16 Cast/Add, prepared for SM8550 (soc 43, FP16 capable)."""
    oq = pytest.importorskip("onnxruntime_qnn")
    import onnxruntime as ort

    root = tmp_path_factory.mktemp("ortqnn")
    model = _fp16_model(root / "fp16.onnx")
    dump = root / "dump"
    dump.mkdir()
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    if not devices:        # not yet registered in this process (the sim tests may have)
        ort.register_execution_provider_library("QNNExecutionProvider", oq.get_library_path())
        devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    if not devices:
        pytest.skip("onnxruntime-qnn offers no QNN device")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(devices, {
        "backend_path": oq.get_qnn_htp_path(), "soc_model": "43",
        "dump_json_qnn_graph": "1", "json_qnn_graph_dir": str(dump)})
    ort.InferenceSession(str(model), sess_options=so)
    graphs = [p for p in dump.glob("*.json") if not p.name.endswith("_tensor_log.json")]
    assert len(graphs) == 1, sorted(p.name for p in dump.iterdir())
    return graphs[0]


# -- stage contexts -----------------------------------------------------------

def make_export(tmp_path: Path, model: Path, *, soc: str | None = "QCS6490",
                quantization: QuantizationSpec | None = None, **kw) -> ExportSpec:
    manifest = tmp_path / "qnn-ci.yaml"
    manifest.write_text("exports: {}\n", "utf-8")
    return ExportSpec(name="m", model=model, manifest=manifest, line=2,
                      quantization=quantization or QuantizationSpec(),
                      target=TargetSpec(soc=soc), **kw)


def make_ctx(tmp_path: Path, export: ExportSpec, stage: str,
             upstream: dict[str, StageResult]) -> StageContext:
    env = Environment(workdir=tmp_path / "work")
    workdir = env.export_dir(export.name) / stage
    workdir.mkdir(parents=True, exist_ok=True)
    return StageContext(export=export, env=env, workdir=workdir, upstream=upstream)


def passed(stage: str, artefacts: dict[str, Path], **data) -> StageResult:
    return StageResult(stage, Status.PASSED, "ok",
                       artefacts={k: str(v) for k, v in artefacts.items()}, data=data)
