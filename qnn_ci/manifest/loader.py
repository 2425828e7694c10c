"""Read, validate and resolve a manifest (`qnn-ci.yaml`) into ``ExportSpec``s.

Every error is a ``UserError`` naming the file, the line and the key path, and
what to do: unknown keys (with a did-you-mean), wrong types, missing files,
duplicate export names, unknown SoCs, cycles in ``from:`` chains, and shapes
whose rank disagrees with the model. Hostile input (see ``qnn_ci.manifest.yaml_lines`` for
the YAML side) gets the same one line: unusable paths, numbers that are NaN, do
not fit the input's dtype or are infinite where a finite one is needed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import re
import reprlib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.engine.spec import (
    DEFAULT_ORIGINAL_COSINE,
    CalibrationSpec,
    DiagnosisSpec,
    DlcSpec,
    ExportSpec,
    InputSpec,
    LatencySpec,
    OriginalSpec,
    QuantizationSpec,
    RegressionSpec,
    SdkSpec,
    SimSpec,
    TargetSpec,
    Thresholds,
)
from qnn_ci.errors import UserError
from qnn_ci.manifest.defaults import MANIFEST_NAMES
from qnn_ci.manifest.htp_config import parse_htp_config, unknown_key_text
from qnn_ci.manifest.yaml_lines import KeyPath, dotted, line_of, load_yaml_with_lines
from qnn_ci.tables import DEFAULT_COSINE, DEFAULT_ROUTE, find_soc, get_soc
from qnn_ci.util.memo import Memo, code_digest, memo_key, package_sources

if TYPE_CHECKING:
    import jsonschema

    from qnn_ci.model.tensors import ModelSignature

log = logging.getLogger(__name__)

BOARDS_FILE = "qnn-boards.yaml"
BASELINES_FILE = "qnn-baselines.yaml"
METRICS = ("cosine", "snr", "psnr", "max_abs", "mean_abs")


INT64 = 1 << 63
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 4
_REPR.maxlevel = 2


def _short(value: Any, limit: int = 80) -> str:
    """A repr short enough for a one-line message."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _names(names: Any) -> str:
    """Tensor names (from a model file: any text) for a one-line message."""
    return ", ".join(_show(n) for n in names) or "(none)"


def _show(path: Path | str) -> str:
    """A path for a message: as is, or its repr when it holds line breaks or other
    unprintable characters (the message must stay one line)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


@cache
def schema() -> dict[str, Any]:
    """The manifest's JSON Schema, as published in the package."""
    schema_file = resources.files("qnn_ci.manifest").joinpath("schema/qnn-ci.schema.json")
    text = schema_file.read_text("utf-8")
    return json.loads(text)


def _is_integer(_checker: Any, instance: Any) -> bool:
    # JSON Schema counts 4.0 as an integer; samples: 4.0 would reach range() as a float.
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _validator() -> Any:
    import jsonschema  # not at import: `import qnn_ci.plugin` stays light

    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(
        base, type_checker=base.TYPE_CHECKER.redefine("integer", _is_integer))
    return strict(schema())


@dataclass
class Manifest:
    """A loaded qnn-ci.yaml: its exports, boards and each key's line."""

    path: Path
    exports: list[ExportSpec]
    boards: dict[str, Any] = field(default_factory=dict)   # name -> BoardConfig
    lines: dict[KeyPath, int] = field(default_factory=dict)
    baselines: Path | None = None      # qnn-baselines.yaml (default: beside the manifest)

    def export(self, name: str) -> ExportSpec:
        for e in self.exports:
            if e.name == name:
                return e
        raise KeyError(name)

    @property
    def by_name(self) -> dict[str, ExportSpec]:
        return {e.name: e for e in self.exports}


