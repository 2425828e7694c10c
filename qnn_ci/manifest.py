"""Read, validate and resolve a manifest (`qnn-ci.yaml`) into ``ExportSpec``s.

Every error is a ``UserError`` naming the file, the line and the key path, and
what to do: unknown keys (with a did-you-mean), wrong types, missing files,
duplicate export names, unknown SoCs, cycles in ``from:`` chains, and shapes
whose rank disagrees with the model.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib.util
import json
import logging
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from qnn_ci.errors import UserError
from qnn_ci.onnx_io import model_signature
from qnn_ci.spec import (
    CalibrationSpec,
    ExportSpec,
    InputSpec,
    QuantizationSpec,
    SdkSpec,
    SimSpec,
    TargetSpec,
    Thresholds,
)
from qnn_ci.tables import DEFAULT_COSINE, get_soc
from qnn_ci.yaml_lines import KeyPath, dotted, line_of, load_yaml_with_lines

log = logging.getLogger(__name__)

MANIFEST_NAMES = ("qnn-ci.yaml", "qnn-ci.yml")
BOARDS_FILE = "qnn-boards.yaml"
METRICS = ("cosine", "snr", "psnr", "max_abs", "mean_abs")


@cache
def schema() -> dict[str, Any]:
    """The manifest's JSON Schema, as published in the package."""
    text = resources.files("qnn_ci").joinpath("schema/qnn-ci.schema.json").read_text("utf-8")
    return json.loads(text)


@dataclass
class Manifest:
    path: Path
    exports: list[ExportSpec]
    boards: dict[str, Any] = field(default_factory=dict)   # name -> BoardConfig
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def export(self, name: str) -> ExportSpec:
        for e in self.exports:
            if e.name == name:
                return e
        raise KeyError(name)

    @property
    def by_name(self) -> dict[str, ExportSpec]:
        return {e.name: e for e in self.exports}


class _Ctx:
    def __init__(self, path: Path, lines: dict[KeyPath, int]) -> None:
        self.path = path
        self.lines = lines

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
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe_schema_error(err: jsonschema.ValidationError) -> tuple[KeyPath, str]:
    path: KeyPath = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = list(err.schema.get("properties", {}))
        extra = [k for k in err.instance if k not in allowed]
        if extra:
            key = str(extra[0])
            hint = _did_you_mean(key, allowed)
            return (*path, key), f"unknown key {key!r}{hint}; allowed: {', '.join(allowed)}"
    if err.validator == "required":
        return path, str(err.message).replace("is a required property", "is required")
    if err.validator == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return path, f"expected {want}, got {type(err.instance).__name__} {err.instance!r}"
    if err.validator == "pattern":
        if path and path[-1] == "generator":
            return path, (f"{err.instance!r} is not a generator reference: write "
                          "package.module:function (e.g. calib.samples:batches)")
        if path and path[-1] == "name":
            return path, (f"export name {err.instance!r} may use letters, digits, '_', '.' "
                          "and '-', starting with a letter or digit")
    if err.validator == "enum":
        return path, f"{err.instance!r} is not one of {err.validator_value}"
    if err.validator == "oneOf" and path and path[-1] == "from":
        return path, "expected an export name or {export: NAME, outputs: {upstream: input}}"
    return path, err.message


