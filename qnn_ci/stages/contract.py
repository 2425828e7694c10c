"""Stage `contract`: did what the manifest asked take effect?

Reads the converter's recorded argument list (generated source, else
``_net.json``) and compares it with the export's settings: bitwidths, float
fallback, float bitwidth, per-channel, calibration methods, the calibration
input list (resolved paths), the AIMET overrides file, and ``input_encoding``
(``[name, 'other']`` for integer inputs unless the manifest says otherwise).
Each mismatch is one finding ``key: asked X, converter recorded Y``.

Then the outcome: every integer/bool graph input must be an integer/bool QNN data
type in the generated source AND in ``_net.json`` (``qnn_ci.sdk.integer_inputs``),
else one finding naming the input, the data type recorded and the flag that
should have kept it (and AIMET overrides when they name the input).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.results import Finding, Severity, StageResult, Status
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.tables import is_integer_input_dtype

if TYPE_CHECKING:   # the readers of the converter's output: when the stage runs
    from qnn_ci.sdk.cpp_model import CppModel
    from qnn_ci.sdk.net_json import NetJson
    from qnn_ci.sdk.record import ConverterRecord

log = logging.getLogger(__name__)


def _show(raw: str | None) -> str:
    if raw is None:
        return "nothing (not in the record)"
    return raw if raw != "" else "(empty)"


def _realpath(text: str, base: Path) -> str:
    p = Path(text).expanduser()
    if not p.is_absolute():
        p = base / p
    return os.path.realpath(p)


def integer_inputs(export: ExportSpec) -> list[str]:
    """Graph inputs whose dtype is an integer or bool type (manifest dtype wins over
    the model): ``qnn_ci.tables.is_integer_input_dtype``, as the converter command uses."""
    return list(integer_input_dtypes(export))


def integer_input_dtypes(export: ExportSpec) -> dict[str, str]:
    """``integer_inputs`` with each input's dtype (``int64``)."""
    import onnx  # not at import: cached runs need no onnx

    declared: dict[str, str] = {}
    try:
        model = onnx.load(str(export.model), load_external_data=False)
        inits = {i.name for i in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            et = vi.type.tensor_type.elem_type
            declared[vi.name] = (onnx.helper.tensor_dtype_to_np_dtype(et).name if et else "?")
    except Exception as exc:          # the model is read by earlier stages; be lenient here
        log.info("could not read graph inputs of %s: %s", export.model, exc)
    for name, spec in export.inputs.items():
        if spec.dtype:
            declared[name] = spec.dtype
    return {n: dt for n, dt in declared.items() if is_integer_input_dtype(dt)}


def integer_outcome(export: ExportSpec, artefacts: dict[str, str],
                    rec: ConverterRecord | None) -> list[Finding]:
    """One ERROR per integer/bool graph input that the generated source or the
    ``_net.json`` does not keep as an integer/bool QNN data type."""
    wanted = integer_input_dtypes(export)
    if not wanted:
        return []
    from qnn_ci.sdk.cpp_model import read_cpp_model
    from qnn_ci.sdk.integer_inputs import check_outputs, overrides_names
    from qnn_ci.sdk.net_json import read_net_json

    outputs: list[CppModel | NetJson] = []
    findings: list[Finding] = []
    for key, reader in (("cpp", read_cpp_model), ("net_json", read_net_json)):
        path = artefacts.get(key)
        if not path:
            continue
        try:
            outputs.append(reader(Path(path)))
        except UserError as exc:
            findings.append(Finding("contract.integer_input", f"integer inputs not verified "
                                    f"in {Path(path).name}: {exc.oneline()}",
                                    Severity.WARNING))
    found = check_outputs(wanted, outputs, record=rec)
    if found and export.quantization.overrides is not None:
        named = overrides_names(export.quantization.overrides) & set(wanted)
        if named:
            found = check_outputs(wanted, outputs, record=rec, overridden=named)
    for q in found:
        findings.append(Finding("contract.integer_input", q.message(), Severity.ERROR,
                                q.input))
    return findings


def expected_input_encodings(export: ExportSpec) -> dict[str, str]:
    """input name -> the encoding the converter must have recorded for it."""
    want = {n: "other" for n in integer_inputs(export)}
    for name, spec in export.inputs.items():
        if spec.encoding:
            want[name] = spec.encoding
    return want


def _recorded_encodings(rec: ConverterRecord) -> dict[str, str]:
    value = rec.value("input_encoding")
    out: dict[str, str] = {}
    if isinstance(value, list | tuple):
        for entry in value:
            if isinstance(entry, list | tuple) and len(entry) >= 2:
                out[str(entry[0])] = str(entry[1])
    return out


def compare(rec: ConverterRecord, export: ExportSpec, input_list: Path | None,
            base: Path) -> list[Finding]:
    """The contract findings for one record (``base``: where relative recorded paths
    are resolved, the converter's working folder)."""
    from qnn_ci.sdk.record import same_value

    q = export.quantization
    findings: list[Finding] = []
    cut_off: list[str] = []       # asked keys a truncated record does not reach

    def mismatch(key: str, asked: Any, extra: str = "") -> None:
        findings.append(Finding(f"contract.{key}",
                                f"{key}: asked {asked}, converter recorded "
                                f"{_show(rec.raw_value(key))}{extra}", Severity.ERROR, key))

    def reached(key: str) -> bool:
        """False (and noted) for a key a cut-off record may have lost."""
        if rec.has(key) or not rec.truncated:
            return True
        cut_off.append(key)
        return False

    def check(key: str, asked: Any) -> None:
        if not reached(key):
            return
        if not rec.has(key):
            findings.append(Finding("contract.unrecorded", f"{key}: asked {asked}, but this "
                                    f"SDK's record does not list it", Severity.WARNING, key))
        elif not same_value(asked, rec.value(key)):
            mismatch(key, asked)

    check("act_bitwidth", q.act_bitwidth)
    check("weights_bitwidth", q.weights_bitwidth)
    check("bias_bitwidth", q.bias_bitwidth)
    check("float_fallback", q.float_fallback)
    if q.float_bitwidth is not None:
        check("float_bitwidth", q.float_bitwidth)
    check("use_per_channel_quantization", q.per_channel)
    if q.act_calibration:
        check("act_quantizer_calibration", q.act_calibration)
    if q.param_calibration:
        check("param_quantizer_calibration", q.param_calibration)
    if q.percentile is not None:
        check("percentile_calibration_value", q.percentile)

    recorded_list = rec.raw_value("input_list")
    if not reached("input_list"):
        pass
    elif input_list is None:
        if recorded_list not in (None, "", "None"):
            mismatch("input_list", "none")
    elif recorded_list in (None, "", "None"):
        mismatch("input_list", str(input_list),
                 " (no calibration: the converter skipped quantization)")
    elif _realpath(recorded_list, base) != os.path.realpath(input_list):
        mismatch("input_list", str(input_list))

    recorded_ov = rec.raw_value("quantization_overrides")
    if not reached("quantization_overrides"):
        pass
    elif q.overrides is None:
        if recorded_ov not in (None, "", "None"):
            mismatch("quantization_overrides", "none")
    elif recorded_ov in (None, "", "None"):
        mismatch("quantization_overrides", str(q.overrides),
                 " (the AIMET encodings were not applied)")
    elif _realpath(recorded_ov, base) != os.path.realpath(q.overrides):
        mismatch("quantization_overrides", str(q.overrides))

    want = expected_input_encodings(export) if reached("input_encoding") else {}
    got = _recorded_encodings(rec)
    for name, enc in want.items():
        if got.get(name) != enc:
            mismatch("input_encoding", f"[{name!r}, {enc!r}]",
                     "" if name not in got else f" ({name} recorded as {got[name]!r})")

    if rec.truncated:
        missing = f" (not checked: {', '.join(cut_off)})" if cut_off else ""
        name = Path(rec.source).name if rec.source else "the record"
        findings.insert(0, Finding(
            "contract.truncated", f"{name}: {rec.truncated}: the file is truncated or edited, "
            f"so the contract check is incomplete{missing}; re-run the conversion",
            Severity.ERROR, name))
    for c in rec.conflicts:
        findings.append(Finding("contract.alias_conflict", c.message(), Severity.WARNING,
                                c.canonical))
    for p in rec.problems:
        findings.append(Finding("contract.record", p, Severity.WARNING))
    return findings


class ContractStage(Stage):
    name = "contract"
    settings = ("inputs", "model", "quantization", "target")
    needs = ("convert", "calibration")
    marker = "qnn_sdk"
    route = "classic"

    def run(self, ctx: StageContext) -> StageResult:
        from qnn_ci.sdk.record import ARGS_OF_INTEREST, read_record

        convert = ctx.upstream["convert"]
        calibration = ctx.upstream.get("calibration")
        rec: ConverterRecord | None = None
        errors: list[str] = []
        for key in ("cpp", "net_json"):
            path = convert.artefacts.get(key)
            if not path:
                continue
            try:
                rec = read_record(Path(path))
                break
            except UserError as exc:
                errors.append(exc.oneline())
        if rec is None:
            msg = "no recorded converter arguments to check: " + ("; ".join(errors) or
                                                                  "convert listed no cpp/net_json")
            return StageResult(self.name, Status.FAILED, msg,
                               [Finding("contract.no_record", msg, Severity.ERROR)])
        input_list = None
        if calibration is not None and calibration.artefacts.get("input_list"):
            input_list = Path(calibration.artefacts["input_list"])
        base = Path(rec.source or ".").resolve().parent
        findings = compare(rec, ctx.export, input_list, base)
        findings += integer_outcome(ctx.export, convert.artefacts, rec)
        errors_ = [f for f in findings if f.severity == Severity.ERROR]
        if errors_ and errors_[0].check == "contract.truncated":
            summary = errors_[0].message
        elif errors_:
            summary = f"{len(errors_)} setting(s) did not take effect: " + \
                      errors_[0].message
        else:
            checked = len([k for k in ARGS_OF_INTEREST if rec.has(k)])
            summary = f"recorded arguments match the manifest ({checked} checked keys present)"
        props: dict[str, Any] = {k: rec.args[k] for k in ARGS_OF_INTEREST if k in rec.args}
        props["sdk_version"] = rec.sdk_version or ""
        props["sdk_version_source"] = rec.sdk_version_source or ""
        report = ctx.workdir / "contract.json"
        report.write_text(json.dumps({"record": rec.to_dict(),
                                      "findings": [f.to_dict() for f in findings]},
                                     indent=2), "utf-8")
        return StageResult(
            self.name, Status.FAILED if errors_ else Status.PASSED, summary, findings,
            properties=props, artefacts={"report": str(report)},
            data={"sdk_version": rec.sdk_version, "args": dict(rec.args)},
        )