class _Ctx:
    def __init__(self, path: Path, lines: dict[KeyPath, int], memo_dir: Path | None = None
                 ) -> None:
        self.path = path
        self.lines = lines
        self.memo_dir = memo_dir

    def outside(self, idx: int, key_path: KeyPath) -> bool:
        """Whether ``key_path`` (of export ``idx``) is written outside that export's
        lines: in `defaults:` or in an anchor merged with `<<:`."""
        line = line_of(self.lines, self.locate(key_path))
        start = self.lines.get(("exports", idx))
        end = self.lines.get(("exports", idx + 1))
        if line is None or start is None:
            return False
        return line < start or (end is not None and end > start and line >= end)

    def locate(self, key_path: KeyPath) -> KeyPath:
        """Where a merged value was written: the export, else `defaults`."""
        if key_path not in self.lines and len(key_path) > 2 and key_path[0] == "exports":
            in_defaults = ("defaults", *key_path[2:])
            if in_defaults in self.lines:
                return in_defaults
        return key_path

    def error(self, key_path: KeyPath, message: str) -> UserError:
        key_path = self.locate(key_path)
        return UserError(message, file=self.path, line=line_of(self.lines, key_path),
                         key=dotted(key_path) or None)


def _did_you_mean(word: str, choices: list[str]) -> str:
    import difflib  # only for a misspelt key

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe_schema_error(err: jsonschema.ValidationError) -> tuple[KeyPath, str]:
    path: KeyPath = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = list(err.schema.get("properties", {}))
        patterns = list(err.schema.get("patternProperties", {}))
        extra = [k for k in err.instance if k not in allowed
                 and not any(re.search(p, str(k)) for p in patterns)]
        if extra:
            key = str(extra[0])
            if path and path[-1] == "htp_config":    # the SDK would not say a word
                return (*path, key), unknown_key_text(key)
            hint = _did_you_mean(key, allowed)
            also = "".join(f", {p.lstrip('^')}* (anchors)" for p in patterns)
            return (*path, key), (f"unknown key {_short(key)}{hint}; allowed: "
                                  f"{', '.join(allowed)}{also}")
    if err.validator == "required":
        return path, str(err.message).replace("is a required property", "is required")
    if err.validator == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return path, f"expected {want}, got {type(err.instance).__name__} {_short(err.instance)}"
    if err.validator == "maxLength" and path and path[-1] == "name":
        return path, (f"export name {_short(err.instance)} has {len(err.instance)} characters, "
                      f"more than {err.validator_value}: it names the work folder "
                      "<workdir>/<name>/<stage>/ and must leave room for the files in it; "
                      "shorten it")
    if err.validator == "maxItems" and isinstance(err.instance, list):
        return path, (f"{len(err.instance)} entries, more than the {err.validator_value} "
                      "allowed here: split the manifest")
    if err.validator == "pattern":
        if path and path[-1] == "generator":
            return path, (f"{_short(err.instance)} is not a generator reference: write "
                          "package.module:function (e.g. calib.samples:batches)")
        if path and path[-1] == "name":
            return path, (f"export name {_short(err.instance)} may use letters, digits, '_', '.' "
                          "and '-', starting with a letter or digit")
    if err.validator == "enum":
        hint = _did_you_mean(err.instance, [str(v) for v in err.validator_value]) \
            if isinstance(err.instance, str) else ""
        return path, f"{_short(err.instance)} is not one of {err.validator_value}{hint}"
    if err.validator == "oneOf" and path and path[-1] == "from":
        return path, "expected an export name or {export: NAME, outputs: {upstream: input}}"
    message = str(err.message)
    if len(message) > 200:   # jsonschema quotes the whole value
        message = message.replace(repr(err.instance), _short(err.instance))
    return path, message


def _canonical(value: Any, out: list[str]) -> bool:
    """Append a type-tagged, unambiguous text of ``value`` (what the schema sees: 4 and
    4.0, 1 and true differ) to ``out``; False for a type this does not know."""
    if isinstance(value, dict):
        out.append(f"{{{len(value)}")
        return all(_canonical(k, out) and _canonical(v, out) for k, v in value.items())
    if isinstance(value, list):
        out.append(f"[{len(value)}")
        return all(_canonical(v, out) for v in value)
    if value is None or type(value) in (bool, int, float, str):
        text = repr(value)
        out.append(f"{type(value).__name__}{len(text)}:{text}")
        return True
    return False