def _validate(ctx: _Ctx, data: Any) -> None:
    if not isinstance(data, dict):
        raise UserError("a manifest is a mapping with `exports:` (and optional `defaults:`)",
                        file=ctx.path, line=1)
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path),
                                                                 list(map(str, e.absolute_path))))
    if errors:
        # A misspelt key also makes a required key "missing": report the typo.
        typos = [e for e in errors if e.validator == "additionalProperties"]
        best = typos[0] if typos else jsonschema.exceptions.best_match(errors)
        key_path, message = _describe_schema_error(best)
        raise ctx.error(key_path, message)


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = _merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def _resolve(base: Path, value: str | None) -> Path | None:
    """Absolute path: relative to the manifest's folder; ``pkg:PACKAGE/path`` names a
    file inside an installed Python package (models shipped in wheels)."""
    if value is None:
        return None
    if value.startswith("pkg:"):
        package, _, rest = value[4:].partition("/")
        # find_spec locates the package without running its __init__.
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
        if spec is None or not spec.submodule_search_locations:
            return Path(f"<package {package} is not installed>") / rest
        return (Path(next(iter(spec.submodule_search_locations))) / rest).resolve()
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def _check_file(ctx: _Ctx, key_path: KeyPath, path: Path | None, what: str) -> None:
    if path is not None and str(path).startswith("<package "):
        package = str(path).split()[1]
        raise ctx.error(key_path, f"{what}: Python package {package!r} is not installed "
                                  f"(pip install it, or give a file path)")
    if path is not None and not path.is_file():
        raise ctx.error(key_path, f"{what} not found: {path} (paths resolve against "
                                  f"the manifest's folder {ctx.path.parent})")


def _check_value(ctx: _Ctx, key_path: KeyPath, spec: InputSpec,
                 shape: tuple[int | None, ...] | None) -> None:
    import numpy as np

    try:
        arr = np.asarray(spec.value, dtype=spec.dtype or "float32")
    except (ValueError, TypeError) as exc:
        raise ctx.error(key_path, f"value {spec.value!r} is not a {spec.dtype} array: "
                                  f"{exc}") from None
    if shape is not None:
        try:
            np.broadcast_to(arr, tuple(int(d or 0) for d in shape))
        except ValueError:
            raise ctx.error(key_path, f"value of shape {list(arr.shape)} does not fit input "
                                      f"{spec.name!r} of shape {list(shape)}") from None


def _check_generator(ctx: _Ctx, key_path: KeyPath, spec: str) -> None:
    """The generator's top-level module can be found (the manifest's folder first),
    without running it: user code runs only when the calibration stage does."""
    top = spec.partition(":")[0].split(".")[0]
    if (ctx.path.parent / f"{top}.py").is_file() or (ctx.path.parent / top).is_dir():
        return
    if importlib.util.find_spec(top) is None:
        raise ctx.error(key_path, f"generator {spec!r}: no module {top!r} in the manifest's "
                                  f"folder {ctx.path.parent} or on sys.path")


