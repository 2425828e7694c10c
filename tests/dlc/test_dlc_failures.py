"""Each way the DLC route's host stages can fail says so in one line of its own, on the
stand-in SDK's DLC tools: an op without a translation, a flag the SDK's era does not
know (refused before the tool runs when its --help lists the era's flags; named from
the tool's own refusal when the help cannot be read), Float_16 on v68 (gated by
dlc_fp16_gate; forced, the host generator's SIGABRT classified), VTCM overflow with
both sizes, graph finalize err 1002, an op the HTP refuses (3110). And an edit of the
DLC-only ``dlc:`` setting re-runs the DLC stages from the converter on, nothing else."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.qairt_standin import make_sdk, set_sdk_faults
from qnn_ci.engine.pipeline import Pipeline
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.spec import (
    CalibrationSpec,
    DlcSpec,
    ExportSpec,
    HtpConfigSpec,
    InputSpec,
    QuantizationSpec,
    TargetSpec,
)
from qnn_ci.engine.stage import Environment
from qnn_ci.sdk.locate import DLC_QUANTIZER, HOST_TOOLS_DIR
from qnn_ci.stages.registry import load_stages
from tests.board_run.conftest import INPUT_SHAPE, build_cnn, write_samples
from tests.board_run.test_context_stages import _fp16_model

STAGES = ("static_shapes", "calibration", "dlc_convert", "dlc_quantize", "dlc_contract",
          "dlc_fp16_gate", "dlc_context_binary")


def _setup(tmp_path: Path, version: str = "2.31.0", **changes: object
           ) -> tuple[ExportSpec, Environment, Path]:
    sdk = make_sdk(tmp_path / "sdk", version, dlc_tools=True)
    export = ExportSpec(
        name="cnn", model=build_cnn(tmp_path / "cnn.onnx"), manifest=tmp_path / "qnn-ci.yaml",
        line=1, inputs={"x": InputSpec("x", INPUT_SHAPE, "float32")},
        calibration=CalibrationSpec(input_list=write_samples(tmp_path / "cal", 4, seed=5),
                                    samples=4, held_out=0),
        target=TargetSpec(soc="QCS6490"), route="dlc")
    env = Environment(workdir=tmp_path / "work",
                      environ={"PATH": "/usr/bin:/bin", "QNN_SDK_ROOT": str(sdk)})
    return replace(export, **changes), env, sdk  # type: ignore[arg-type]


def _run(export: ExportSpec, env: Environment, stages: tuple[str, ...] = STAGES
         ) -> dict[str, StageResult]:
    return {r.stage: r for r in
            Pipeline([export], env, stages=load_stages(stages)).run_export(export.name)}


def _one_line(result: StageResult, check: str, *words: str) -> str:
    assert result.status == Status.FAILED, result.summary
    text = result.summary
    assert "\n" not in text and result.findings[0].check == check, result.findings
    for w in words:
        assert w in text, text
    return text


def test_an_op_without_a_translation(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((1,), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
         helper.make_node("Celu", ["a"], ["y"], name="celu_1")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT_SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, INPUT_SHAPE)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "bad.onnx"))
    export, env, _ = _setup(tmp_path)
    res = _run(replace(export, model=tmp_path / "bad.onnx"), env)
    _one_line(res["dlc_convert"], "dlc_convert.unsupported_op", "node 'celu_1'",
              "op Celu is not supported by qairt-converter", "replace the op")
    assert res["dlc_context_binary"].summary == "blocked by cnn::dlc_convert"


def test_a_flag_the_era_lacks_is_refused_before_or_named_after_the_tool_runs(
        tmp_path: Path) -> None:
    # a readable --help: a setting its converter has no flag for is one UserError line
    export, env, sdk = _setup(tmp_path, "2.22.6")
    bgr = replace(export, inputs={"x": InputSpec("x", INPUT_SHAPE, "float32", encoding="bgr")})
    res = _run(bgr, env, STAGES[:3])["dlc_convert"]
    assert res.status == Status.ERROR and "\n" not in res.summary
    assert "inputs.x.encoding" in res.summary and "lists none of --input_encoding" in res.summary
    # the 2.22 quantizer's --act_bw spellings are read from its --help and used
    ok = _run(export, env, STAGES[:5])
    assert ok["dlc_quantize"].status == Status.PASSED, ok["dlc_quantize"].failure_text()
    assert "--act_bw 16" in ok["dlc_quantize"].properties["quantizer_argv"]
    assert ok["dlc_contract"].status == Status.PASSED, ok["dlc_contract"].failure_text()
    # its --help cannot be read: the newest spelling is passed, and refused by the tool
    tool = sdk / HOST_TOOLS_DIR / DLC_QUANTIZER
    tool.rename(tool.with_name("real-quantizer"))
    tool.write_text('#!/bin/bash\nfor a in "$@"; do [ "$a" = --help ] && exit 1; done\n'
                    f'exec "{tool.with_name("real-quantizer")}" "$@"\n')
    os.chmod(tool, 0o755)
    res2 = _run(export, Environment(workdir=tmp_path / "work2", environ=env.environ),
                STAGES[:4])
    text = _one_line(res2["dlc_quantize"], "dlc_quantize.help",
                     "qairt-quantizer of SDK 2.22.6 does not know --act_bitwidth",
                     "quantization.act_bitwidth", "--act_bw")
    assert res2["dlc_quantize"].findings[1].check == "dlc_quantize.unknown_flag", text


def test_float16_on_v68_is_gated_and_when_forced_the_abort_is_classified(
        tmp_path: Path) -> None:
    export, env, _ = _setup(tmp_path, model=_fp16_model(tmp_path / "fp16.onnx"),
                            quantization=QuantizationSpec(float_fallback=True,
                                                          float_bitwidth=16))
    gated = _run(export, env)
    assert gated["dlc_quantize"].status == Status.PASSED
    fp16 = gated["dlc_fp16_gate"]
    _one_line(fp16, "fp16.tensor", "FP16 tensor(s)", "QCS6490 (HTP v68) has no FP16")
    assert any("tensor probs (Float_16, written by op" in f.message for f in fp16.findings)
    assert gated["dlc_context_binary"].summary == "blocked by cnn::dlc_fp16_gate"
    forced = _run(export, env, tuple(s for s in STAGES if s != "dlc_fp16_gate"))
    _one_line(forced["dlc_context_binary"], "context.fp16_abort",
              "FP16 op on v68: qnn-context-binary-generator on the host aborted (SIGABRT, exit "
              "134)", "the DLC has 4 FP16 tensor(s)", "probs")


@pytest.mark.parametrize("faults,check,words", [
    ({"context_vtcm_need_mb": 36}, "context.vtcm_overflow",
     ("needs 36 MiB (0x2400000 bytes) of VTCM", "more than the 2 MiB (0x200000 bytes)",
      "the QCS6490 has 2 MiB")),
    ({"context_finalize": True}, "context.finalize", ("graph finalize failed (err 1002)",
                                                      "htp_config.O: 1")),
    ({"context_op_refused": {"op": "Conv_2"}}, "context.op_refused",
     ("the HTP refused op Conv_2 (error 3110",)),
])
def test_host_generator_failures_have_their_own_line(
        tmp_path: Path, faults: dict[str, object], check: str, words: tuple[str, ...]) -> None:
    export, env, sdk = _setup(tmp_path)
    set_sdk_faults(sdk, faults)
    res = _run(export, env)
    assert res["dlc_fp16_gate"].status == Status.PASSED
    _one_line(res["dlc_context_binary"], check, "qnn-context-binary-generator on the host",
              *words)


def test_no_target_soc_and_a_dlc_edit(tmp_path: Path) -> None:
    export, env, _ = _setup(tmp_path)
    first = _run(export, env)
    assert {s: r.status for s, r in first.items()} == dict.fromkeys(STAGES, Status.PASSED), \
        {s: r.failure_text() for s, r in first.items()}
    # an edit of the DLC-only setting: the converter and what follows run again
    export = replace(export, dlc=DlcSpec(preserve_io=True))
    edited = _run(export, env)
    assert [s for s, r in edited.items() if not r.cached] == list(STAGES[2:]), edited
    assert "--preserve_io" in edited["dlc_convert"].properties["converter_argv"]
    # graph settings: the graph is named as the binary names it (qairt-dlc-info does not)
    tuned = _run(replace(export, htp_config=HtpConfigSpec(vtcm_mb=2, O=3)), env)
    assert [s for s, r in tuned.items() if not r.cached] == ["dlc_context_binary"]
    built = tuned["dlc_context_binary"]
    assert built.status == Status.PASSED and built.properties["htp_config"] == "given"
    inner = (Path(built.artefacts["htp_config"]) / "htp_config.json").read_text()
    assert '"graph_names": [\n        "cnn"' in inner and '"vtcm_mb": 2' in inner
    assert built.findings[0].check == "context.graph_names"
    # no SoC to build for: one line naming target.soc
    res = _run(replace(export, target=TargetSpec()), env)["dlc_context_binary"]
    assert res.status == Status.ERROR and "\n" not in res.summary
    assert "target.soc is not set" in res.summary and "target.soc" in str(res.findings[0])


def test_an_sdk_without_the_dlc_tools_is_one_line_naming_the_route(tmp_path: Path) -> None:
    export, _, _ = _setup(tmp_path)
    old = make_sdk(tmp_path / "old", "2.18.0")
    env = Environment(workdir=tmp_path / "w", environ={"PATH": "/usr/bin:/bin",
                                                       "QNN_SDK_ROOT": str(old)})
    res = _run(export, env, STAGES[:3])["dlc_convert"]
    assert res.status == Status.ERROR and "\n" not in res.summary
    assert "route: QAIRT SDK 2.18.0" in res.summary and "has no qairt-converter" in res.summary