def _schema_code() -> str:
    """The code that decides "valid": this module, the schema, jsonschema's source."""
    jsonschema_files = package_sources("jsonschema")
    if not jsonschema_files:
        return ""
    here = Path(__file__).resolve().parent
    return code_digest((Path(__file__).resolve(), here / "schema" / "qnn-ci.schema.json",
                        *jsonschema_files))


def _schema_memo_key(data: Any) -> str | None:
    """The memo key of "``data`` passed the schema", None when it cannot be keyed."""
    parts: list[str] = []
    code = _schema_code()
    if not code or not _canonical(data, parts):
        return None
    return memo_key("schema", "1", code, "\n".join(parts))


def _validate(ctx: _Ctx, data: Any) -> None:
    if not isinstance(data, dict):
        raise UserError("a manifest is a mapping with `exports:` (and optional `defaults:`)",
                        file=ctx.path, line=1)
    # A cached re-run of an unchanged manifest need not import jsonschema: a document
    # that passed this exact schema check before (same content, same code) passes now.
    memo = Memo(ctx.memo_dir)
    key = _schema_memo_key(data) if ctx.memo_dir is not None else None
    if key is None or memo.get("schema", key) != "ok":
        _schema_check(ctx, data)
        if key is not None:
            memo.put("schema", key, "ok")
    _check_numbers(ctx, data, ())


def _schema_check(ctx: _Ctx, data: dict[str, Any]) -> None:
    errors = sorted(_validator().iter_errors(data), key=lambda e: (len(e.absolute_path),
                                                                 list(map(str, e.absolute_path))))
    if errors:
        # A misspelt key also makes a required key "missing": report the typo.
        typos = [e for e in errors if e.validator == "additionalProperties"]
        if typos:
            best = typos[0]
        else:
            from jsonschema.exceptions import best_match

            best = best_match(errors)
        key_path, message = _describe_schema_error(best)
        raise ctx.error(key_path, message)


def _model_signature(ctx: _Ctx, path: Path) -> ModelSignature:
    from qnn_ci.model.signature import signature  # onnx and numpy: only on a memo miss

    return signature(path, ctx.memo_dir)