def _build_export(ctx: _Ctx, idx: int, raw: dict[str, Any]) -> ExportSpec:
    base = ctx.path.parent
    kp: KeyPath = ("exports", idx)
    name = raw["name"]
    model = _resolve(base, raw["model"])
    assert model is not None
    _check_file(ctx, (*kp, "model"), model, "model")

    inputs: dict[str, InputSpec] = {}
    for in_name, spec in (raw.get("inputs") or {}).items():
        inputs[in_name] = InputSpec(
            name=in_name,
            shape=tuple(spec["shape"]) if spec.get("shape") is not None else None,
            dtype=spec.get("dtype"), encoding=spec.get("encoding"), value=spec.get("value"))

    try:
        sig = model_signature(model)
    except Exception as exc:  # onnx raises many kinds on a broken file
        raise ctx.error((*kp, "model"), f"cannot read ONNX model {model}: "
                                        f"{str(exc).splitlines()[0] if str(exc) else exc}"
                        ) from None
    declared = sig.inputs
    of_export = f" (export {name!r})" if ("exports", idx, "inputs") not in ctx.lines else ""
    for in_name, spec in inputs.items():
        ikp = (*kp, "inputs", in_name)
        if in_name not in declared:
            hint = _did_you_mean(in_name, list(declared))
            raise ctx.error(ikp, f"model {model.name}{of_export} has no input {in_name!r}"
                                 f"{hint}; its inputs: {', '.join(declared) or '(none)'}")
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
    input_list = _resolve(base, cal_raw.get("input_list"))
    _check_file(ctx, (*kp, "calibration", "input_list"), input_list, "input list")
    calibration = CalibrationSpec(
        samples=cal_raw.get("samples"), input_list=input_list,
        generator=cal_raw.get("generator"), from_export=from_export, name_map=name_map,
        held_out=cal_raw.get("held_out"), depends=tuple(cal_raw.get("depends") or ()))

    q = raw.get("quantization") or {}
    overrides = _resolve(base, q.get("overrides"))
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

    th = raw.get("thresholds") or {}
    default = {"cosine": DEFAULT_COSINE} | {m: float(th[m]) for m in METRICS if m in th}
    per_output = {o: {m: float(v) for m, v in b.items()}
                  for o, b in (th.get("outputs") or {}).items()}
    for out_name in per_output:
        if out_name not in sig.outputs:
            hint = _did_you_mean(out_name, list(sig.outputs))
            raise ctx.error((*kp, "thresholds", "outputs", out_name),
                            f"model {model.name}{of_export} has no output {out_name!r}{hint}; "
                            f"its outputs: {', '.join(sig.outputs)}")
    s = raw.get("sdk") or {}
    sdk = SdkSpec(root=_resolve(base, s.get("root")), esdk_env=_resolve(base, s.get("esdk_env")),
                  timeout_s=float(s.get("timeout", SdkSpec.timeout_s)))
    sim = SimSpec(samples=(raw.get("sim") or {}).get("samples", SimSpec.samples))
    return ExportSpec(
        name=name, model=model, manifest=ctx.path,
        line=line_of(ctx.lines, kp) or 1, inputs=inputs, opset=raw.get("opset"),
        calibration=calibration, quantization=quantization, target=target,
        thresholds=Thresholds(default=default, per_output=per_output),
        board=raw.get("board"), native_outputs=bool(raw.get("native_outputs", False)),
        sdk=sdk, sim=sim, raw=raw)


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
    up_outputs = model_signature(up.model).outputs
    inputs = list(model_signature(e.model).inputs)
    kp: KeyPath = ("exports", i, "calibration", "from")
    mapping = e.calibration.name_map or {n: n for n in up_outputs if n in inputs}
    for out_name, in_name in mapping.items():
        if out_name not in up_outputs:
            hint = _did_you_mean(out_name, list(up_outputs))
            raise ctx.error((*kp, "outputs", out_name),
                            f"export {up.name!r} ({up.model.name}) has no output {out_name!r}"
                            f"{hint}; its outputs: {', '.join(up_outputs)}")
        if in_name not in inputs:
            hint = _did_you_mean(in_name, inputs)
            raise ctx.error((*kp, "outputs", out_name),
                            f"{in_name!r} is not an input of {e.model.name}{hint}; its inputs: "
                            f"{', '.join(inputs)}")
    unfed = [n for n in inputs if n not in mapping.values()]
    if unfed:
        raise ctx.error(kp, f"input(s) {', '.join(unfed)} of {e.model.name} get no upstream "
                            f"output (outputs of {up.name!r}: {', '.join(up_outputs)}); map "
                            "them with from: {export: ..., outputs: {upstream: input}}")


def _load_boards(ctx: _Ctx, data: dict[str, Any]) -> dict[str, Any]:
    boards: dict[str, Any] = {}
    side = ctx.path.parent / BOARDS_FILE
    if not side.is_file() and not data.get("boards"):
        return boards
    from qnn_ci.boards import registry

    if side.is_file():
        boards.update(registry.load_boards_file(side))
    if data.get("boards"):
        boards.update(registry.parse_boards(data["boards"], source=ctx.path,
                                            lines=ctx.lines))
    return boards


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest; every problem is a one-line UserError."""
    path = Path(path).resolve()
    data, lines = load_yaml_with_lines(path)
    ctx = _Ctx(path, lines)
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
                            f"{', '.join(boards)}")
    return Manifest(path=path, exports=exports, boards=boards, lines=lines)


def find_manifests(paths: list[str | Path]) -> list[Path]:
    """Expand folders to the manifests inside them (non-recursive)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += [p / n for n in MANIFEST_NAMES if (p / n).is_file()]
        else:
            out.append(p)
    return out
