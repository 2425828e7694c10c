"""qnn-context-binary-generator failures told apart: one class, one line each, with
what to do (texts from the formats page, sections 4 and 8)."""

from __future__ import annotations

import pytest

from qnn_ci.sdk.context_failures import classify_generator, killed_by_abort
from qnn_ci.tables import get_soc
from qnn_ci.transport.base import CommandResult

QCS6490, SM8550 = get_soc("QCS6490"), get_soc("SM8550")


def _res(code: int, out: str = "", err: str = "", timed_out: bool = False) -> CommandResult:
    return CommandResult(["qnn-context-binary-generator"], code,
                         "qnn-context-binary-generator pid:42\n" + out, err, timed_out)


def _classify(res: CommandResult, **kw: object):
    args = {"board": "rb3", "generator": "/opt/qnn/bin/qnn-context-binary-generator",
            "soc": QCS6490, "fp16_tensors": (), "vtcm_mb": None, "timeout": 600.0} | kw
    return classify_generator(res, **args)  # type: ignore[arg-type]


def test_success_is_no_finding() -> None:
    assert _classify(_res(0, "   1.0ms [  INFO ] Context binary saved at: x.bin")) is None


@pytest.mark.parametrize("code,err", [(134, ""), (-1, "")])
def test_sigabrt_on_v68_with_fp16_names_the_tensors(code: int, err: str) -> None:
    f = _classify(_res(code, err=err), fp16_tensors=["a", "b", "c", "d", "e", "f", "g"])
    assert f is not None and f.check == "context.fp16_abort"
    assert f.message.startswith("FP16 op on v68:")
    assert "QCS6490 (HTP v68) has no FP16" in f.message
    assert "7 FP16 tensor(s): a, b, c, d, e and 2 more" in f.message
    assert "\n" not in f.message


def test_a_dropped_connection_is_not_an_abort() -> None:
    res = _res(-1, err="\n[qnn-ci] connection to board rb3 lost during the command\n")
    assert not killed_by_abort(res)
    f = _classify(res, fp16_tensors=["a"])
    assert f is not None and f.check == "context.generator_failed"


def test_abort_without_fp16_tensors_or_on_an_fp16_soc_is_a_plain_abort() -> None:
    assert _classify(_res(134)).check == "context.abort"
    f = _classify(_res(134), soc=SM8550, fp16_tensors=["a"])
    assert f.check == "context.abort" and "FP16 op" not in f.message


def test_vtcm_overflow_names_both_sizes_and_the_setting() -> None:
    err = ("  10.0ms [ ERROR ] Requires 0x2400000 bytes of TCM, which is greater than the "
           "TCM size of 0x800000!\n  11.0ms [ ERROR ] Failed to finalize graph (id: 1) with "
           "err 1002\n  11.1ms [ ERROR ] Graph Finalize failure\n")
    f = _classify(_res(1, err=err), soc=SM8550, vtcm_mb=8)
    assert f.check == "context.vtcm_overflow"
    assert "36 MiB (0x2400000 bytes)" in f.message and "8 MiB (0x800000 bytes)" in f.message
    assert "htp_config.vtcm_mb: 8" in f.message and "the SM8550 has 8 MiB" in f.message


def test_finalize_failure_without_tcm_line() -> None:
    f = _classify(_res(1, err="[ ERROR ] Failed to finalize graph (id: 1) with err 1002\n"))
    assert f.check == "context.finalize" and "(err 1002)" in f.message


@pytest.mark.parametrize("line,op", [
    ("[ ERROR ] validateNativeOps /backbone/Conv_3: op validator (quantized and FP16) "
     "failed 3110", "/backbone/Conv_3"),
    ("[ ERROR ] QnnBackend_validateOpConfig failed 3110", None),
])
def test_op_refused_names_the_op_where_the_tool_does(line: str, op: str | None) -> None:
    f = _classify(_res(1, err=line + "\n"))
    assert f.check == "context.op_refused" and "3110" in f.message
    assert (f"op {op}" in f.message) if op else ("an op" in f.message)


def test_serialize_failure_and_the_rest() -> None:
    f = _classify(_res(1, err="[ ERROR ] Failed to get serialized binary: err 0x7532\n"),
                  soc=get_soc("SM8450"))
    assert f.check == "context.serialize"
    f = _classify(_res(3, err="[ ERROR ] something new\n"))
    assert f.check == "context.generator_failed" and "something new" in f.message


def test_timeout_and_missing_tool() -> None:
    assert _classify(_res(-1, timed_out=True)).check == "context.timeout"
    missing = CommandResult(["x"], 127, "", "sh: qnn-context-binary-generator: not found")
    f = _classify(missing)
    assert f.check == "context.generator_missing" and "/opt/qnn/bin" in f.message
