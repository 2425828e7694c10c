"""Stage `dlc_contract` (route: dlc): did what the manifest asked take effect in the
DLC the tools RESOLVED, not in the flags qnn-ci passed?

From ``qairt-dlc-info`` of the quantized DLC (``qnn_ci.sdk.dlc_info``):

- the ``Quantizer command:`` record: bit widths, per-channel, calibration methods,
  percentile, float fallback / bit width, and the calibration input list (resolved
  paths); the ``Converter command:`` record: the AIMET encodings file and the input
  dims. A key the record lacks is a warning; a record that is not there at all is an
  error (nothing can be checked).
- the outcome, from every tensor's data type: integer/bool graph inputs are still
  integer/bool (``encoding: other`` float inputs still float); without AIMET encodings,
  every activation is fixed point at ``act_bitwidth`` and every static tensor at
  ``weights_bitwidth`` / ``bias_bitwidth``, and no tensor stayed float unless
  ``float_fallback``; with ``per_channel``, weights carry per-axis encodings (where
  the dump prints encodings at all).

Each mismatch is one finding ``key: asked X, <tool> recorded Y`` or names the tensors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.results import Finding, Severity, StageResult, status_of
from qnn_ci.engine.stage import StageContext
from qnn_ci.stages import dlc_common
from qnn_ci.util.listing import cut_text

if TYPE_CHECKING:
    from qnn_ci.engine.spec import ExportSpec
    from qnn_ci.sdk.dlc_info import DlcInfo, DlcTensor
    from qnn_ci.sdk.record import ConverterRecord

# keys of the quantizer's record that decide what the DLC is (as the classic contract)
QUANTIZER_KEYS = ("act_bitwidth", "weights_bitwidth", "bias_bitwidth",
                  "use_per_channel_quantization", "act_quantizer_calibration",
                  "param_quantizer_calibration", "percentile_calibration_value",
                  "float_fallback", "float_bitwidth", "input_list")
_BOOL_FLAGS = ("use_per_channel_quantization", "float_fallback")


def _show(raw: str | None) -> str:
    if raw is None:
        return "nothing (not in the record)"
    return raw if raw != "" else "(empty)"


def _same_path(recorded: str, wanted: Path, base: Path) -> bool:
    p = Path(recorded).expanduser()
    if not p.is_absolute():
        p = base / p
    return os.path.realpath(p) == os.path.realpath(wanted)


class _Check:
    """Compare one record with the manifest; findings collected."""

    def __init__(self, rec: ConverterRecord, tool: str, argv_style: bool) -> None:
        self.rec, self.tool, self.argv_style = rec, tool, argv_style
        self.findings: list[Finding] = []

    def mismatch(self, key: str, asked: Any, extra: str = "") -> None:
        self.findings.append(Finding(
            f"contract.{key}", f"{key}: asked {asked}, {self.tool} recorded "
            f"{_show(self.rec.raw_value(key))}{extra}", Severity.ERROR, key))

    def value(self, key: str, asked: Any) -> None:
        from qnn_ci.sdk.record import same_value

        if not self.rec.has(key):
            if self.argv_style and key in _BOOL_FLAGS and asked is False:
                return              # a command line leaves an unset switch out
            self.findings.append(Finding(
                "contract.unrecorded", f"{key}: asked {asked}, but {self.tool}'s record does "
                "not list it", Severity.WARNING, key))
        elif not same_value(asked, self.rec.value(key)):
            self.mismatch(key, asked)

    def path(self, key: str, wanted: Path | None, base: Path, none_note: str) -> None:
        recorded = self.rec.raw_value(key)
        empty = recorded in (None, "", "None")
        if wanted is None:
            if not empty:
                self.mismatch(key, "none")
        elif empty:
            self.mismatch(key, str(wanted), none_note)
        elif not _same_path(str(recorded), wanted, base):
            self.mismatch(key, str(wanted))


def record_findings(info: DlcInfo, export: ExportSpec, input_list: Path | None,
                    base: Path) -> list[Finding]:
    """The quantizer's and the converter's records against the manifest."""
    q = export.quantization
    found: list[Finding] = []
    if info.quantizer is None:
        found.append(Finding(
            "contract.no_record", "qairt-dlc-info prints no Quantizer command for the DLC "
            "(or N/A): what the quantizer resolved cannot be checked; was it quantized?"))
    else:
        argv = bool(info.quantizer_command and " -" in f" {info.quantizer_command}")
        check = _Check(info.quantizer, "qairt-quantizer", argv)
        check.value("act_bitwidth", q.act_bitwidth)
        check.value("weights_bitwidth", q.weights_bitwidth)
        check.value("bias_bitwidth", q.bias_bitwidth)
        check.value("use_per_channel_quantization", q.per_channel)
        check.value("float_fallback", q.float_fallback)
        for key, asked in (("act_quantizer_calibration", q.act_calibration),
                           ("param_quantizer_calibration", q.param_calibration),
                           ("percentile_calibration_value", q.percentile),
                           ("float_bitwidth", q.float_bitwidth)):
            if asked is not None:
                check.value(key, asked)
        check.path("input_list", None if q.float_fallback else input_list, base,
                   " (no calibration: the quantizer had no samples)")
        found += check.findings
        found += [Finding("contract.record", f"quantizer command: {p}", Severity.WARNING)
                  for p in info.quantizer.problems]
    if info.converter is None:
        found.append(Finding("contract.no_record", "qairt-dlc-info prints no Converter "
                             "command for the DLC: the encodings file and input dims "
                             "cannot be checked", Severity.WARNING))
        return found
    argv = bool(info.converter_command and " -" in f" {info.converter_command}")
    conv = _Check(info.converter, "qairt-converter", argv)
    key = next((k for k in ("quantization_overrides",) if conv.rec.has(k)), None)
    if key is not None or q.overrides is not None:
        conv.path("quantization_overrides", q.overrides, base,
                  " (the AIMET encodings were not applied)")
    found += conv.findings
    found += _dims_findings(info.converter, export)
    return found


def _dims_findings(rec: ConverterRecord, export: ExportSpec) -> list[Finding]:
    """The recorded input dims (``input_dim`` / ``source_model_input_shape``) against
    the pinned shapes."""
    value = next((rec.value(k) for k in ("input_dim", "source_model_input_shape", "d", "s")
                  if rec.has(k)), None)
    if not isinstance(value, list | tuple):
        return []
    if len(value) == 2 and all(isinstance(v, str) for v in value):
        value = [value]                 # one --source_model_input_shape NAME DIMS
    recorded: dict[str, str] = {}
    for entry in value:
        if isinstance(entry, list | tuple) and len(entry) >= 2:
            recorded[str(entry[0])] = str(entry[1]).replace(" ", "")
    found = []
    for name, dims in export.pinned_dims().items():
        want = ",".join(str(d) for d in dims)
        if name in recorded and recorded[name] != want:
            found.append(Finding("contract.input_dim", f"input_dim: asked {name} {want}, "
                                 f"qairt-converter recorded {recorded[name]}",
                                 Severity.ERROR, name))
    return found


def _names(tensors: list[DlcTensor]) -> str:
    return cut_text([f"{t.name} ({t.raw_type})" for t in tensors], 5)


def outcome_findings(info: DlcInfo, export: ExportSpec, integer: dict[str, str],
                     preserved: set[str]) -> list[Finding]:
    """What the DLC's tensors say took effect."""
    q = export.quantization
    found: list[Finding] = []
    strict = Severity.ERROR if q.overrides is None else Severity.WARNING
    why = "" if q.overrides is None else " (AIMET encodings may set them on purpose)"
    typed = [t for t in info.tensors.values() if t.data_type is not None]
    for name, dtype in integer.items():
        t = info.tensors.get(name)
        if t is None or t.data_type is None:
            found.append(Finding("contract.integer_input", f"integer input {name} ({dtype}): "
                                 "qairt-dlc-info gives no data type for it; not verified",
                                 Severity.WARNING, name))
        elif t.is_fixed_point or t.is_float:
            kept = "--preserve_io_datatype was passed" if name in preserved else \
                "this SDK's tools had no flag to keep it"
            found.append(Finding(
                "contract.integer_input", f"integer input {name} ({dtype}) is {t.raw_type} in "
                f"the DLC: the quantizer treated it as a real-valued signal ({kept}); the "
                "app's integers would be read on a calibrated scale", Severity.ERROR, name))
    for name, spec in export.inputs.items():
        t = info.tensors.get(name)
        if spec.encoding == "other" and name not in integer and t is not None \
                and t.is_fixed_point:
            found.append(Finding("contract.input_encoding", f"input {name} has encoding: "
                                 f"other but is {t.raw_type} in the DLC (quantized)",
                                 Severity.ERROR, name))
    if not typed:
        return found
    acts = [t for t in typed if not t.is_static and t.is_fixed_point and t.name not in integer]
    wrong = [t for t in acts if t.bits != q.act_bitwidth]
    if wrong:
        found.append(Finding("contract.act_bitwidth", f"act_bitwidth: asked {q.act_bitwidth}, "
                             f"{len(wrong)} activation(s) are not: {_names(wrong)}{why}",
                             strict))
    statics = [t for t in typed if t.is_static and t.is_fixed_point]
    allowed = {q.weights_bitwidth, q.bias_bitwidth} | ({8} if q.weights_bitwidth == 4 else set())
    wrong = [t for t in statics
             if (t.encoding.bitwidth if t.encoding else t.bits) not in allowed
             and t.bits not in allowed]
    if wrong:
        found.append(Finding(
            "contract.weights_bitwidth", f"weights_bitwidth/bias_bitwidth: asked "
            f"{q.weights_bitwidth}/{q.bias_bitwidth}, {len(wrong)} static tensor(s) are not: "
            f"{_names(wrong)}{why}", strict))
    if not q.float_fallback:
        io = set(info.inputs) | set(info.outputs) if export.dlc.preserve_io else set()

        def may_be_float(t: DlcTensor) -> bool:
            spec = export.inputs.get(t.name)
            return not (t.is_static or t.name in preserved or t.name in integer
                        or t.name in io or (spec is not None and spec.encoding == "other"))

        floats = [t for t in typed if t.is_float and may_be_float(t)]
        if floats:
            found.append(Finding(
                "contract.float_left", f"{len(floats)} tensor(s) stayed float without "
                f"float_fallback: {_names(floats)}; the quantizer did not quantize them",
                strict))
    if q.per_channel:
        encoded = [t for t in info.tensors.values() if t.is_static and t.encoding]
        if encoded and not any(t.encoding and t.encoding.per_axis for t in encoded):
            found.append(Finding("contract.per_channel", "per_channel: asked true, but no "
                                 "static tensor of the DLC has a per-axis encoding",
                                 Severity.ERROR))
        elif not encoded:
            found.append(Finding("contract.per_channel", "per_channel: qairt-dlc-info prints "
                                 "no weight encodings here, so only the quantizer's record "
                                 "says it took effect", Severity.INFO))
    return found


