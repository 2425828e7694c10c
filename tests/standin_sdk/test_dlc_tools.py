"""The stand-in DLC route (formats page, section 8): qairt-converter, qairt-quantizer,
qairt-dlc-info and qnn-context-binary-generator --dlc_path on the host, with the
context binary run by the stand-in board's qnn-net-run --retrieve_context.

Expectations are written from the formats page (data type names ``uFxp_16``,
``sFxp_32``, ``Float_16``; metadata lines; failure texts), not from the stand-in's
code."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.qairt_standin import HOST_BIN, make_sdk, set_sdk_faults
from fixtures.qairt_standin.context_blob import read_context_payload
from fixtures.qairt_standin.net_run import make_board
from tests.standin_sdk.conftest import (
    Run,
    htp_config,
    run_bash,
    run_tool,
    tiny_conv,
    write_samples,
)

X86_LIB = "lib/x86_64-linux-clang"
DLC_LIB = "libQnnModelDlc.so"


# ---------------------------------------------------------------- helpers

def _tool(sdk: Path, tool: str, *args: str | Path, cwd: Path | None = None) -> Run:
    return run_tool(sdk, tool, *args, cwd=cwd)


def _info(sdk: Path, dlc: Path, *extra: str | Path) -> str:
    run = _tool(sdk, "qairt-dlc-info", "-i", dlc, *extra)
    assert run.code == 0, run.text
    return run.stdout


def _op_table(text: str) -> str:
    """The per-op table: from its header row to the rule after its last row."""
    out: list[str] = []
    for line in text[text.index("| Id "):].splitlines()[1:]:
        if line.startswith("|"):
            out.append(line)
        elif out:
            break
    return "\n".join(out)


def _meta(text: str, key: str) -> str:
    match = re.search(rf"^{re.escape(key)}: ?(.*)$", text, re.M)
    assert match, f"no {key!r} line in:\n{text}"
    return match.group(1)


def _context(sdk: Path, dlc: str | Path, out: Path, config: Path | None = None,
             model: Path | None = None, backend: str = "libQnnHtp.so") -> str:
    """A bash line running the host generator on the DLC route; prints rc=<status>."""
    lib = model or sdk / X86_LIB / DLC_LIB
    extra = f" --config_file {config}" if config else ""
    return (f"{sdk}/{HOST_BIN}/qnn-context-binary-generator --model {lib} --dlc_path {dlc} "
            f"--backend {backend} --binary_file ctx --output_dir {out}{extra}; echo rc=$?")


def _big_model(path: Path) -> Path:
    """x[1,3,256,256] -> Conv(8) -> Relu: activations of 2 MiB (float32, 256x256x8)."""
    w = numpy_helper.from_array(np.full((8, 3, 1, 1), 0.1, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 256, 256])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _hardmax_model(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu_0"),
         helper.make_node("Hardmax", ["r"], ["y"], name="hardmax/0")], "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dlc")


@pytest.fixture(scope="module")
def sdk(work: Path) -> Path:
    return make_sdk(work / "qairt231", "2.31.0")


@pytest.fixture(scope="module")
def model(work: Path) -> Path:
    """tiny_conv: x[N,3,8,8] -> Conv(bias) -> Relu -> GAP -> Flatten -> Softmax."""
    return tiny_conv(work / "tiny.onnx")


@pytest.fixture(scope="module")
def calib(work: Path) -> Path:
    return write_samples(work / "calib", {"x": ((1, 3, 8, 8), "float32")}, 4, seed=3)


@pytest.fixture(scope="module")
def float_dlc(sdk: Path, model: Path, work: Path) -> Path:
    out = work / "tiny.dlc"
    run = _tool(sdk, "qairt-converter", "--input_network", model, "-o", out,
                "--input_dim", "x", "1,3,8,8")
    assert run.code == 0, run.text
    return out


@pytest.fixture(scope="module")
def quant_dlc(sdk: Path, float_dlc: Path, calib: Path, work: Path) -> Path:
    out = work / "tiny_q.dlc"
    run = _tool(sdk, "qairt-quantizer", "--input_dlc", float_dlc, "--output_dlc", out,
                "--input_list", calib, "--act_bitwidth", "16", "--weights_bitwidth", "8",
                "--bias_bitwidth", "32")
    assert run.code == 0, run.text
    return out


# ---------------------------------------------------------------- layout

def test_sdk_has_the_dlc_tools_by_era(sdk: Path, work: Path) -> None:
    for tool in ("qairt-converter", "qairt-quantizer", "qairt-dlc-info"):
        assert (sdk / HOST_BIN / tool).is_file()
    lib = sdk / X86_LIB / DLC_LIB
    assert lib.read_bytes()[:4] == b"\x7fELF"
    old = make_sdk(work / "qairt218", "2.18.0")
    assert not (old / HOST_BIN / "qairt-converter").exists()
    assert not (old / X86_LIB / DLC_LIB).exists()
    forced = make_sdk(work / "qairt218f", "2.18.0", dlc_tools=True)
    assert (forced / HOST_BIN / "qairt-quantizer").is_file()
    assert (forced / X86_LIB / DLC_LIB).is_file()


def test_make_sdk_rejects_unknown_variants(work: Path) -> None:
    with pytest.raises(ValueError, match="unknown DLC variant"):
        make_sdk(work / "bad1", dlc_variants={"colour": "red"})
    with pytest.raises(ValueError, match="borders"):
        make_sdk(work / "bad2", dlc_variants={"borders": "double"})


# ---------------------------------------------------------------- qairt-converter

def test_converter_writes_a_float_dlc(sdk: Path, float_dlc: Path) -> None:
    assert zipfile.is_zipfile(float_dlc)          # a real DLC is a zip archive too
    text = _info(sdk, float_dlc)
    assert text.startswith(f"DLC info for: {float_dlc}\n")
    table = _op_table(text)
    types = set(re.findall(r"data type: (\w+);", table))
    assert types == {"Float_32"}
    command = _meta(text, "Converter command")
    assert command.startswith("qairt-converter ")
    assert f"input_network={float_dlc.parent / 'tiny.onnx'}" in command
    assert "input_dim=[['x', '1,3,8,8']]" in command
    assert _meta(text, "Quantizer command") == "N/A"
    assert _meta(text, "Total parameters").startswith("224 (")   # 8*3*3*3 + 8
    assert re.match(r"\d+k \(100%\)", _meta(text, "Total MACs per inference"))
    assert _meta(text, "DLC created with converter version") == "2.31.0.250130151446_114721"


def test_converter_float_bitwidth_16_makes_every_tensor_fp16(sdk: Path, model: Path,
                                                              work: Path) -> None:
    out = work / "half.dlc"
    run = _tool(sdk, "qairt-converter", "-i", model, "-o", out, "-d", "x", "1,3,8,8",
                "--float_bitwidth", "16")
    assert run.code == 0, run.text
    assert set(re.findall(r"data type: (\w+);", _op_table(_info(sdk, out)))) == {"Float_16"}


def test_converter_default_output_beside_the_input(sdk: Path, model: Path,
                                                   tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    src.write_bytes(model.read_bytes())
    run = _tool(sdk, "qairt-converter", "--input_network", src, "-d", "x", "1,3,8,8")
    assert run.code == 0, run.text
    assert (tmp_path / "m.dlc").is_file()
    assert "Saved converted DLC at: " in run.stderr


def test_converter_refuses_an_unsupported_op(sdk: Path, tmp_path: Path) -> None:
    run = _tool(sdk, "qairt-converter", "-i", _hardmax_model(tmp_path / "u.onnx"),
                "-o", tmp_path / "u.dlc")
    assert run.code == 255
    assert ("ERROR - Node hardmax/0: 'No translation registered for op type onnx_hardmax.'"
            in run.stderr)
    assert not (tmp_path / "u.dlc").exists()


def test_converter_dry_run(sdk: Path, tmp_path: Path) -> None:
    run = _tool(sdk, "qairt-converter", "-i", _hardmax_model(tmp_path / "u.onnx"), "--dry_run")
    assert run.code == 0
    assert "Proceeding with model evaluation..." in run.stderr
    assert "Hardmax unsupported in Converter" in run.stderr
    assert not list(tmp_path.glob("*.dlc"))


def test_converter_has_no_input_list(sdk: Path, model: Path, calib: Path,
                                     tmp_path: Path) -> None:
    run = _tool(sdk, "qairt-converter", "-i", model, "-o", tmp_path / "m.dlc",
                "--input_list", calib)
    assert run.code == 2
    assert "unrecognized arguments: --input_list" in run.stderr


def test_converter_errors(sdk: Path, model: Path, tmp_path: Path) -> None:
    run = _tool(sdk, "qairt-converter", "-i", model, "-o", tmp_path / "m.dlc",
                "-d", "nope", "1,3,8,8")
    assert run.code == 1 and "Encountered Error" in run.stderr and "nope" in run.stderr
    run = _tool(sdk, "qairt-converter", "-i", model, "-o", tmp_path / "m.dlc")
    assert run.code == 1 and "dynamic shape" in run.stderr      # N without -d
    run = _tool(sdk, "qairt-converter", "-i", tmp_path / "missing.onnx")
    assert run.code == 1 and "Encountered Error" in run.stderr


# ---------------------------------------------------------------- qairt-quantizer

def test_quantizer_types_and_command(sdk: Path, quant_dlc: Path, calib: Path) -> None:
    text = _info(sdk, quant_dlc)
    table = _op_table(text)
    assert re.search(r"\| x \(data type: uFxp_16; tensor dimension: \[1,8,8,3\]; "
                     r"tensor type: APP_WRITE\)", table)
    assert "conv1.weight (data type: uFxp_8;" in table
    assert "conv1.bias (data type: sFxp_32;" in table
    assert "output (data type: uFxp_16;" in table
    assert "Float_" not in table
    command = _meta(text, "Quantizer command")
    assert command.startswith("qairt-quantizer ")
    assert "act_bitwidth=16" in command and "bias_bitwidth=32" in command
    assert f"input_list={calib}" in command
    assert _meta(text, "Converter command").startswith("qairt-converter ")
    inputs = text[text.index("| Input Name"):]
    assert re.search(r"\| x\s+\| 1,8,8,3\s+\| uFxp_16\s+\| bitwidth 16, min -?\d", inputs)


@pytest.mark.parametrize(("float_bw", "expected"), [("16", "Float_16"), ("32", "Float_32")])
def test_float_fallback_leaves_softmax_float(sdk: Path, float_dlc: Path, calib: Path,
                                             tmp_path: Path, float_bw: str,
                                             expected: str) -> None:
    out = tmp_path / "fb.dlc"
    run = _tool(sdk, "qairt-quantizer", "--input_dlc", float_dlc, "--output_dlc", out,
                "--input_list", calib, "--act_bitwidth", "16", "--float_fallback",
                "--float_bitwidth", float_bw)
    assert run.code == 0, run.text
    table = _op_table(_info(sdk, out))
    softmax = next(line for line in table.splitlines() if "| Softmax" in line)
    assert f"output (data type: {expected};" in softmax
    assert "conv1.weight (data type: uFxp_8;" in table


def test_overrides_with_float_fallback_and_no_input_list(sdk: Path, model: Path,
                                                        tmp_path: Path) -> None:
    enc = tmp_path / "m.encodings"
    enc.write_text(json.dumps({"version": "1.0.0", "activation_encodings": [
        {"name": "x", "dtype": "INT", "enc_type": "PER_TENSOR", "bw": 16, "is_sym": False,
         "scale": [1e-4], "offset": [-30000]}], "param_encodings": []}))
    conv = tmp_path / "m.dlc"
    run = _tool(sdk, "qairt-converter", "-i", model, "-o", conv, "-d", "x", "1,3,8,8",
                "--quantization_overrides", enc)
    assert run.code == 0, run.text
    out = tmp_path / "m_q.dlc"
    run = _tool(sdk, "qairt-quantizer", "--input_dlc", conv, "--output_dlc", out,
                "--float_fallback", "--float_bitwidth", "16")
    assert run.code == 0, run.text
    table = _op_table(_info(sdk, out))
    assert "x (data type: uFxp_16;" in table
    assert "/relu/Relu_output_0 (data type: Float_16;" in table


@pytest.mark.parametrize("exists", [False, True])
def test_converter_float_fallback_variant(tmp_path: Path, model: Path, exists: bool) -> None:
    """Whether qairt-converter itself takes --float_fallback is NOT confirmed."""
    root = make_sdk(tmp_path / "sdk", "2.31.0", dlc_variants={
        "converter_float_fallback": "yes" if exists else "no"})
    enc = tmp_path / "m.encodings"
    enc.write_text(json.dumps({"version": "0.6.1", "activation_encodings": {"x": [
        {"bitwidth": 8, "dtype": "int", "is_symmetric": "False", "max": 3.0, "min": -2.0,
         "offset": -102, "scale": 0.0196}]}, "param_encodings": {}}))
    out = tmp_path / "m.dlc"
    run = _tool(root, "qairt-converter", "-i", model, "-o", out, "-d", "x", "1,3,8,8",
                "--quantization_overrides", enc, "--float_fallback", "--float_bitwidth", "16")
    if not exists:
        assert run.code == 2 and "unrecognized arguments: --float_fallback" in run.stderr
        return
    assert run.code == 0, run.text
    table = _op_table(_info(root, out))
    assert "x (data type: uFxp_8;" in table and "output (data type: Float_16;" in table


def test_per_channel_weights_are_signed(sdk: Path, float_dlc: Path, calib: Path,
                                        tmp_path: Path) -> None:
    out = tmp_path / "pc.dlc"
    run = _tool(sdk, "qairt-quantizer", "--input_dlc", float_dlc, "--output_dlc", out,
                "--input_list", calib, "--use_per_channel_quantization")
    assert run.code == 0, run.text
    assert "conv1.weight (data type: sFxp_8;" in _op_table(_info(sdk, out))


def test_quantizer_reads_the_input_list_for_real(sdk: Path, float_dlc: Path,
                                                 tmp_path: Path) -> None:
    base = ["--input_dlc", float_dlc, "--output_dlc", tmp_path / "q.dlc"]
    missing = tmp_path / "missing.txt"
    missing.write_text(f"x:={tmp_path / 'nope.raw'}\n")
    run = _tool(sdk, "qairt-quantizer", *base, "--input_list", missing)
    assert run.code == 1 and "Encountered Error" in run.stderr and "nope.raw" in run.stderr
    short = tmp_path / "short.raw"
    np.zeros(10, np.float32).tofile(short)
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(f"x:={short}\n")
    run = _tool(sdk, "qairt-quantizer", *base, "--input_list", wrong)
    assert run.code == 1 and "holds 10" in run.stderr
    run = _tool(sdk, "qairt-quantizer", *base)
    assert run.code == 1 and "input_list" in run.stderr
    assert not (tmp_path / "q.dlc").exists()
    run = _tool(sdk, "qairt-quantizer", "--input_dlc", tmp_path / "missing.txt",
                "--output_dlc", tmp_path / "q.dlc", "--float_fallback")
    assert run.code == 1 and "not a valid DLC" in run.stderr


@pytest.mark.parametrize(("version", "variant", "ok", "bad"), [
    ("2.23.0", None, "--act_bw", "--act_bitwidth"),
    ("2.31.0", None, "--act_bitwidth", "--act_bw"),
    ("2.31.0", "short", "--weights_bw", "--weights_bitwidth"),
    ("2.23.0", "long", "--bias_bitwidth", "--bias_bw"),
])
def test_quantizer_flag_eras(work: Path, float_dlc: Path, calib: Path, tmp_path: Path,
                             version: str, variant: str | None, ok: str, bad: str) -> None:
    variants = {"quantizer_flags": variant} if variant else None
    root = make_sdk(tmp_path / "sdk", version, dlc_variants=variants)
    help_text = _tool(root, "qairt-quantizer", "--help").stdout
    assert ok in help_text
    assert not re.search(rf"{re.escape(bad)}\b", help_text)
    value = "32" if "bias" in ok else "16" if "act" in ok else "8"
    base = ["--input_dlc", float_dlc, "--input_list", calib]
    run = _tool(root, "qairt-quantizer", *base, "--output_dlc", tmp_path / "a.dlc", ok, value)
    assert run.code == 0, run.text
    run = _tool(root, "qairt-quantizer", *base, "--output_dlc", tmp_path / "b.dlc", bad, value)
    assert run.code == 2
    assert f"unrecognized arguments: {bad} {value}" in run.stderr


def test_quantizer_both_spellings_variant(tmp_path: Path, float_dlc: Path, calib: Path) -> None:
    root = make_sdk(tmp_path / "sdk", "2.31.0", dlc_variants={"quantizer_flags": "both"})
    run = _tool(root, "qairt-quantizer", "--input_dlc", float_dlc, "--input_list", calib,
                "--output_dlc", tmp_path / "q.dlc", "--act_bw", "16", "--bias_bitwidth", "32")
    assert run.code == 0, run.text
    command = _meta(_info(root, tmp_path / "q.dlc"), "Quantizer command")
    assert "act_bitwidth=16" in command and "bias_bitwidth=32" in command


# ---------------------------------------------------------------- qairt-dlc-info variants

def test_dlc_info_default_layout(sdk: Path, quant_dlc: Path) -> None:
    text = _info(sdk, quant_dlc)
    lines = text.splitlines()
    assert lines[1] == "Model Version: N/A" and lines[2] == "Model Copyright:N/A"
    assert re.match(r"^-+$", lines[3])
    assert re.match(r"^\| Id\s+\| Name\s+\| Type\s+\| Inputs\s+\| Outputs\s+\| Out Dims\s+"
                    r"\| Runtimes\s+\| Parameters\s+\|$", lines[4])
    assert "Snapdragon 835" in text
    assert text.index("| Output Name") < text.index("Total parameters:")
    assert text.index("| Id ") < text.index("Converter command:")
    widths = {len(line) for line in _op_table(text).splitlines()}
    assert len(widths) == 1                    # every row padded to the same columns


def test_dlc_info_csv(sdk: Path, quant_dlc: Path, tmp_path: Path) -> None:
    _info(sdk, quant_dlc, "-s", tmp_path / "info.csv")
    csv_text = (tmp_path / "info.csv").read_text()
    assert csv_text.startswith("Id,Name,Type,Inputs,Outputs,Out Dims,Runtimes,Parameters")
    assert 'Input Name,Dimensions,Type,Encoding Info\nx,"1,8,8,3",uFxp_16,' in csv_text


@pytest.mark.parametrize("variants", [
    {"borders": "plus"}, {"dtypes": "column"}, {"dtypes": "io_tables"}, {"meta": "before"},
    {"columns": "qairt"}, {"signed_fixed": "Fxp"}, {"names": "sanitized"},
    {"command": "argv"},
])
def test_dlc_info_variants(tmp_path: Path, model: Path, calib: Path,
                           variants: dict[str, str]) -> None:
    root = make_sdk(tmp_path / "sdk", "2.31.0", dlc_variants=variants)
    conv, quant = tmp_path / "m.dlc", tmp_path / "m_q.dlc"
    assert _tool(root, "qairt-converter", "-i", model, "-o", conv, "-d", "x",
                 "1,3,8,8").code == 0
    run = _tool(root, "qairt-quantizer", "--input_dlc", conv, "--output_dlc", quant,
                "--input_list", calib, "--use_per_channel_quantization",
                "--bias_bitwidth", "32")
    assert run.code == 0, run.text
    text = _info(root, quant)
    key, value = next(iter(variants.items()))
    if key == "borders":
        assert re.search(r"^\+-+\+-+\+", text, re.M) and "| Id " in text
    elif key == "dtypes" and value == "column":
        assert re.search(r"\| Out Dims\s+\| Data Type\s+\|", text)
        assert re.search(r"\| 1x8x8x8\s+\| uFxp_8\s+\|", text)
        assert "data type:" not in text
    elif key == "dtypes":
        assert "data type:" not in text and "Data Type" not in text
        assert re.search(r"\| output\s+\| 1,8\s+\| uFxp_8\s+\|", text)
    elif key == "meta":
        assert text.index("Converter command:") < text.index("| Id ")
        assert text.index("Total parameters:") < text.index("| Input Name")
    elif key == "columns":
        assert "Runtimes" not in text and "Snapdragon 835" not in text
    elif key == "signed_fixed":
        assert "conv1.weight (data type: Fxp_8;" in text
        assert "conv1.bias (data type: Fxp_32;" in text and "sFxp" not in text
    elif key == "names":
        assert "_conv1_Conv_output_0 (data type:" in text and "| _conv1_Conv " in text
    else:
        assert _meta(text, "Converter command") == (
            f"qairt-converter -i {model} -o {conv} -d x 1,3,8,8")
        assert _meta(text, "Quantizer command").startswith(
            f"qairt-quantizer --input_dlc {conv} --output_dlc {quant}")


def test_dlc_info_on_a_non_dlc(sdk: Path, model: Path) -> None:
    run = _tool(sdk, "qairt-dlc-info", "-i", model)
    assert run.code == 1 and "Failed to load DLC" in run.stderr


# ---------------------------------------------------------------- context binary (DLC route)

@pytest.fixture(scope="module")
def board(work: Path) -> Path:
    return make_board(work / "board")           # QCS6490: v68, 2 MiB VTCM, QNN 2.31.0


def test_host_context_binary_runs_on_the_board(sdk: Path, quant_dlc: Path, model: Path,
                                               board: Path, calib: Path,
                                               tmp_path: Path) -> None:
    config = htp_config(tmp_path / "cfg", "tiny", {"soc_model": 93, "dsp_arch": "v68"})
    run = run_bash(_context(sdk, quant_dlc, tmp_path / "out", config), cwd=tmp_path)
    assert "rc=0" in run.stdout, run.text
    ctx = tmp_path / "out" / "ctx.bin"
    facts = read_context_payload(ctx)
    assert facts is not None and facts["arch"] == 68 and facts["soc"] == "QCS6490"
    assert facts["inputs"][0]["dtype"] == "QNN_DATATYPE_UFIXED_POINT_16"
    run = run_bash(f"LD_LIBRARY_PATH={board}/lib {board}/bin/qnn-net-run --backend "
                   f"{board}/lib/libQnnHtp.so --retrieve_context {ctx} --input_list {calib} "
                   f"--output_dir {tmp_path}/res; echo rc=$?", cwd=tmp_path)
    assert "rc=0" in run.stdout, run.text
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    first = calib.read_text().split()[0].split(":=")[1]
    x = np.fromfile(first, np.float32).reshape(1, 3, 8, 8)
    want = session.run(None, {"x": x})[0]
    got = np.fromfile(tmp_path / "res/Result_0/output.raw", np.float32).reshape(want.shape)
    assert np.abs(got - want).max() < 0.05 and got.argmax() == want.argmax()   # 8-bit weights


def test_multi_dlc_context(sdk: Path, quant_dlc: Path, model: Path, tmp_path: Path) -> None:
    second = tmp_path / "second.dlc"        # the graph is named after the converter's output
    assert _tool(sdk, "qairt-converter", "-i", model, "-o", second, "-d", "x",
                 "1,3,8,8").code == 0
    run = run_bash(_context(sdk, f"{quant_dlc},{second}", tmp_path / "out"), cwd=tmp_path)
    assert "rc=0" in run.stdout, run.text
    facts = read_context_payload(tmp_path / "out/ctx.bin")
    assert facts is not None and facts["graphs"] == ["tiny", "second"]
    assert facts["arch"] == 73                 # no config: SM8550


@pytest.mark.parametrize(("device", "aborts"), [
    ({"soc_model": 93}, True), ({"soc_id": 35}, True), ({"dsp_arch": "v68"}, True),
    ({"soc_id": 43, "dsp_arch": "v73"}, False), ({"soc_model": 57}, False),
])
def test_fp16_dlc_on_v68_aborts(sdk: Path, float_dlc: Path, calib: Path, tmp_path: Path,
                                device: dict, aborts: bool) -> None:
    fp16 = tmp_path / "fp16.dlc"
    run = _tool(sdk, "qairt-quantizer", "--input_dlc", float_dlc, "--output_dlc", fp16,
                "--input_list", calib, "--float_fallback", "--float_bitwidth", "16")
    assert run.code == 0, run.text
    config = htp_config(tmp_path / "cfg", "fp16", device, vtcm_mb=8 if not aborts else 2)
    run = run_bash(_context(sdk, fp16, tmp_path / "out", config), cwd=tmp_path)
    if aborts:
        assert "rc=134" in run.stdout, run.text
        assert not (tmp_path / "out/ctx.bin").exists()
    else:
        assert "rc=0" in run.stdout, run.text


def test_vtcm_overflow(sdk: Path, tmp_path: Path) -> None:
    dlc = tmp_path / "big.dlc"
    run = _tool(sdk, "qairt-converter", "-i", _big_model(tmp_path / "big.onnx"), "-o", dlc)
    assert run.code == 0, run.text
    config = htp_config(tmp_path / "cfg", "big", {"soc_model": 93, "dsp_arch": "v68"}, vtcm_mb=2)
    run = run_bash(_context(sdk, dlc, tmp_path / "out", config), cwd=tmp_path)
    assert "rc=1" in run.stdout
    assert re.search(r"Requires 0x[0-9a-f]+ bytes of TCM, which is greater than the TCM size "
                     r"of 0x200000", run.stderr)
    assert "Failed to finalize graph (id: 1) with err 1002" in run.stderr
    assert "Graph Finalize failure" in run.stderr


@pytest.mark.parametrize(("faults", "texts"), [
    ({"context_finalize": True},
     ["Failed to finalize graph (id: 1) with err 1002", "Graph Finalize failure"]),
    ({"context_op_refused": {"op": "/conv1/Conv"}},
     ["op validator (quantized and FP16) failed 3110", "QnnBackend_validateOpConfig failed 3110"]),
    ({"context_vtcm_need_mb": 36},
     ["Requires 0x2400000 bytes of TCM, which is greater than the TCM size of 0x800000",
      "Graph Finalize failure"]),
    ({"context_serialize": True}, ["Failed to get serialized binary"]),
])
def test_host_faults(quant_dlc: Path, tmp_path: Path, faults: dict, texts: list[str]) -> None:
    root = make_sdk(tmp_path / "sdk", "2.31.0", faults=faults)
    run = run_bash(_context(root, quant_dlc, tmp_path / "out"), cwd=tmp_path)
    assert "rc=1" in run.stdout, run.text
    for text in texts:
        assert text in run.stderr
    assert not (tmp_path / "out/ctx.bin").exists()
    set_sdk_faults(root, None)
    run = run_bash(_context(root, quant_dlc, tmp_path / "out"), cwd=tmp_path)
    assert "rc=0" in run.stdout, run.text


def test_context_version_fault_is_refused_by_the_board(quant_dlc: Path, board: Path,
                                                      calib: Path, tmp_path: Path) -> None:
    root = make_sdk(tmp_path / "sdk", "2.31.0",
                    faults={"context_version": {"version": "2.40.0"}})
    config = htp_config(tmp_path / "cfg", "tiny", {"soc_model": 93})
    run = run_bash(_context(root, quant_dlc, tmp_path / "out", config), cwd=tmp_path)
    assert "rc=0" in run.stdout, run.text
    run = run_bash(f"LD_LIBRARY_PATH={board}/lib {board}/bin/qnn-net-run --backend "
                   f"{board}/lib/libQnnHtp.so --retrieve_context {tmp_path}/out/ctx.bin "
                   f"--input_list {calib} --output_dir {tmp_path}/res; echo rc=$?",
                   cwd=tmp_path)
    assert "rc=1" in run.stdout and "err 5000" in run.stderr


def test_dlc_route_load_failures(sdk: Path, quant_dlc: Path, model: Path,
                                 tmp_path: Path) -> None:
    board_lib = sdk / "lib/aarch64-oe-linux-gcc11.2" / DLC_LIB
    run = run_bash(_context(sdk, quant_dlc, tmp_path / "o1", model=board_lib), cwd=tmp_path)
    assert "rc=1" in run.stdout and f"Could not load model : {board_lib}!" in run.stderr
    run = run_bash(_context(sdk, model, tmp_path / "o2"), cwd=tmp_path)
    assert "rc=1" in run.stdout and f"Failed to load DLC {model}" in run.stderr
    run = run_bash(_context(sdk, quant_dlc, tmp_path / "o3", backend="libQnnCpu.so"),
                   cwd=tmp_path)
    assert "rc=1" in run.stdout and "Failed to get serialized binary" in run.stderr
    run = run_bash(f"{sdk}/{HOST_BIN}/qnn-context-binary-generator --model "
                   f"{sdk}/{X86_LIB}/{DLC_LIB} --backend libQnnHtp.so --binary_file ctx "
                   f"--output_dir {tmp_path}/o4; echo rc=$?", cwd=tmp_path)
    assert "rc=1" in run.stdout and "Could not load model" in run.stderr
