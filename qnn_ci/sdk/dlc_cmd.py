"""The DLC route's command lines: ``qairt-converter`` (ONNX -> float DLC, AIMET
encodings attached) and ``qairt-quantizer`` (float DLC -> quantized DLC, calibrated on
the calibration stage's list), every flag spelled the way this SDK's tool lists it.

The spellings move between SDK eras (``--input_dim`` became
``--source_model_input_shape``; old quantizers spell ``--act_bw``): the tables are
``qnn_ci.tables.DLC_CONVERTER_FLAGS`` / ``DLC_QUANTIZER_FLAGS`` (newest first). Each
tool's ``--help`` is read once per SDK, as the classic converter's is
(``qnn_ci.sdk.converter_cmd.probe_help``), and the first spelling it lists is used;
a setting whose flag it does not list is refused before anything runs, naming the
manifest key. Where the help cannot be read, the newest spelling is passed and a
refusal by the tool itself (argparse: ``unrecognized arguments``) is named by
``unknown_flag_text``.

Integer and bool graph inputs stay unquantized as on the classic route: their dtype
goes to the converter (``--source_model_input_datatype`` / ``--input_dtype``) and their
names to ``--preserve_io_datatype`` of the converter and of the quantizer, wherever the
tool lists it (the quantizer-era counterpart of the classic ``--input_encoding NAME
other``); where neither does, it cannot be said with a flag, which
``DlcCommand.notes`` says (``dlc_contract`` checks the outcome either way).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.errors import UserError
from qnn_ci.sdk.converter_cmd import ConverterHelp, command_inputs, dtype_name
from qnn_ci.tables import (
    DLC_CONVERTER_FLAGS,
    DLC_FLAG_KEYS,
    DLC_QUANTIZER_FLAGS,
    is_integer_input_dtype,
)

_UNRECOGNIZED = re.compile(r"unrecognized arguments?:\s*(.*)", re.I)
_BAD_OPTION = re.compile(r"(?:no such option|unknown (?:option|argument|flag))\s*:?\s*"
                         r"['\"]?(--?[A-Za-z][\w-]*)", re.I)


@dataclass
class DlcCommand:
    """A command line and what it could not say (each note one line)."""

    argv: list[str]
    notes: list[str] = field(default_factory=list)       # worth saying
    warnings: list[str] = field(default_factory=list)    # a setting it could not express
    preserved: list[str] = field(default_factory=list)   # inputs kept in their dtype


class _Spell:
    """Spell a setting's flag the way this tool lists it; refuse what it does not."""

    def __init__(self, tool: str, table: Mapping[str, tuple[str, ...]],
                 help_: ConverterHelp | None, export: ExportSpec) -> None:
        self.tool, self.table, self.export = tool, table, export
        self.flags = help_.flags if help_ is not None else None

    def find(self, setting: str) -> str | None:
        spellings = self.table[setting]
        if self.flags is None:
            return spellings[0]
        return next((s for s in spellings if s in self.flags), None)

    def get(self, setting: str, name: str = "") -> str:
        found = self.find(setting)
        if found is not None:
            return found
        spellings = self.table[setting]
        key = DLC_FLAG_KEYS[setting].format(name=name)
        raise UserError(
            f"this SDK's {self.tool} lists none of {', '.join(spellings)} in --help; remove "
            f"{key} or use an SDK whose {self.tool} has it",
            file=self.export.manifest, line=self.export.line, key=key)