class DlcContractStage(dlc_common.DlcStage):
    name = "dlc_contract"
    needs = ("dlc_quantize", "calibration", "dlc_convert")
    settings = ("inputs", "model", "quantization", "dlc")

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        return {}                     # reads dlc_quantize's files only

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.stages.contract import integer_input_dtypes

        export = ctx.export
        info = dlc_common.dlc_info_of(ctx)
        cal = ctx.upstream["calibration"]
        input_list = Path(cal.artefacts["input_list"]) if cal.artefacts.get("input_list") \
            else None
        base = Path(ctx.upstream["dlc_quantize"].artefacts.get("dlc") or ".").resolve().parent
        preserved = set(ctx.upstream["dlc_quantize"].data.get("preserved") or ()) | set(
            ctx.upstream["dlc_convert"].data.get("preserved") or ())
        findings = record_findings(info, export, input_list, base)
        findings += outcome_findings(info, export, integer_input_dtypes(export), preserved)
        findings += [Finding("dlc_info.parse", p, Severity.WARNING) for p in info.problems]
        errors = [f for f in findings if f.severity == Severity.ERROR]
        if errors:
            summary = f"{len(errors)} setting(s) did not take effect: {errors[0].message}"
        else:
            summary = (f"the DLC's records and {len(info.tensors)} tensor type(s) match the "
                       f"manifest (quantizer: {export.quantization.act_bitwidth}-bit "
                       f"activations, {export.quantization.weights_bitwidth}-bit weights)")
        props: dict[str, Any] = {}
        if info.quantizer is not None:
            props |= {k: info.quantizer.args[k] for k in QUANTIZER_KEYS
                      if k in info.quantizer.args}
        if info.converter is not None and info.converter.has("quantization_overrides"):
            props["quantization_overrides"] = info.converter.raw_value("quantization_overrides")
        report = ctx.workdir / "dlc_contract.json"
        report.write_text(json.dumps({"info": info.to_dict(),
                                      "findings": [f.to_dict() for f in findings]},
                                     indent=2), "utf-8")
        return dlc_common.with_sdk_version(StageResult(
            self.name, status_of(findings), summary, findings, properties=props,
            artefacts={"report": str(report)},
            data={"quantizer": dict(info.quantizer.args) if info.quantizer else None}),
            info.sdk_version)
