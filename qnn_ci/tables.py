"""The one place for data tables: SoCs, HTP architectures, QNN data types,
converter flag aliases. Every stage reads these facts from here.

Sources: the QAIRT SDK docs and generated files (soc ids, arch, FP16) and what
onnxruntime-qnn's simulator was observed to accept (``sim_soc_id``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from qnn_ci.errors import UserError


@dataclass(frozen=True)
class SocInfo:
    """One Snapdragon SoC: its ids, HTP architecture, FP16 support and VTCM size."""

    name: str
    sdk_soc_id: int          # the id the SDK's HTP config uses (`soc_model` / `soc_id`)
    sim_soc_id: int | None   # the numeric `soc_model` onnxruntime-qnn accepts for it
    htp_arch: int            # 68 for v68, ...
    fp16: bool               # whether the HTP executes FP16 ops
    vtcm_mb: int | None      # VTCM size in MiB where known
    aliases: tuple[str, ...] = ()
    note: str = ""

    @property
    def arch_name(self) -> str:
        return f"v{self.htp_arch}"


SOCS: tuple[SocInfo, ...] = (
    # VTCM: ExecuTorch's qc_schema.py (formats page, section 8), and what the real
    # simulator writes into its context binaries (vtcm_size) for every SoC here.
    SocInfo("QCS6490", 93, 93, 68, False, 2, aliases=("QCM6490",),
            note="SoC id 93 (35 is SM7325; the simulator agrees)"),
    SocInfo("SM7325", 35, 35, 68, False, 2),
    SocInfo("SM8350", 30, 30, 68, False, 4,
            note="vendor docs: no FP16; the simulator accepts FP16 for id 30"),
    SocInfo("SA8295", 39, 39, 68, False, 8, note="as SM8350"),
    SocInfo("SM8450", 36, 36, 69, True, 8),
    SocInfo("SM8550", 43, 43, 73, True, 8),
    SocInfo("QCS8550", 66, 66, 73, True, 8,
            note="soc id 66: medium confidence; the simulator builds soc_type=QCS8550 arch 73, "
                 "vtcm_size 8 MiB"),
    SocInfo("SM8650", 57, 57, 75, True, 8),
    SocInfo("SM8750", 69, 69, 79, True, 8),
    SocInfo("SM8850", 87, 87, 81, True, 8, note="the simulator builds soc_type=SM8850 arch 81"),
)

_BY_NAME = {s.name.upper(): s for s in SOCS} | {a.upper(): s for s in SOCS for a in s.aliases}


def soc_names() -> list[str]:
    return [s.name for s in SOCS]


def find_soc(name: str) -> SocInfo | None:
    return _BY_NAME.get(str(name).strip().upper())


def get_soc(name: str, *, file: str | None = None, line: int | None = None,
            key: str | None = None) -> SocInfo:
    """The SoC named ``name``, or a UserError that lists the known ones."""
    soc = find_soc(name)
    if soc is not None:
        return soc
    close = difflib.get_close_matches(str(name).upper(), list(_BY_NAME), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UserError(f"unknown SoC {name!r}{hint}; known: {', '.join(soc_names())}",
                    file=file, line=line, key=key)


# QNN data types: name -> (hex value, decimal value used in _net.json)
QNN_DATATYPES: dict[str, int] = {
    "QNN_DATATYPE_INT_8": 0x0008, "QNN_DATATYPE_INT_16": 0x0016,
    "QNN_DATATYPE_INT_32": 0x0032, "QNN_DATATYPE_INT_64": 0x0064,
    "QNN_DATATYPE_UINT_8": 0x0108, "QNN_DATATYPE_UINT_16": 0x0116,
    "QNN_DATATYPE_UINT_32": 0x0132, "QNN_DATATYPE_UINT_64": 0x0164,
    "QNN_DATATYPE_FLOAT_16": 0x0216, "QNN_DATATYPE_FLOAT_32": 0x0232,
    "QNN_DATATYPE_SFIXED_POINT_8": 0x0308, "QNN_DATATYPE_SFIXED_POINT_16": 0x0316,
    "QNN_DATATYPE_SFIXED_POINT_32": 0x0332, "QNN_DATATYPE_UFIXED_POINT_8": 0x0408,
    "QNN_DATATYPE_UFIXED_POINT_16": 0x0416, "QNN_DATATYPE_UFIXED_POINT_32": 0x0432,
    "QNN_DATATYPE_BOOL_8": 0x0508, "QNN_DATATYPE_UNDEFINED": 0x7FFFFFFF,
}
QNN_DATATYPE_BY_CODE: dict[int, str] = {v: k for k, v in QNN_DATATYPES.items()}

# QNN data types that hold an integer or bool as it is (not a quantized real):
# what an integer/bool graph input must stay after conversion (an int64 input may
# legitimately become INT_32).
QNN_INTEGER_DATATYPES: frozenset[str] = frozenset(
    k for k in QNN_DATATYPES if k.startswith(("QNN_DATATYPE_INT_", "QNN_DATATYPE_UINT_",
                                              "QNN_DATATYPE_BOOL_")))


def is_integer_qnn_datatype(name: str) -> bool:
    """True for ``QNN_DATATYPE_INT_32``, ``..._UINT_8``, ``..._BOOL_8`` ... (not the
    ``*FIXED_POINT_*`` types of a quantized tensor)."""
    return str(name).strip() in QNN_INTEGER_DATATYPES
FP16_CODE = QNN_DATATYPES["QNN_DATATYPE_FLOAT_16"]  # 0x216 == 534

# qnn-onnx-converter: alias (short, deprecated from ~2.25) -> canonical destination.
CONVERTER_ALIASES: dict[str, str] = {
    "act_bw": "act_bitwidth",
    "weight_bw": "weights_bitwidth",
    "bias_bw": "bias_bitwidth",
    "float_bw": "float_bitwidth",
    "float_bias_bw": "float_bias_bitwidth",
}
CONVERTER_CANONICAL_TO_ALIAS: dict[str, str] = {v: k for k, v in CONVERTER_ALIASES.items()}

# qnn-model-lib-generator: default targets when -t is omitted (neither runs on
# an aarch64 Linux board).
LIB_GENERATOR_DEFAULT_TARGETS: tuple[str, ...] = ("x86_64-linux-clang", "aarch64-android")

# ELF e_machine per lib target prefix.
ELF_MACHINE_BY_TARGET_PREFIX: dict[str, tuple[int, str]] = {
    "aarch64-": (183, "AArch64"),
    "x86_64-": (62, "x86-64"),
    "arm-": (40, "ARM"),
}

# Graph-input dtypes that are not real-valued signals: the converter must keep
# them as they are (``--input_encoding NAME other``) instead of quantizing them
# with calibrated ranges like an activation. bool counts too: a mask or flag
# input holds 0/1, and quantizing it maps "true" onto a calibrated scale.
_INTEGER_INPUT_DTYPES: frozenset[str] = frozenset({
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
})


def is_integer_input_dtype(dtype: str) -> bool:
    """True for an integer or bool input dtype (numpy name ``uint8``, ONNX
    ``tensor(int64)``, any case): such an input is passed with
    ``--input_encoding NAME other``."""
    text = str(dtype or "").strip().lower()
    if text.startswith("tensor(") and text.endswith(")"):
        text = text[7:-1]
    return text in _INTEGER_INPUT_DTYPES


# AIMET coverage: tensors a real AIMET export leaves without encodings on purpose,
# because the converter derives them (see qnn_ci.sdk.encoding_roles).
# Data-movement ops: the converter gives their output the encoding of their input.
ENCODING_FROM_INPUT_OPS: frozenset[str] = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Split", "Slice", "Gather",
    "GatherND", "GatherElements", "Concat", "MaxPool", "GlobalMaxPool", "Identity",
    "Dropout", "Tile", "Expand", "DepthToSpace", "SpaceToDepth", "Pad", "ReduceMax",
    "ReduceMin",
})
# Activations the converter squashes into the op before them (disable_relu_squashing
# is False by default): the producer's own output disappears.
SQUASHED_ACTIVATION_OPS: frozenset[str] = frozenset({"Relu", "Clip"})
# Ops a following bias Add (with a static addend) is folded into.
BIAS_ADD_PRODUCERS: frozenset[str] = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
# op -> input index of its bias: quantized by the converter from the input and
# weight scales (0.6.1/1.0.0 exports leave biases out).
BIAS_INPUTS: dict[str, int] = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}
# Ops whose constant inputs are weights (what a 16-bit weights override can raise).
WEIGHTED_OPS: frozenset[str] = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm",
                                          "LSTM", "GRU", "RNN"})
# BatchNormalization scale, B, mean, var: folded into the convolution before it.
BATCHNORM_PARAM_INPUTS: frozenset[int] = frozenset({1, 2, 3, 4})

# Default quantization: W8A16 with 32-bit bias.
DEFAULT_BITWIDTHS = {"act": 16, "weight": 8, "bias": 32}

# Default comparison threshold.
DEFAULT_COSINE = 0.99

# What the HTP is known to refuse, so the recipe advisor can say why a candidate
# did not prepare (the prepare still decides). Seen on onnxruntime-qnn 2.7's
# simulator (QNN 2.51), a Conv with 16-bit symmetric weights: QNN error 3110 on
# v68 (QCS6490) and v69 (SM8450) with 16-bit activations, prepared on v73 (SM8550)
# and v75 (SM8650); refused on every arch with 8-bit activations.
INT16_WEIGHTS_MIN_ARCH = 73
INT16_WEIGHTS_ACT_BITWIDTH = 16


def int16_weights_refusal(htp_arch: int, act_bitwidth: int) -> str | None:
    """Why an HTP is known to refuse 16-bit weights with these activations (None:
    not known to)."""
    if act_bitwidth != INT16_WEIGHTS_ACT_BITWIDTH:
        return (f"the HTP takes 16-bit weights only with 16-bit activations (these are "
                f"{act_bitwidth}-bit)")
    if htp_arch < INT16_WEIGHTS_MIN_ARCH:
        return (f"HTP v{htp_arch} refuses 16-bit weights with 16-bit activations (v"
                f"{INT16_WEIGHTS_MIN_ARCH} and newer take them)")
    return None


# The HTP backend-extension config (`--config_file` of qnn-context-binary-generator and
# qnn-net-run; formats page, section 8): the graph keys qnn-ci writes from the manifest's
# `htp_config:` and their meaning (qairt-dev's HtpGraphConfig). The SDK silently ignores
# unknown keys, so the manifest refuses them.
HTP_GRAPH_KEYS: dict[str, str] = {
    "vtcm_mb": "VTCM the graph may use, MiB (0 = the SoC's maximum)",
    "O": "optimization level 1..3 (1 fastest prepare, 3 most optimal)",
    "fp16_relaxed_precision": "float ops may run in FP16 (an HTP with FP16 only)",
    "hvx_threads": "HVX threads",
    "dlbc": "deep-learning bandwidth compression 0/1",
}
HTP_DEVICE_KEYS: dict[str, str] = {
    "soc_model": "the SoC id (SocInfo.sdk_soc_id)",
    "dsp_arch": "the HTP architecture, v68 ...",
}
HTP_OPTIMIZATION_LEVELS = (1, 2, 3)
HTP_EXTENSIONS_LIB = "libQnnHtpNetRunExtensions.so"
HTP_CONFIG_FILE = "htp_config.json"
HTP_CONFIG_WRAPPER = "htp_backend_extensions.json"


# The two routes from ONNX to a context binary (manifest `route:`; docs/dlc-route.md):
# "classic" = qnn-onnx-converter -> .cpp/.bin -> model library -> binary built on the
# board; "dlc" = qairt-converter -> DLC -> qairt-quantizer -> binary built on the host.
ROUTES: tuple[str, ...] = ("classic", "dlc")
DEFAULT_ROUTE = "classic"

# The DLC route's tools: what qnn-ci passes -> the flag's spellings, newest era first.
# The first one the tool's --help lists is used; without a readable --help, the first.
# Sources: the formats page (section 8), public scripts, QAIRT's qairt-converter help
# (2.3x/2.4x: --source_model_input_*; earlier qairt-converter: --input_dim,
# --input_dtype, --input_layout, --preserve_io) and its quantizer module (2.2x+:
# --act_bitwidth ...; the short --act_bw spellings of older quantizers). Integer inputs
# are kept unquantized with --preserve_io_datatype NAME (converter and quantizer), the
# quantizer-era counterpart of the classic converter's --input_encoding NAME other.
DLC_CONVERTER_FLAGS: dict[str, tuple[str, ...]] = {
    "input_network": ("--input_network", "-i"),
    "output_path": ("--output_path", "-o"),
    "input_dim": ("--source_model_input_shape", "--input_dim", "-s", "-d"),
    "input_dtype": ("--source_model_input_datatype", "--input_dtype"),
    "input_encoding": ("--input_encoding", "--desired_input_color_encoding", "-e"),
    "input_layout": ("--input_layout", "--source_model_input_layout"),
    "desired_input_layout": ("--desired_input_layout",),
    "preserve_io": ("--preserve_io", "--preserve_io_datatype"),
    "preserve_io_datatype": ("--preserve_io_datatype",),
    "quantization_overrides": ("--quantization_overrides",),
    "float_bitwidth": ("--float_bitwidth", "--float_bw"),
}
DLC_QUANTIZER_FLAGS: dict[str, tuple[str, ...]] = {
    "input_dlc": ("--input_dlc", "-i"),
    "output_dlc": ("--output_dlc", "-o"),
    "input_list": ("--input_list", "-l"),
    "act_bitwidth": ("--act_bitwidth", "--act_bw"),
    "weights_bitwidth": ("--weights_bitwidth", "--weight_bw", "--weights_bw"),
    "bias_bitwidth": ("--bias_bitwidth", "--bias_bw"),
    "float_bitwidth": ("--float_bitwidth", "--float_bw"),
    "use_per_channel_quantization": ("--use_per_channel_quantization",),
    "act_quantizer_calibration": ("--act_quantizer_calibration",),
    "param_quantizer_calibration": ("--param_quantizer_calibration",),
    "percentile_calibration_value": ("--percentile_calibration_value",),
    "float_fallback": ("--float_fallback",),
    "preserve_io_datatype": ("--preserve_io_datatype",),
}
# The manifest key each DLC-route setting comes from (for the one-line refusals).
DLC_FLAG_KEYS: dict[str, str] = {
    "input_network": "model", "output_path": "model", "input_dlc": "model",
    "output_dlc": "model", "input_dim": "inputs.{name}.shape",
    "input_dtype": "inputs.{name}.dtype", "input_encoding": "inputs.{name}.encoding",
    "input_layout": "dlc.input_layout.{name}", "desired_input_layout": "dlc.input_layout.{name}",
    "preserve_io": "dlc.preserve_io", "quantization_overrides": "quantization.overrides",
    "float_bitwidth": "quantization.float_bitwidth", "input_list": "calibration",
    "act_bitwidth": "quantization.act_bitwidth",
    "weights_bitwidth": "quantization.weights_bitwidth",
    "bias_bitwidth": "quantization.bias_bitwidth",
    "use_per_channel_quantization": "quantization.per_channel",
    "act_quantizer_calibration": "quantization.act_calibration",
    "param_quantizer_calibration": "quantization.param_calibration",
    "percentile_calibration_value": "quantization.percentile",
    "float_fallback": "quantization.float_fallback",
    "preserve_io_datatype": "inputs.{name}.dtype",
}
# Layouts the converters accept for an input (qairt-converter --help).
DLC_LAYOUTS: tuple[str, ...] = ("NCDHW", "NDHWC", "NCHW", "NHWC", "NFC", "NCF", "NTF", "TNF",
                                "NF", "NC", "F")

# qairt-dlc-info's data type names -> the QNN data type family (``sFxp_8`` ->
# SFIXED_POINT_8, ``Float_16`` -> FLOAT_16, ``uInt_8`` -> UINT_8; some builds print a
# signed fixed point as ``Fxp_8``). Matched case-insensitively on the prefix before
# ``_<bits>``.
DLC_TYPE_PREFIXES: dict[str, str] = {
    "ufxp": "UFIXED_POINT", "sfxp": "SFIXED_POINT", "fxp": "SFIXED_POINT",
    "float": "FLOAT", "fp": "FLOAT", "int": "INT", "sint": "INT", "uint": "UINT",
    "bool": "BOOL",
}

# The host side of the DLC route: the generic model library that loads a DLC
# (``--model``, with ``--dlc_path``) and the HTP backend, in the SDK's host lib folder.
DLC_MODEL_LIB = "libQnnModelDlc.so"
HTP_BACKEND_LIB = "libQnnHtp.so"


# --- Qualcomm AI Hub (`transport: ai-hub` boards; docs/ai-hub.md) -----------------------
# Facts from the `qai-hub` 0.56 client and the formats page (section 8). Device
# attributes that name the SoC: `soc-model:<id>` (the SDK's SoC id, as in SOCS),
# `chipset:<name>` and `hexagon:v<arch>`. Chipset names per SoC: those the formats page
# and the client's examples show, plus the plausible spellings of the rest (not
# confirmed: a `-proxy` suffix and a `qualcomm-` prefix are taken off before the lookup,
# and a SoC's own name always matches).
HUB_CHIPSETS: dict[str, str] = {
    "qcs6490": "QCS6490", "qcm6490": "QCS6490",
    "sm7325": "SM7325", "snapdragon-778g": "SM7325",
    "sm8350": "SM8350", "snapdragon-888": "SM8350",
    "sa8295p": "SA8295", "sa8295": "SA8295",
    "sm8450": "SM8450", "snapdragon-8gen1": "SM8450",
    "sm8550": "SM8550", "snapdragon-8gen2": "SM8550",
    "qcs8550": "QCS8550",
    "sm8650": "SM8650", "snapdragon-8gen3": "SM8650",
    "sm8750": "SM8750", "snapdragon-8-elite": "SM8750",
    "sm8850": "SM8850", "snapdragon-8-elite-gen5": "SM8850",
}
HUB_TOKEN_ENV = "QAI_HUB_API_TOKEN"        # default variable a board entry reads its token from
# The export's bit widths (weights, activations) -> `--quantize_full_type`.
HUB_QUANTIZE_TYPES: dict[tuple[int, int], str] = {
    (8, 8): "int8", (16, 16): "int16", (8, 16): "w8a16", (4, 16): "w4a16", (4, 8): "w4a8",
}
HUB_TARGET_RUNTIME = "qnn_context_binary"   # what the classic route's context binary is
HUB_COMPUTE_UNITS: tuple[str, ...] = ("NPU", "GPU", "CPU")


def soc_of_hub_chipset(chipset: str) -> SocInfo | None:
    """The SoC an AI Hub ``chipset:`` attribute names, or None when it is not known."""
    name = chipset.strip().lower().removeprefix("chipset:")
    name = name.removesuffix("-proxy").removeprefix("qualcomm-")
    return find_soc(HUB_CHIPSETS.get(name, name))


def soc_of_hub_model(soc_model: int) -> SocInfo | None:
    """The SoC whose SDK id is an AI Hub ``soc-model:`` attribute's number."""
    return next((s for s in SOCS if s.sdk_soc_id == soc_model), None)
