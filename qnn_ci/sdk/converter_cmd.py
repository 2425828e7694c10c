"""Build the ``qnn-onnx-converter`` command line for an export.

Flags drift between SDK majors: up to about 2.18 only the short bitwidth
spellings (``--act_bw``) exist, from about 2.25 the long ones
(``--act_bitwidth``) do and the short ones are aliases. So the converter's
``--help`` is probed once per SDK (cached in memory and on disk) and every flag
we pass is spelled the way that SDK lists it. A flag the SDK does not list is
refused before anything runs, naming the manifest key that asked for it.
Integer and bool graph inputs get ``--input_encoding NAME other`` and, where the
SDK lists it, ``--input_dtype NAME <dtype>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.errors import UserError
from qnn_ci.sdk.locate import CONVERTER, Sdk
from qnn_ci.sdk.toolrun import ToolRunError, run_tool
from qnn_ci.tables import CONVERTER_CANONICAL_TO_ALIAS, get_soc, is_integer_input_dtype

log = logging.getLogger(__name__)

_FLAG_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_USAGE_FLAG_RE = re.compile(r"[\[|]\s*(--?[A-Za-z][\w-]*)")
_QAISW_RE = re.compile(r"qaisw-v(\d+\.\d+\.\d+)")
_HELP_COLUMN = 20      # argparse puts option invocations at indent 2, help text at ~24

_MEMORY_CACHE: dict[str, ConverterHelp] = {}
_FAILED_PROBES: dict[str, ToolRunError] = {}


@dataclass(frozen=True)
class ConverterHelp:
    """What an SDK's converter ``--help`` lists: its flags, the text's hash, a version."""

    flags: frozenset[str]
    help_hash: str          # sha256 of the help text
    version: str | None     # a version the help text reveals, if any

    def spelling(self, *candidates: str) -> str | None:
        return next((c for c in candidates if c in self.flags), None)


def parse_help_flags(text: str) -> set[str]:
    """Every option an argparse ``--help`` text defines (usage block + option lines).

    Flags mentioned in the prose of a description are ignored: option lines are
    the ones whose first character is a dash at a small indent.
    """
    flags: set[str] = set()
    in_usage = False
    for raw in text.splitlines():
        line = raw.expandtabs()
        stripped = line.strip()
        if stripped.lower().startswith("usage:"):
            in_usage = True
        elif in_usage and not stripped:
            in_usage = False
        if in_usage:
            flags.update(_USAGE_FLAG_RE.findall(line))
            continue
        indent = len(line) - len(line.lstrip())
        if not stripped.startswith("-") or indent >= _HELP_COLUMN:
            continue
        invocation = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
        for part in invocation.split(", "):
            match = _FLAG_RE.match(part.strip())
            if match:
                flags.add(match.group(1))
    return flags


def _cache_key(sdk: Sdk, tool: str = CONVERTER) -> str:
    path = sdk.tool(tool)
    try:
        st = path.stat()
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    base = f"{sdk.root}|{sdk.version or '?'}|{stamp}"
    return base if tool == CONVERTER else f"{tool}|{base}"


def probe_converter(sdk: Sdk, cache_dir: Path, *, timeout: float = 300.0) -> ConverterHelp:
    """``qnn-onnx-converter --help`` -> the flags it accepts, once per SDK (``probe_help``)."""
    return probe_help(sdk, CONVERTER, cache_dir, timeout=timeout, required="--input_network")


def probe_help(sdk: Sdk, tool: str, cache_dir: Path, *, timeout: float = 300.0,
               required: str) -> ConverterHelp:
    """``<tool> --help`` -> the flags it accepts, once per SDK and tool.

    Cached in memory and as JSON under ``cache_dir`` (keyed by SDK root, version
    and the tool file's size and mtime). ToolError when ``--help`` fails or does not
    list ``required`` (then it is not that tool's help).
    """
    key = _cache_key(sdk, tool)
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    if key in _FAILED_PROBES:
        # Not re-run in this process (it may have taken the whole timeout, and every
        # converter stage asks twice); the next run retries.
        raise _FAILED_PROBES[key]
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    prefix = "converter" if tool == CONVERTER else tool
    cache_dir = Path(cache_dir).resolve()
    cache_file = cache_dir / f"{prefix}-help-{digest}.json"
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
        if data.get("key") == key:
            found = ConverterHelp(frozenset(data["flags"]), data["help_hash"], data.get("version"))
            _MEMORY_CACHE[key] = found
            return found
    except (OSError, ValueError, KeyError, TypeError):
        pass
    run = run_tool([str(sdk.tool(tool)), "--help"], sdk=sdk, workdir=cache_dir,
                   log_name=f"{prefix}-help-{digest}", timeout=timeout)
    flags = parse_help_flags(run.output)
    if run.exit_code != 0 or required not in flags:
        error = ToolRunError(f"could not read the flags of {tool} --help "
                             f"({sdk.describe()}):\n{run.describe()}", run)
        _FAILED_PROBES[key] = error
        raise error
    version_match = _QAISW_RE.search(run.output)
    found = ConverterHelp(frozenset(flags), hashlib.sha256(run.output.encode()).hexdigest(),
                          version_match.group(1) if version_match else None)
    tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, "flags": sorted(found.flags),
                               "help_hash": found.help_hash, "version": found.version},
                              indent=1), encoding="utf-8")
    os.replace(tmp, cache_file)
    _MEMORY_CACHE[key] = found
    return found


def clear_memory_cache() -> None:
    _MEMORY_CACHE.clear()
    _FAILED_PROBES.clear()


# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandInput:
    """One input of a converter command line: its name, dims, dtype and input encoding."""

    name: str
    dims: tuple[int, ...] | None
    dtype: str | None
    encoding: str | None


def dtype_name(dtype: str) -> str:
    """``tensor(int64)`` / ``INT64`` -> ``int64``: the numpy name ``--input_dtype`` takes."""
    text = str(dtype).strip().lower()
    if text.startswith("tensor(") and text.endswith(")"):
        text = text[7:-1]
    return text


def _static(shape: Any) -> tuple[int, ...] | None:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        return None
    return dims if dims and all(d > 0 for d in dims) else None


def command_inputs(export: ExportSpec, graph_inputs: Sequence[Mapping[str, Any]] | None
                   ) -> list[CommandInput]:
    """The pinned model's inputs (``graph_inputs``, from static_shapes) with what the
    manifest says of them; manifest inputs the model list lacks come last."""
    out: list[CommandInput] = []
    seen: set[str] = set()
    for gi in graph_inputs or ():
        name = str(gi["name"])
        spec = export.inputs.get(name)
        dims = _static(gi.get("shape")) or (spec.shape if spec else None)
        dtype = (spec.dtype if spec and spec.dtype else None) or gi.get("dtype")
        out.append(CommandInput(name, dims, dtype, spec.encoding if spec else None))
        seen.add(name)
    for name, spec in export.inputs.items():
        if name not in seen:
            out.append(CommandInput(name, spec.shape, spec.dtype, spec.encoding))
    return out


class _Flags:
    """Spell flags the way this SDK lists them; refuse the ones it does not."""

    def __init__(self, flags: set[str] | frozenset[str], export: ExportSpec) -> None:
        self.flags = flags
        self.export = export

    def get(self, *spellings: str, key: str) -> str:
        for spelling in spellings:
            if spelling in self.flags:
                return spelling
        raise UserError(
            f"this SDK's {CONVERTER} does not list {spellings[0]} in --help; "
            f"remove the setting or use an SDK whose converter has it",
            file=self.export.manifest, line=self.export.line, key=key)

    def bitwidth(self, canonical: str, key: str) -> str:
        alias = CONVERTER_CANONICAL_TO_ALIAS.get(canonical)
        spellings = [f"--{canonical}"] + ([f"--{alias}"] if alias else [])
        return self.get(*spellings, key=key)


def check_float_fallback(export: ExportSpec) -> None:
    """Refuse float fallback (or FP16 float ops) for a SoC whose HTP has no FP16."""
    q = export.quantization
    asked = ("quantization.float_fallback" if q.float_fallback
             else "quantization.float_bitwidth" if q.float_bitwidth == 16 else None)
    if asked is None:
        return
    if not export.target.soc:
        log.warning("%s: %s is set but target.soc is not: cannot check that the HTP "
                    "executes FP16", export.name, asked)
        return
    soc = get_soc(export.target.soc, file=export.manifest, line=export.line, key="target.soc")
    if soc.fp16:
        return
    raise UserError(
        f"refused for {soc.name}: HTP {soc.arch_name} has no FP16, so ops left in float "
        f"become FP16 ops and qnn-context-binary-generator aborts (exit 134); convert "
        f"all-quantized (remove {asked}) and make the graph quantizable",
        file=export.manifest, line=export.line, key=asked)


def build_convert_argv(export: ExportSpec, model: Path, input_list: Path | None, out_cpp: Path,
                       flags: set[str] | frozenset[str], *, dry_run: bool = False,
                       graph_inputs: Sequence[Mapping[str, Any]] | None = None,
                       tool: str | Path = CONVERTER) -> list[str]:
    """The converter argv for ``export`` (every path absolute).

    ``graph_inputs`` are the pinned model's inputs ({"name", "dtype", "shape"}, from
    the static_shapes stage); manifest inputs fill in what they do not say. ``tool``
    is argv[0]: the stages pass ``Sdk.tool(CONVERTER)``, the absolute path
    ``locate`` checked, so no other converter on ``PATH`` can run instead.
    """
    f = _Flags(flags, export)
    q = export.quantization
    if not dry_run:
        check_float_fallback(export)
    argv = [str(tool), f.get("--input_network", "-i", key="model"),
            str(Path(model).resolve())]
    inputs = command_inputs(export, graph_inputs)
    for inp in inputs:
        if inp.dims is None:
            log.warning("%s: input %s has no static shape to pass with --input_dim",
                        export.name, inp.name)
            continue
        argv += [f.get("--input_dim", "-d", key=f"inputs.{inp.name}.shape"), inp.name,
                 ",".join(str(d) for d in inp.dims)]
    for inp in inputs:
        integer = is_integer_input_dtype(inp.dtype or "")
        encoding = inp.encoding or ("other" if integer else None)
        if integer and "--input_dtype" in flags:
            # Both where the SDK lists them: a real 2.33 run kept an int32 input with
            # --input_dtype; the outcome is checked by the contract stage either way.
            argv += ["--input_dtype", inp.name, dtype_name(inp.dtype or "")]
        if encoding:
            argv += [f.get("--input_encoding", key=f"inputs.{inp.name}.encoding"),
                     inp.name, encoding]
    argv += [f.get("--output_path", "-o", key="model"), str(Path(out_cpp).resolve())]
    if dry_run:
        argv.append(f.get("--dry_run", key="dry_run"))
        return argv
    if q.overrides is not None:
        if input_list is None:
            raise UserError("AIMET encodings need a calibration input list too: "
                            "--quantization_overrides is used together with --input_list",
                            file=export.manifest, line=export.line, key="calibration")
        if not Path(q.overrides).is_file():
            raise UserError(f"encodings file {q.overrides} does not exist",
                            file=export.manifest, line=export.line,
                            key="quantization.overrides")
    if input_list is None:
        log.warning("%s: no calibration input list: the converter will skip quantization "
                    "and the model stays float", export.name)
    else:
        argv += [f.get("--input_list", key="calibration"), str(Path(input_list).resolve())]
        if q.overrides is not None:
            argv += [f.get("--quantization_overrides", key="quantization.overrides"),
                     str(Path(q.overrides).resolve())]
        argv += [f.bitwidth("act_bitwidth", "quantization.act_bitwidth"), str(q.act_bitwidth),
                 f.bitwidth("weights_bitwidth", "quantization.weights_bitwidth"),
                 str(q.weights_bitwidth),
                 f.bitwidth("bias_bitwidth", "quantization.bias_bitwidth"), str(q.bias_bitwidth)]
        if q.per_channel:
            argv.append(f.get("--use_per_channel_quantization", key="quantization.per_channel"))
        if q.act_calibration:
            argv += [f.get("--act_quantizer_calibration", key="quantization.act_calibration"),
                     q.act_calibration]
        if q.param_calibration:
            argv += [f.get("--param_quantizer_calibration",
                           key="quantization.param_calibration"), q.param_calibration]
        if q.percentile is not None:
            argv += [f.get("--percentile_calibration_value", key="quantization.percentile"),
                     f"{q.percentile:g}"]
    if q.float_fallback:
        argv.append(f.get("--float_fallback", key="quantization.float_fallback"))
    if q.float_bitwidth is not None:
        argv += [f.bitwidth("float_bitwidth", "quantization.float_bitwidth"),
                 str(q.float_bitwidth)]
    return argv