def _check_numbers(ctx: _Ctx, value: Any, path: KeyPath) -> None:
    """NaN anywhere, infinity outside thresholds and integers beyond int64 pass the
    schema but break the stages: refuse them. Input values are checked against the
    input's dtype later (`_check_value`). The loader bounds size and depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not (k == "value" and len(path) >= 2 and path[-2] == "inputs"):
                _check_numbers(ctx, v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(ctx, v, (*path, i))
    elif isinstance(value, float):
        if math.isnan(value):
            raise ctx.error(path, "is NaN (.nan), which every comparison fails: give a number")
        if math.isinf(value) and "thresholds" not in path:
            raise ctx.error(path, f"is infinite ({value}): give a finite number")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= INT64:
        raise ctx.error(path, f"{_short(value)} is too large (beyond int64): give a smaller "
                              "number")


def _merge(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``, mapping by mapping. Shares unchanged values
    (nothing mutates them) so many exports over large defaults stay cheap."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    return over


def _resolve(ctx: _Ctx, key_path: KeyPath, value: str | None, what: str) -> Path | None:
    """Absolute path: relative to the manifest's folder; ``pkg:PACKAGE/path`` names a
    file inside an installed Python package (models shipped in wheels)."""
    if value is None:
        return None
    try:
        if value.startswith("pkg:"):
            return _in_package(ctx, key_path, value, what)
        p = Path(value).expanduser()
        return (p if p.is_absolute() else ctx.path.parent / p).resolve()
    except RuntimeError as exc:   # ~user without a home, a symlink loop
        todo = "write the full path" if value.startswith("~") else "fix the path"
        raise ctx.error(key_path, f"{what} path {_short(value)}: {str(exc).rstrip('.')}; "
                                  f"{todo}") from None
    except ValueError as exc:     # a NUL byte
        raise ctx.error(key_path, f"{what} path {_short(value)} is not usable ({exc}): "
                                  "fix the path") from None
    except OSError as exc:        # e.g. a name too long for the file system
        raise ctx.error(key_path, f"{what} path {_short(value)}: {exc.strerror or exc}; "
                                  "fix the path") from None


def _in_package(ctx: _Ctx, key_path: KeyPath, value: str, what: str) -> Path:
    package, _, rest = value[4:].partition("/")
    try:
        # find_spec locates the package without running its __init__.
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
    except (ImportError, ValueError) as exc:   # e.g. __main__ has no spec
        raise ctx.error(key_path, f"cannot locate Python package {_short(package)} "
                                  f"({exc}); name an installed package, or give a file "
                                  "path") from None
    if spec is None or not spec.submodule_search_locations:
        raise ctx.error(key_path, f"Python package {_short(package)} is not installed "
                                  f"here (pip install it where qnn-ci runs -- in the GitHub "
                                  f"Action, with its install: input -- or give the {what} "
                                  "as a file path)")
    return (Path(next(iter(spec.submodule_search_locations))) / rest).resolve()


def _check_file(ctx: _Ctx, key_path: KeyPath, path: Path | None, what: str) -> None:
    if path is None:
        return
    try:
        found = path.is_file()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ctx.error(key_path, f"{what} {_show(path)}: {reason}; fix the path") from None
    if not found:
        raise ctx.error(key_path, f"{what} not found: {_show(path)} (paths resolve against "
                                  f"the manifest's folder {_show(ctx.path.parent)})")


def _leaves(value: Any) -> list[Any]:
    """The scalars of a nested list (bounded by the loader's limits)."""
    out: list[Any] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        else:
            out.append(v)
    return out


def _fit_dtype(value: Any, dtype: Any) -> str | None:
    """Why ``value`` (a scalar or nested list) does not fit ``dtype``, else None."""
    import numpy as np

    for v in _leaves(value):
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue   # numpy says what is wrong with these
        if dtype.kind in "iu":
            if isinstance(v, float) and not math.isfinite(v):
                return f"{v} is not finite, so it does not fit {dtype.name}"
            if isinstance(v, float) and not v.is_integer():
                return f"{v} is not a whole number, so it does not fit {dtype.name}"
            info = np.iinfo(dtype)
            if not info.min <= v <= info.max:
                return (f"{_short(v)} does not fit {dtype.name} (from {info.min} to "
                        f"{info.max})")
        elif dtype.kind in "fc" and math.isfinite(v):
            top = float(np.finfo(dtype).max)
            if abs(v) > top:
                return f"{_short(v)} does not fit {dtype.name} (at most {top:g})"
    return None


def _check_value(ctx: _Ctx, key_path: KeyPath, spec: InputSpec,
                 shape: tuple[int | None, ...] | None) -> None:
    import numpy as np

    name = spec.dtype or "float32"
    try:
        dtype = np.dtype(name)
        why = _fit_dtype(spec.value, dtype)
        arr = None if why else np.asarray(spec.value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        why = f"{_short(spec.value)} is not a {name} array ({first})"
        arr = None
    if arr is None:
        raise ctx.error(key_path, f"value of input {_short(spec.name)}: {why}; give values "
                                  f"that fit {name}")
    if shape is not None:
        try:
            np.broadcast_to(arr, tuple(int(d or 0) for d in shape))
        except (ValueError, TypeError, OverflowError):
            raise ctx.error(key_path, f"value of shape {list(arr.shape)} does not fit input "
                                      f"{_short(spec.name)} of shape {list(shape)}") from None


def _check_generator(ctx: _Ctx, key_path: KeyPath, spec: str) -> None:
    """The generator's top-level module can be found (the manifest's folder first),
    without running it: user code runs only when the calibration stage does."""
    top = spec.partition(":")[0].split(".")[0]
    try:
        if (ctx.path.parent / f"{top}.py").is_file() or (ctx.path.parent / top).is_dir():
            return
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError, OSError) as exc:   # e.g. __main__ has no spec
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ctx.error(key_path, f"generator {_short(spec)}: cannot look up module "
                                  f"{_short(top)} ({reason}); name a module in the "
                                  "manifest's folder or an installed one") from None
    if not found:
        raise ctx.error(key_path, f"generator {_short(spec)}: no module {top!r} in the "
                                  f"manifest's folder {_show(ctx.path.parent)} or on sys.path")


def _build_export(ctx: _Ctx, idx: int, raw: dict[str, Any]) -> ExportSpec:
    kp: KeyPath = ("exports", idx)
    name = raw["name"]
    model = _resolve(ctx, (*kp, "model"), raw["model"], "model")
    assert model is not None
    _check_file(ctx, (*kp, "model"), model, "model")

    inputs: dict[str, InputSpec] = {}
    for in_name, spec in (raw.get("inputs") or {}).items():
        inputs[in_name] = InputSpec(
            name=in_name,
            shape=tuple(spec["shape"]) if spec.get("shape") is not None else None,
            dtype=spec.get("dtype"), encoding=spec.get("encoding"), value=spec.get("value"),
            state=bool(spec.get("state", False)))

    try:
        sig = _model_signature(ctx, model)
    except Exception as exc:  # onnx raises many kinds on a broken file
        raise ctx.error((*kp, "model"), f"cannot read ONNX model {_show(model)}: "
                                        f"{str(exc).splitlines()[0] if str(exc) else exc}"
                        ) from None
    declared = sig.inputs
    of_export = f" (export {name!r})" if ctx.outside(idx, (*kp, "inputs")) else ""
    for in_name, spec in inputs.items():
        ikp = (*kp, "inputs", in_name)
        if in_name not in declared:
            hint = _did_you_mean(in_name, list(declared))
            raise ctx.error(ikp, f"model {_show(model.name)}{of_export} has no input {in_name!r}"
                                 f"{hint}; its inputs: {_names(declared)}")
        dims, dtype = declared[in_name]
        if spec.shape is not None and dims is not None:
            if len(dims) != len(spec.shape):
                raise ctx.error((*ikp, "shape"),
                                f"shape {list(spec.shape)} has rank {len(spec.shape)} but model "
                                f"input {in_name!r}{of_export} has rank {len(dims)}")
            fixed = [(i, d, w) for i, (d, w) in enumerate(zip(dims, spec.shape, strict=True))
                     if d is not None and d != w]
            if fixed:
                i, d, w = fixed[0]
                raise ctx.error((*ikp, "shape"),
                                f"dim {i} is {w} but model input {in_name!r}{of_export} fixes "
                                f"it at {d} (model dims {[x or '?' for x in dims]})")
        if spec.dtype is not None and dtype != "?" and spec.dtype != dtype:
            raise ctx.error((*ikp, "dtype"),
                            f"dtype {spec.dtype} disagrees with the model's {dtype} for "
                            f"input {in_name!r}{of_export}")
    # Fill in dtypes from the model so every stage sees them.
    for in_name, (dims, dtype) in declared.items():
        cur = inputs.get(in_name, InputSpec(name=in_name))
        if cur.dtype is None and dtype != "?":
            cur = dataclasses.replace(cur, dtype=dtype)
        if cur.value is not None:
            shape = cur.shape if cur.shape is not None else (
                tuple(dims) if dims is not None and None not in dims else None)
            _check_value(ctx, (*kp, "inputs", in_name, "value"), cur, shape)
        inputs[in_name] = cur

    cal_raw = raw.get("calibration") or {}
    sources = [k for k in ("input_list", "generator", "from") if k in cal_raw]
    if len(sources) > 1:
        raise ctx.error((*kp, "calibration"),
                        f"give one calibration source, not {' and '.join(sources)}")
    from_export: str | None = None
    name_map: dict[str, str] = {}
    frm = cal_raw.get("from")
    if isinstance(frm, str):
        from_export = frm
    elif isinstance(frm, dict):
        from_export = frm["export"]
        name_map = dict(frm.get("outputs") or {})
    if cal_raw.get("generator"):
        _check_generator(ctx, (*kp, "calibration", "generator"), cal_raw["generator"])
    input_list = _resolve(ctx, (*kp, "calibration", "input_list"), cal_raw.get("input_list"),
                          "input list")
    _check_file(ctx, (*kp, "calibration", "input_list"), input_list, "input list")
    calibration = CalibrationSpec(
        samples=cal_raw.get("samples"), input_list=input_list,
        generator=cal_raw.get("generator"), from_export=from_export, name_map=name_map,
        held_out=cal_raw.get("held_out"), depends=tuple(cal_raw.get("depends") or ()))

    q = raw.get("quantization") or {}
    overrides = _resolve(ctx, (*kp, "quantization", "overrides"), q.get("overrides"),
                         "encodings file")
    _check_file(ctx, (*kp, "quantization", "overrides"), overrides, "encodings file")
    quantization = QuantizationSpec(
        act_bitwidth=q.get("act_bitwidth", QuantizationSpec.act_bitwidth),
        weights_bitwidth=q.get("weights_bitwidth", QuantizationSpec.weights_bitwidth),
        bias_bitwidth=q.get("bias_bitwidth", QuantizationSpec.bias_bitwidth),
        per_channel=q.get("per_channel", False),
        act_calibration=q.get("act_calibration"), param_calibration=q.get("param_calibration"),
        percentile=q.get("percentile"), float_fallback=q.get("float_fallback", False),
        float_bitwidth=q.get("float_bitwidth"), overrides=overrides)

    t = raw.get("target") or {}
    if t.get("soc") is not None:
        where = ctx.locate((*kp, "target", "soc"))
        get_soc(t["soc"], file=str(ctx.path), line=line_of(ctx.lines, where), key=dotted(where))
    target = TargetSpec(soc=t.get("soc"), lib_target=t.get("lib_target"))
    htp_config = parse_htp_config(raw.get("htp_config"), find_soc(t["soc"]) if t.get("soc")
                                  else None, ctx.error, (*kp, "htp_config"))

    th = raw.get("thresholds") or {}
    default = {"cosine": DEFAULT_COSINE} | {m: float(th[m]) for m in METRICS if m in th}
    per_output = {o: {m: float(v) for m, v in b.items()}
                  for o, b in (th.get("outputs") or {}).items()}
    for out_name in per_output:
        if out_name not in sig.outputs:
            hint = _did_you_mean(out_name, list(sig.outputs))
            raise ctx.error((*kp, "thresholds", "outputs", out_name),
                            f"model {_show(model.name)}{of_export} has no output {out_name!r}"
                            f"{hint}; its outputs: {_names(sig.outputs)}")
    s = raw.get("sdk") or {}
    sdk = SdkSpec(root=_resolve(ctx, (*kp, "sdk", "root"), s.get("root"), "SDK root"),
                  esdk_env=_resolve(ctx, (*kp, "sdk", "esdk_env"), s.get("esdk_env"),
                                    "ESDK env script"),
                  timeout_s=float(s.get("timeout", SdkSpec.timeout_s)))
    sim = SimSpec(samples=(raw.get("sim") or {}).get("samples", SimSpec.samples))
    dg = raw.get("diagnosis") or {}
    diagnosis = DiagnosisSpec(enabled=dg.get("enabled", True),
                              budget_s=float(dg.get("budget_s", DiagnosisSpec.budget_s)),
                              advisor=dg.get("advisor", True))
    original = _original(ctx, kp, raw.get("original"))
    lt = raw.get("latency") or {}
    latency = LatencySpec(runs=lt.get("runs", LatencySpec.runs),
                          perf_profile=lt.get("perf_profile", LatencySpec.perf_profile),
                          enabled=lt.get("enabled", True))
    rg = raw.get("regression") or {}
    regression = RegressionSpec(tolerances={str(k): float(v) for k, v in
                                            (rg.get("tolerances") or {}).items()},
                                enabled=rg.get("enabled", True))
    dlc = _dlc(ctx, kp, raw.get("dlc") or {}, list(inputs), model)
    return ExportSpec(
        name=name, model=model, manifest=ctx.path,
        line=line_of(ctx.lines, kp) or 1, inputs=inputs, opset=raw.get("opset"),
        calibration=calibration, quantization=quantization, target=target,
        thresholds=Thresholds(default=default, per_output=per_output),
        board=raw.get("board"), native_outputs=bool(raw.get("native_outputs", False)),
        sdk=sdk, sim=sim, diagnosis=diagnosis, original=original, latency=latency,
        regression=regression, htp_config=htp_config,
        route=raw.get("route", DEFAULT_ROUTE), dlc=dlc, raw=raw)


def _dlc(ctx: _Ctx, kp: KeyPath, value: dict[str, Any], inputs: list[str],
         model: Path) -> DlcSpec:
    """``dlc:``: every input it names must be one of the model's."""
    layouts = dict(value.get("input_layout") or {})
    for name in layouts:
        if name not in inputs:
            hint = _did_you_mean(name, inputs)
            raise ctx.error((*kp, "dlc", "input_layout", name),
                            f"model {_show(model.name)} has no input {name!r}{hint}; its "
                            f"inputs: {_names(inputs)}")
    return DlcSpec(input_layout=layouts, preserve_io=bool(value.get("preserve_io", False)))


def _original(ctx: _Ctx, kp: KeyPath, value: Any) -> OriginalSpec | None:
    """``original: PATH`` or ``original: {model: PATH, cosine: 0.999999}``."""
    if value is None:
        return None
    key = (*kp, "original") if isinstance(value, str) else (*kp, "original", "model")
    path = _resolve(ctx, key, value if isinstance(value, str) else value["model"],
                    "original model")
    assert path is not None
    _check_file(ctx, key, path, "original model")
    cosine = DEFAULT_ORIGINAL_COSINE if isinstance(value, str) else float(
        value.get("cosine", DEFAULT_ORIGINAL_COSINE))
    return OriginalSpec(model=path, cosine=cosine)


def _check_from_chains(ctx: _Ctx, exports: list[ExportSpec]) -> None:
    by_name = {e.name: (i, e) for i, e in enumerate(exports)}
    for i, e in enumerate(exports):
        if e.calibration.from_export and e.calibration.from_export not in by_name:
            hint = _did_you_mean(e.calibration.from_export, list(by_name))
            raise ctx.error(("exports", i, "calibration", "from"),
                            f"no export named {e.calibration.from_export!r} in this "
                            f"manifest{hint}")
    for i, e in enumerate(exports):
        chain = [e.name]
        cur = e
        while cur.calibration.from_export:
            nxt = cur.calibration.from_export
            if nxt in chain:
                cycle = " -> ".join([*chain[chain.index(nxt):], nxt])
                raise ctx.error(("exports", i, "calibration", "from"),
                                f"cycle in calibration `from:` chain: {cycle}")
            chain.append(nxt)
            cur = by_name[nxt][1]
    for i, e in enumerate(exports):
        if e.calibration.from_export:
            _check_name_map(ctx, i, e, by_name[e.calibration.from_export][1])


def _check_name_map(ctx: _Ctx, i: int, e: ExportSpec, up: ExportSpec) -> None:
    """`from:` hands upstream outputs to this export's inputs: every name must exist
    and every input must be fed."""
    up_outputs = _model_signature(ctx, up.model).outputs
    inputs = list(_model_signature(ctx, e.model).inputs)
    kp: KeyPath = ("exports", i, "calibration", "from")
    mapping = e.calibration.name_map or {n: n for n in up_outputs if n in inputs}
    for out_name, in_name in mapping.items():
        if out_name not in up_outputs:
            hint = _did_you_mean(out_name, list(up_outputs))
            raise ctx.error((*kp, "outputs", out_name),
                            f"export {up.name!r} ({_show(up.model.name)}) has no output "
                            f"{out_name!r}{hint}; its outputs: {_names(up_outputs)}")
        if in_name not in inputs:
            hint = _did_you_mean(in_name, inputs)
            raise ctx.error((*kp, "outputs", out_name),
                            f"{in_name!r} is not an input of {_show(e.model.name)}{hint}; its "
                            f"inputs: {_names(inputs)}")
    unfed = [n for n in inputs if n not in mapping.values()]
    if unfed:
        raise ctx.error(kp, f"input(s) {_names(unfed)} of {_show(e.model.name)} get no "
                            f"upstream output (outputs of {up.name!r}: {_names(up_outputs)}); map "
                            "them with from: {export: ..., outputs: {upstream: input}}")


def _load_boards(ctx: _Ctx, data: dict[str, Any]) -> dict[str, Any]:
    boards: dict[str, Any] = {}
    side = ctx.path.parent / BOARDS_FILE
    if not side.is_file() and not data.get("boards"):
        return boards
    from qnn_ci.manifest import boards_file as registry

    if side.is_file():
        boards.update(registry.load_boards_file(side))
    if data.get("boards"):
        boards.update(registry.parse_boards(data["boards"], source=ctx.path,
                                            lines=ctx.lines))
    return boards


def load_manifest(path: str | Path, *, memo_dir: Path | None = None) -> Manifest:
    """Read and validate a manifest; every problem is a one-line UserError naming
    the manifest as given (a relative path stays relative in the message).

    ``memo_dir`` (``<workdir>/.memo``): remember model signatures and passed schema
    checks there, keyed by content, so a re-run imports neither onnx nor jsonschema."""
    given = Path(path)
    try:
        return _load_manifest(given.resolve(), memo_dir)
    except UserError as exc:
        if not given.is_absolute() and exc.file == str(given.resolve()):
            exc.file = str(given)
            exc.args = (exc.oneline(),)
        raise


def _load_manifest(path: Path, memo_dir: Path | None) -> Manifest:
    data, lines = load_yaml_with_lines(path)
    ctx = _Ctx(path, lines, memo_dir)
    _validate(ctx, data)
    defaults = data.get("defaults") or {}
    exports: list[ExportSpec] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(data["exports"]):
        name = raw["name"]
        if name in seen:
            raise ctx.error(("exports", i, "name"),
                            f"duplicate export name {name!r} (first at line "
                            f"{line_of(lines, ('exports', seen[name]))})")
        seen[name] = i
        exports.append(_build_export(ctx, i, _merge(defaults, raw)))
    _check_from_chains(ctx, exports)
    boards = _load_boards(ctx, data)
    for i, e in enumerate(exports):
        if e.board and boards and e.board not in boards:
            hint = _did_you_mean(e.board, list(boards))
            raise ctx.error(("exports", i, "board"),
                            f"board {e.board!r} is not declared{hint}; declared: "
                            f"{_names(boards)}")
    baselines = _resolve(ctx, ("baselines",), data.get("baselines"), "baselines file") \
        or path.parent / BASELINES_FILE
    exports = [dataclasses.replace(e, regression=dataclasses.replace(
        e.regression, baselines=baselines)) for e in exports]
    return Manifest(path=path, exports=exports, boards=boards, lines=lines,
                    baselines=baselines)


def find_manifests(paths: list[str | Path]) -> list[Path]:
    """Expand folders to the manifests inside them (non-recursive)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += [p / n for n in MANIFEST_NAMES if (p / n).is_file()]
        else:
            out.append(p)
    return out
