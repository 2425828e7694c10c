"""Integer and bool graph inputs are kept unquantized (``--input_encoding NAME
other``): one predicate for the converter command and the contract check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import QuantizationSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.sdk.convert import convert
from qnn_ci.sdk.converter_cmd import build_convert_argv, probe_converter
from qnn_ci.stages.contract import ContractStage, integer_inputs
from qnn_ci.tables import QNN_DATATYPES, is_integer_input_dtype
from tests.sdk_tools.conftest import uint8_input_model, write_input_list


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "bool", "tensor(uint8)", "UINT8",
                                   " tensor(bool) "])
def test_integer_and_bool_dtypes(dtype: str) -> None:
    assert is_integer_input_dtype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "bfloat16", "tensor(float)",
                                   "string", "", "interval", "uint", "complex64"])
def test_other_dtypes(dtype: str) -> None:
    assert not is_integer_input_dtype(dtype)


def _convert(sdk, export, model: Path, lst: Path, out: Path, *,
             drop: tuple[str, ...] = (), extra: tuple[str, ...] = ()
             ) -> tuple[list[str], object]:
    graph = [{"name": "img", "dtype": "uint8", "shape": [1, 3, 4, 4]}]
    flags = probe_converter(sdk, out.parent / "cache").flags
    argv = build_convert_argv(export, model, lst, out, flags, graph_inputs=graph)
    for flag in drop:
        at = argv.index(flag)
        del argv[at:at + 3]
    argv += list(extra)
    outcome = convert(argv, sdk=sdk, workdir=out.parent, output_path=out, model=model,
                      timeout=120)
    assert outcome.ok, outcome.failures
    return argv, outcome


def _contract(export, tmp_path: Path, outcome, lst: Path) -> StageResult:
    env = Environment(workdir=tmp_path / "work")
    workdir = env.workdir / "contract"
    workdir.mkdir(parents=True)
    up = {"convert": StageResult("convert", Status.PASSED, artefacts={
              "cpp": str(outcome.cpp), "net_json": str(outcome.net_json)}),
          "calibration": StageResult("calibration", Status.PASSED,
                                     artefacts={"input_list": str(lst)})}
    return ContractStage().run(StageContext(export=export, env=env, workdir=workdir,
                                            upstream=up))


def _input_type(outcome) -> int:
    return json.loads(outcome.net_json.read_text())["graph"]["tensors"]["img"]["data_type"]


def test_uint8_input_kept_unquantized_and_contract_passes(sdk_factory, export_factory,
                                                          tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = uint8_input_model(tmp_path / "px.onnx")
    export = export_factory(model=model)
    assert integer_inputs(export) == ["img"]
    lst = write_input_list(tmp_path / "cal", {"img": ((1, 3, 4, 4), "uint8")})
    argv, outcome = _convert(sdk, export, model, lst, tmp_path / "o" / "px.cpp")
    at = argv.index("--input_encoding")
    assert argv[at:at + 3] == ["--input_encoding", "img", "other"]
    at = argv.index("--input_dtype")                  # both, where --help lists them
    assert argv[at:at + 3] == ["--input_dtype", "img", "uint8"]
    assert _input_type(outcome) == QNN_DATATYPES["QNN_DATATYPE_UINT_8"]
    res = _contract(export, tmp_path, outcome, lst)
    assert res.status == Status.PASSED, res.failure_text()


def test_uint8_input_without_the_flag_is_quantized_and_contract_fails(
        sdk_factory, export_factory, tmp_path: Path) -> None:
    sdk = sdk_factory()
    model = uint8_input_model(tmp_path / "px.onnx")
    export = export_factory(model=model)
    lst = write_input_list(tmp_path / "cal", {"img": ((1, 3, 4, 4), "uint8")})
    argv, outcome = _convert(sdk, export, model, lst, tmp_path / "o" / "px.cpp",
                             drop=("--input_encoding", "--input_dtype"))
    assert "--input_encoding" not in argv and "--input_dtype" not in argv
    # The stand-in quantizes it like an activation (W8A16: 16-bit fixed point).
    assert _input_type(outcome) == QNN_DATATYPES["QNN_DATATYPE_UFIXED_POINT_16"]
    res = _contract(export, tmp_path, outcome, lst)
    assert res.status == Status.FAILED
    unkept = ("is QNN_DATATYPE_UFIXED_POINT_16 in {}, not an integer type: the converter "
              "quantized it (the record shows neither flag; pass --input_dtype img uint8 and "
              "--input_encoding img other)")
    assert [f.message for f in res.errors()] == [
        "input_encoding: asked ['img', 'other'], converter recorded []",
        "integer input img (uint8) " + unkept.format("px.cpp"),
        "integer input img (uint8) " + unkept.format("px_net.json")]
    assert {f.subject for f in res.errors()[1:]} == {"img"}


@pytest.mark.parametrize("drop", ["--input_encoding", "--input_dtype"])
def test_either_flag_alone_keeps_the_input_and_the_outcome_check_passes(
        sdk_factory, export_factory, tmp_path: Path, drop: str) -> None:
    sdk = sdk_factory()
    model = uint8_input_model(tmp_path / "px.onnx")
    export = export_factory(model=model)
    lst = write_input_list(tmp_path / "cal", {"img": ((1, 3, 4, 4), "uint8")})
    _, outcome = _convert(sdk, export, model, lst, tmp_path / "o" / "px.cpp", drop=(drop,))
    assert _input_type(outcome) == QNN_DATATYPES["QNN_DATATYPE_UINT_8"]
    res = _contract(export, tmp_path, outcome, lst)
    assert [f.check for f in res.errors()] == (
        ["contract.input_encoding"] if drop == "--input_encoding" else [])
    assert not [f for f in res.findings if f.check == "contract.integer_input"]


def test_overrides_naming_the_input_are_named_as_the_cause(
        sdk_factory, export_factory, tmp_path: Path) -> None:
    """A real 2.18 run: AIMET overrides that name an input quantize it despite
    ``--input_encoding NAME other`` (the stand-in does the same)."""
    sdk = sdk_factory()
    model = uint8_input_model(tmp_path / "px.onnx")
    enc = tmp_path / "px.encodings"
    enc.write_text(json.dumps({"version": "0.6.1", "param_encodings": {},
                               "activation_encodings": {"img": [{
                                   "bitwidth": 16, "dtype": "int", "is_symmetric": "False",
                                   "min": 0.0, "max": 255.0, "scale": 0.0039, "offset": 0}]}}))
    export = export_factory(model=model, quantization=QuantizationSpec(overrides=enc))
    lst = write_input_list(tmp_path / "cal", {"img": ((1, 3, 4, 4), "uint8")})
    _, outcome = _convert(sdk, export, model, lst, tmp_path / "o" / "px.cpp",
                          drop=("--input_dtype",))
    assert _input_type(outcome) != QNN_DATATYPES["QNN_DATATYPE_UINT_8"]
    res = _contract(export, tmp_path, outcome, lst)
    msgs = [f.message for f in res.errors() if f.check == "contract.integer_input"]
    assert len(msgs) == 2
    assert all("despite --input_encoding img other" in m and
               "AIMET overrides name it" in m for m in msgs), msgs