def preserved_inputs(export: ExportSpec,
                     graph_inputs: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The inputs the quantizer must leave in their own data type: integer and bool
    inputs, and those the manifest gives ``encoding: other``."""
    return [i.name for i in command_inputs(export, graph_inputs)
            if is_integer_input_dtype(i.dtype or "") or i.encoding == "other"]


def build_dlc_convert_argv(export: ExportSpec, model: Path, out_dlc: Path,
                           help_: ConverterHelp | None, *, tool: str | Path,
                           graph_inputs: Sequence[Mapping[str, Any]] | None = None
                           ) -> DlcCommand:
    """``qairt-converter`` for ``export``: the pinned model, its input dims, integer
    input dtypes, explicit input encodings, ``dlc:`` layouts and ``preserve_io``, the
    AIMET encodings; every path absolute."""
    f = _Spell("qairt-converter", DLC_CONVERTER_FLAGS, help_, export)
    q = export.quantization
    cmd = DlcCommand([str(tool), f.get("input_network"), str(Path(model).resolve())])
    inputs = command_inputs(export, graph_inputs)
    for inp in inputs:
        if inp.dims is not None:
            cmd.argv += [f.get("input_dim", inp.name), inp.name,
                         ",".join(str(d) for d in inp.dims)]
    for inp in inputs:
        if is_integer_input_dtype(inp.dtype or ""):
            flag = f.find("input_dtype")
            if flag is not None:
                cmd.argv += [flag, inp.name, dtype_name(inp.dtype or "")]
        if inp.encoding and inp.encoding != "other":
            cmd.argv += [f.get("input_encoding", inp.name), inp.name, inp.encoding]
    keep = preserved_inputs(export, graph_inputs)
    flag = f.find("preserve_io_datatype") if keep else None
    if flag is not None:
        cmd.argv += [flag, *keep]
        cmd.preserved = keep
    for name, layout in export.dlc.input_layout.items():
        flag = f.get("input_layout", name)
        cmd.argv += [flag, name, layout]
        if flag != DLC_CONVERTER_FLAGS["input_layout"][0]:
            desired = f.find("desired_input_layout")     # keep it so on the device
            if desired is not None:
                cmd.argv += [desired, name, layout]
            else:
                cmd.warnings.append(f"this SDK's qairt-converter has {flag} but no "
                                    f"--desired_input_layout: {name} is read as {layout}, "
                                    "its layout on the device is the converter's choice")
    if export.dlc.preserve_io:
        flag = f.get("preserve_io")
        cmd.argv.append(flag)
        if flag != DLC_CONVERTER_FLAGS["preserve_io"][0]:
            cmd.notes.append(f"this SDK's qairt-converter has {flag} only: I/O data types "
                             "are kept, layouts follow dlc.input_layout")
    if q.overrides is not None:
        if not Path(q.overrides).is_file():
            raise UserError(f"encodings file {q.overrides} does not exist",
                            file=export.manifest, line=export.line,
                            key="quantization.overrides")
        cmd.argv += [f.get("quantization_overrides"), str(Path(q.overrides).resolve())]
    if q.float_bitwidth is not None:
        flag = f.find("float_bitwidth")        # the quantizer's is the one that counts
        if flag is not None:
            cmd.argv += [flag, str(q.float_bitwidth)]
    cmd.argv += [f.get("output_path"), str(Path(out_dlc).resolve())]
    return cmd


def build_dlc_quantize_argv(export: ExportSpec, in_dlc: Path, out_dlc: Path,
                            input_list: Path | None, help_: ConverterHelp | None, *,
                            tool: str | Path,
                            graph_inputs: Sequence[Mapping[str, Any]] | None = None,
                            kept_by_converter: Sequence[str] = ()) -> DlcCommand:
    """``qairt-quantizer`` for ``export``: the converter's DLC, the calibration list, the
    ``quantization:`` settings of the classic route, the inputs kept unquantized
    (``kept_by_converter``: those the converter was told to keep already)."""
    f = _Spell("qairt-quantizer", DLC_QUANTIZER_FLAGS, help_, export)
    q = export.quantization
    cmd = DlcCommand([str(tool), f.get("input_dlc"), str(Path(in_dlc).resolve()),
                      f.get("output_dlc"), str(Path(out_dlc).resolve())])
    if q.float_fallback:
        # the quantizer refuses --input_list with --float_fallback: the AIMET encodings
        # set the ranges they name, the rest stays float
        cmd.argv.append(f.get("float_fallback"))
        cmd.notes.append("quantization.float_fallback: qairt-quantizer takes no input list "
                         "with --float_fallback, so the calibration samples are not used: "
                         "tensors without AIMET encodings stay float")
    elif input_list is None:
        raise UserError("qairt-quantizer needs a calibration input list (the calibration "
                        "stage made none)", file=export.manifest, line=export.line,
                        key="calibration")
    else:
        cmd.argv += [f.get("input_list"), str(Path(input_list).resolve())]
    cmd.argv += [f.get("act_bitwidth"), str(q.act_bitwidth),
                 f.get("weights_bitwidth"), str(q.weights_bitwidth),
                 f.get("bias_bitwidth"), str(q.bias_bitwidth)]
    if q.per_channel:
        cmd.argv.append(f.get("use_per_channel_quantization"))
    if q.act_calibration:
        cmd.argv += [f.get("act_quantizer_calibration"), q.act_calibration]
    if q.param_calibration:
        cmd.argv += [f.get("param_quantizer_calibration"), q.param_calibration]
    if q.float_bitwidth is not None:
        cmd.argv += [f.get("float_bitwidth"), str(q.float_bitwidth)]
    if q.percentile is not None:
        cmd.argv += [f.get("percentile_calibration_value"), f"{q.percentile:g}"]
    keep = preserved_inputs(export, graph_inputs)
    flag = f.find("preserve_io_datatype") if keep else None
    if flag is not None:
        cmd.argv += [flag, *keep]
        cmd.preserved = keep
    elif keep:
        rest = [k for k in keep if k not in kept_by_converter]
        if rest:
            cmd.warnings.append(
                f"neither tool of this SDK lists --preserve_io_datatype: input(s) "
                f"{', '.join(rest)} cannot be kept unquantized by a flag (the classic route's "
                "--input_encoding NAME other has no counterpart here); dlc_contract checks "
                "what the quantizer made of them")
        else:
            cmd.notes.append(
                f"this SDK's qairt-quantizer lists no --preserve_io_datatype: input(s) "
                f"{', '.join(keep)} were kept by qairt-converter's; dlc_contract checks they "
                "stayed integer")
    return cmd


def unknown_flags(output: str) -> list[str]:
    """The flags a tool refused as unknown (argparse: ``unrecognized arguments: --x 1``)."""
    found: list[str] = []
    for m in _UNRECOGNIZED.finditer(output):
        found += [t for t in m.group(1).split() if re.match(r"--?[A-Za-z]", t)]
    found += [m.group(1) for m in _BAD_OPTION.finditer(output)]
    return list(dict.fromkeys(found))


def unknown_flag_text(tool: str, flags: Sequence[str], sdk_version: str | None,
                      help_read: bool) -> str:
    """One line: which setting a refused flag carries, its manifest key, and the
    spellings other eras use."""
    table = DLC_CONVERTER_FLAGS if tool == "qairt-converter" else DLC_QUANTIZER_FLAGS
    flag = flags[0]
    setting = next((k for k, v in table.items() if flag in v), None)
    era = f"SDK {sdk_version}" if sdk_version else "this SDK"
    why = "" if help_read else " (its --help could not be read, so the newest spelling was " \
        "passed)"
    if setting is None:
        return (f"{tool} of {era} does not know {flag} (unrecognized arguments){why}; "
                "use an SDK whose tool has it")
    key = DLC_FLAG_KEYS[setting].format(name="<input>")
    others = [s for s in table[setting] if s != flag]
    other = f"; other eras spell it {' or '.join(others)}" if others else ""
    more = f" (and {len(flags) - 1} more)" if len(flags) > 1 else ""
    return (f"{tool} of {era} does not know {flag}{more} (unrecognized arguments), the flag "
            f"for {key}{why}{other}; remove {key} or use an SDK whose {tool} lists it")
