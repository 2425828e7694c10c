"""The resolved, typed form of one export in a manifest (`qnn-ci.yaml`).

``qnn_ci.manifest.loader`` reads and validates the YAML and produces these; stages only
ever see these dataclasses. All paths are absolute.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from qnn_ci.engine.bounds import Thresholds
from qnn_ci.tables import DEFAULT_BITWIDTHS, DEFAULT_ROUTE


@dataclass(frozen=True)
class InputSpec:
    """One graph input as the manifest declares it: the shape to pin, dtype, encoding."""

    name: str
    shape: tuple[int, ...] | None = None   # the static shape to pin
    dtype: str | None = None               # numpy dtype name, e.g. "float32", "int64"
    encoding: str | None = None            # "other" keeps the input unquantized
    value: Any = None                      # a fixed value (a sample rate, a flag) for the
    #                                        inputs qnn-ci makes itself (shape checks)
    state: bool = False                    # a recurrent state input (zeros are legitimate)


@dataclass(frozen=True)
class CalibrationSpec:
    """Where an export's calibration samples come from, and how many are held out."""

    samples: int | None = None             # None: every line of an input list, 100 from a generator
    input_list: Path | None = None         # an existing input list
    generator: str | None = None           # "package.module:function"
    from_export: str | None = None         # outputs of another export in the manifest
    name_map: dict[str, str] = field(default_factory=dict)  # upstream output -> this input
    held_out: int | None = None            # samples kept back for numeric checks
    #                                        (None: 4 from a generator, 0 from a list)
    depends: tuple[str, ...] = ()          # data files/globs a generator reads (cache key)


@dataclass(frozen=True)
class QuantizationSpec:
    """The converter's quantization settings: bit widths, calibration methods, overrides."""

    act_bitwidth: int = DEFAULT_BITWIDTHS["act"]
    weights_bitwidth: int = DEFAULT_BITWIDTHS["weight"]
    bias_bitwidth: int = DEFAULT_BITWIDTHS["bias"]
    per_channel: bool = False
    act_calibration: str | None = None     # min-max | sqnr | entropy | mse | percentile
    param_calibration: str | None = None
    percentile: float | None = None
    float_fallback: bool = False
    float_bitwidth: int | None = None
    overrides: Path | None = None          # AIMET .encodings


@dataclass(frozen=True)
class TargetSpec:
    """The device an export is for: its SoC and the model library's target triple."""

    soc: str | None = None                 # a name from qnn_ci.tables.SOCS
    lib_target: str | None = None          # e.g. aarch64-oe-linux-gcc11.2


@dataclass(frozen=True)
class SdkSpec:
    """Where the QAIRT SDK is, and how long its tools may run."""

    root: Path | None = None               # else $QNN_SDK_ROOT
    esdk_env: Path | None = None           # else $ESDK_ENV
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class SimSpec:
    """Settings of the HTP simulator stages."""

    samples: int = 2                       # simulated inferences (the simulator is slow)


@dataclass(frozen=True)
class DiagnosisSpec:
    """Whether and how long to diagnose a numeric failure."""

    enabled: bool = True                   # diagnose a failing sim_numerics / htp_vs_cpu
    budget_s: float = 600.0                # the recipe advisor's time budget
    advisor: bool = True                   # try remedies within the budget


DEFAULT_ORIGINAL_COSINE = 0.999999


@dataclass(frozen=True)
class LatencySpec:
    """How the board stages time inference."""

    runs: int = 20                         # inferences timed on the board
    perf_profile: str = "burst"            # qnn-net-run --perf_profile
    enabled: bool = True


@dataclass(frozen=True)
class RegressionSpec:
    """The nightly regression check: per-metric tolerances and the baselines file."""

    tolerances: dict[str, float] = field(default_factory=dict)   # metric -> tolerance
    enabled: bool = True
    baselines: Path | None = None   # the manifest's qnn-baselines.yaml (set by the loader)


@dataclass(frozen=True)
class HtpConfigSpec:
    """The manifest's ``htp_config:``: the HTP backend-extension settings written for
    qnn-context-binary-generator and qnn-net-run (validated at load:
    ``qnn_ci.manifest.htp_config``). None: not given (the SDK's default)."""

    vtcm_mb: int | None = None
    O: int | None = None                              # noqa: E741 (the SDK's own key)
    fp16_relaxed_precision: bool | None = None
    hvx_threads: int | None = None
    dlbc: int | None = None
    soc_model: int | None = None                      # derived from target.soc when None
    dsp_arch: str | None = None                       # derived from target.soc when None

    GRAPH_KEYS: ClassVar[tuple[str, ...]] = ("vtcm_mb", "O", "fp16_relaxed_precision",
                                             "hvx_threads", "dlbc")

    @property
    def given(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def graph_settings(self) -> dict[str, Any]:
        """The graph keys that are set, in a stable order (fp16 as the SDK's 0/1)."""
        out: dict[str, Any] = {}
        for key in self.GRAPH_KEYS:
            value = getattr(self, key)
            if value is not None:
                out[key] = int(value) if key == "fp16_relaxed_precision" else value
        return out


@dataclass(frozen=True)
class DlcSpec:
    """The manifest's ``dlc:``: what only the DLC route's converter reads (passed only
    when given)."""

    input_layout: dict[str, str] = field(default_factory=dict)   # input -> source layout
    preserve_io: bool = False


@dataclass(frozen=True)
class OriginalSpec:
    """The framework export before graph surgery (manifest ``original:``)."""

    model: Path
    cosine: float = DEFAULT_ORIGINAL_COSINE


@dataclass(frozen=True)
class ExportSpec:
    """One export of a manifest, resolved: what every stage reads (paths absolute)."""

    name: str
    model: Path
    manifest: Path
    line: int                              # the export's line in the manifest
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    opset: int | None = None
    calibration: CalibrationSpec = field(default_factory=CalibrationSpec)
    quantization: QuantizationSpec = field(default_factory=QuantizationSpec)
    target: TargetSpec = field(default_factory=TargetSpec)
    thresholds: Thresholds = field(default_factory=Thresholds)
    board: str | None = None
    native_outputs: bool = False           # qnn-net-run --use_native_output_files on the board
    sdk: SdkSpec = field(default_factory=SdkSpec)
    sim: SimSpec = field(default_factory=SimSpec)
    diagnosis: DiagnosisSpec = field(default_factory=DiagnosisSpec)
    original: OriginalSpec | None = None
    latency: LatencySpec = field(default_factory=LatencySpec)
    regression: RegressionSpec = field(default_factory=RegressionSpec)
    htp_config: HtpConfigSpec = field(default_factory=HtpConfigSpec)
    route: str = DEFAULT_ROUTE             # "classic" | "dlc" (qnn_ci.tables.ROUTES)
    dlc: DlcSpec = field(default_factory=DlcSpec)
    raw: dict[str, Any] = field(default_factory=dict)  # the merged YAML mapping, for hashing

    def pinned_dims(self) -> dict[str, tuple[int, ...]]:
        return {n: i.shape for n, i in self.inputs.items() if i.shape is not None}
