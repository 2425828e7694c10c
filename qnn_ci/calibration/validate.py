"""Check an input list against a model: names, paths, sizes, and signs of
synthetic data (all-zero samples, samples identical to each other)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qnn_ci.calibration.input_list import explain_split, parse_input_list, resolve_line
from qnn_ci.calibration.list_tokens import UnwritableInputList, check_names
from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.model.tensors import TensorIO

if TYPE_CHECKING:   # numpy only when a list is validated (cached runs skip it)
    import numpy as np

_CHUNK = 1 << 22


@dataclass
class ValidationReport:
    """What validating a calibration input list found, per input and overall."""

    input_list: Path
    samples: int
    inputs: list[dict[str, Any]]
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"input_list": str(self.input_list), "samples": self.samples,
                "inputs": self.inputs, "clean": self.clean,
                "findings": [f.to_dict() for f in self.findings]}


def _digest_and_zero(path: Path) -> tuple[str, bool]:
    h = hashlib.sha1()
    nonzero = False
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            if not nonzero and chunk.strip(b"\0"):
                nonzero = True
    return h.hexdigest(), not nonzero


def _dtype_hint(size: int, numel: int, want: np.dtype) -> str:
    import numpy as np

    candidates = sorted(("float32", "float16", "int64", "int32", "uint8", "float64"),
                        key=lambda n: np.dtype(n).kind != want.kind)  # same kind first
    for other in candidates:
        d = np.dtype(other)
        if d != want and numel and size == numel * d.itemsize:
            return f" (the size fits {other}: was it written as {other}?)"
    return ""


# Per-sample signs of synthetic data: warnings in the calibration stage (a constant
# mask can be real), flagged by `qnn-ci inputs validate`.
SYNTHETIC_SIGNS = ("inputs.all_zero", "inputs.identical")


class SyntheticCheck:
    """Signs of synthetic calibration data, per input: samples that are all zeros, and
    samples identical to an earlier one. Fed file digests or in-memory arrays. Inputs
    in ``state`` (recurrent state: zeros and repeats are legitimate there,
    ``qnn_ci.calibration.state_inputs``) are checked for NaN/Inf only."""

    def __init__(self, state: Collection[str] = ()) -> None:
        self.findings: list[Finding] = []
        self.state = frozenset(state)
        self._seen: dict[str, dict[str, str]] = {}
        self._count: dict[str, int] = {}
        self._zero: dict[str, int] = {}

    def add(self, name: str, where: str, digest: str, zero: bool) -> None:
        if name in self.state:
            return
        self._count[name] = self._count.get(name, 0) + 1
        seen = self._seen.setdefault(name, {})
        if zero:
            self._zero[name] = self._zero.get(name, 0) + 1
            self.findings.append(Finding(
                "inputs.all_zero", f"{where}: {name} is all zeros (synthetic data? "
                "calibration needs real inference data)", Severity.ERROR, name))
        if digest in seen:
            self.findings.append(Finding(
                "inputs.identical", f"{where}: {name} is identical to {seen[digest]} "
                "(synthetic or duplicated data?)", Severity.ERROR, name))
        else:
            seen[digest] = where

    def non_finite(self, name: str, where: str, array: np.ndarray) -> None:
        """NaN or Inf in a float input: broken data, an error wherever it comes from."""
        import numpy as np

        if array.dtype.kind == "f" and not np.isfinite(array).all():
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            self.findings.append(Finding(
                "inputs.non_finite", f"{where}: {name} has {bad} NaN/Inf value(s) of "
                f"{array.size}", Severity.ERROR, name))

    def add_array(self, name: str, where: str, array: np.ndarray) -> None:
        import numpy as np

        self.non_finite(name, where, array)
        if array.size <= 1:
            return  # scalars (a sample rate, a flag) legitimately repeat
        data = np.ascontiguousarray(array)
        # sha1 over the buffer, no copy: the fastest exact fingerprint hashlib has here
        # (identity only, not security).
        self.add(name, where, hashlib.sha1(memoryview(data).cast("B")).hexdigest(),
                 not data.any())

    def degenerate(self) -> list[Finding]:
        """Inputs whose EVERY sample is all zeros, or that have one distinct value
        across several samples: not a sign, a certainty."""
        out = []
        for name, n in self._count.items():
            if self._zero.get(name, 0) == n:
                out.append(Finding(
                    "inputs.all_samples_zero", f"every one of the {n} sample(s) of input "
                    f"{name!r} is all zeros: this is not real data", Severity.ERROR, name))
            elif n > 1 and len(self._seen.get(name, {})) == 1:
                out.append(Finding(
                    "inputs.all_samples_identical", f"all {n} samples of input {name!r} are "
                    "identical: calibration ranges would come from one input",
                    Severity.ERROR, name))
        return out


def validate_input_list(path: Path, inputs: list[TensorIO],
                        shapes: dict[str, tuple[int, ...]], *,
                        state: Collection[str] = ()) -> ValidationReport:
    """``inputs`` are the model's graph inputs; ``shapes`` the static shape per input
    (pinned dims win over the model's); ``state`` the recurrent state inputs (not
    flagged for zeros or repeats)."""
    import numpy as np

    for io in inputs:
        if io.name not in shapes:
            raise UserError(f"input {io.name!r} has no static shape "
                            f"(dims {list(io.dims or [])}): pin it with --dim "
                            f"{io.name}=d0,d1,...")
    names = [io.name for io in inputs]
    check_names(names, file=path)
    parsed = parse_input_list(path)
    by_name = {io.name: io for io in inputs}
    findings: list[Finding] = []
    synthetic = SyntheticCheck(state)

    def flag(check: str, msg: str, lineno: int, subject: str | None = None) -> None:
        findings.append(Finding(check, f"line {lineno}: {msg}", Severity.ERROR, subject))

    for line in parsed.lines:
        try:
            sample = resolve_line(line, names, source=path)
        except UnwritableInputList:
            raise
        except UserError as exc:
            flag("inputs.line", exc.message, line.lineno)
            continue
        for missing in [n for n in names if n not in sample]:
            flag("inputs.missing", f"graph input {missing!r} is not named", line.lineno, missing)
        for extra in [n for n in sample if n not in by_name]:
            flag("inputs.unknown", f"{extra!r} is not a graph input (inputs: "
                 f"{', '.join(names)}; names must match exactly)", line.lineno, extra)
        for name, p in sample.items():
            if name not in by_name:
                continue
            if not (p.is_absolute() and p.is_file()):
                explain_split(line, names, source=path)   # `/my project/x.raw`: say so
            if not p.is_absolute():
                flag("inputs.relative_path", f"{name}: path {p} is not absolute (the SDK "
                     "tools resolve it against their own working directory)", line.lineno, name)
                continue
            if not p.is_file():
                flag("inputs.missing_file", f"{name}: file {p} does not exist",
                     line.lineno, name)
                continue
            dtype = np.dtype(by_name[name].dtype)
            numel = int(np.prod(shapes[name], dtype=np.int64))
            size = p.stat().st_size
            want = numel * dtype.itemsize
            if size != want:
                flag("inputs.size", f"{name}: {p.name} is {size} bytes, expected {want} "
                     f"({'x'.join(map(str, shapes[name])) or 'scalar'} {dtype.name})"
                     f"{_dtype_hint(size, numel, dtype)}", line.lineno, name)
                continue
            if dtype.kind == "f":
                synthetic.non_finite(name, f"line {line.lineno}",
                                     np.fromfile(p, dtype=dtype.newbyteorder("<")))
            if numel <= 1:
                continue  # scalars (a sample rate, a flag) legitimately repeat
            digest, zero = _digest_and_zero(p)
            synthetic.add(name, f"line {line.lineno}", digest, zero)
    findings += synthetic.findings + synthetic.degenerate()
    if not parsed.lines:
        findings.append(Finding("inputs.empty", "the input list has no samples"))
    info = [{"name": n, "dtype": by_name[n].dtype, "shape": list(shapes[n])} for n in names]
    return ValidationReport(path, len(parsed.lines), info, findings)
