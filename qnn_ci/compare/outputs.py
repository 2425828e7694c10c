"""Load sets of model outputs from disk without reading them into memory.

Accepted layouts:

- a ``qnn-net-run`` output folder: ``<dir>/Result_<N>/<tensor>.raw`` (one
  ``Result_N`` per input-list line = one sample; float32 unless a dtype is given);
- a single ``Result_N`` folder, or any plain folder of ``.raw`` / ``.npy`` files
  (one sample; a ``Result_N`` folder keeps its N);
- a single ``.raw`` file (needs a dtype) or ``.npy`` file.

Inside a sample folder every ``.raw`` / ``.npy`` file below it counts, keyed by
its path relative to the folder without the suffix, so a ``<graph>/`` level or
sub-folders made by a ``/`` in a tensor name become part of the key
(``graph/logits``). ``<tensor>_native.raw`` (``--use_native_output_files``) is
paired with ``<tensor>.raw`` by base name.

The converter renames tensors (see ``sanitize``); ``match_names`` finds the file
key for a graph output name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from qnn_ci.engine.results import Finding, Severity
from qnn_ci.errors import UserError
from qnn_ci.util.listing import cut_text
from qnn_ci.util.safe_read import check_regular

log = logging.getLogger(__name__)

RESULT_DIR = re.compile(r"^Result_([0-9]+)$")
SHOWN = 10                                # sample numbers listed in one finding
NATIVE_SUFFIX = "_native"
DATA_SUFFIXES = (".raw", ".npy")
DEFAULT_RAW_DTYPE = np.dtype("float32")   # qnn-net-run writes float32 unless told otherwise

_NON_WORD = re.compile(r"\W+")


def sanitize(name: str) -> str:
    """The name ``qnn-onnx-converter`` gives a tensor: every run of non-word
    characters becomes ``_``, and a name starting with a digit gets a leading
    ``_`` (``/conv1/Conv_output_0`` -> ``_conv1_Conv_output_0``, ``23`` -> ``_23``)."""
    out = _NON_WORD.sub("_", name)
    if out[:1].isdigit():
        out = "_" + out
    return out


def _match_tiers(name: str) -> tuple[str, str, str]:
    s = sanitize(name)
    return name, s, s.strip("_")


def match_names(wanted: Iterable[str], available: Iterable[str]) -> dict[str, str]:
    """Map each wanted (graph) output name to a file key, one to one.

    Tried in order, first unique hit wins: the exact name; equal ``sanitize``
    forms; equal sanitized forms with leading/trailing ``_`` stripped (a leading
    ``/`` lost to a folder); then the same three against keys with their first
    path component (a graph-name folder) removed. Names with no unique hit are
    left out of the result.
    """
    keys = list(available)
    views: list[tuple[str, str]] = [(k, k) for k in keys]
    views += [(k.split("/", 1)[1], k) for k in keys if "/" in k]
    tiers = [[(_match_tiers(v)[i], k) for v, k in views] for i in range(3)]
    result: dict[str, str] = {}
    used: set[str] = set()
    for name in wanted:
        forms = _match_tiers(name)
        for i, form in enumerate(forms):
            hits = {k for v, k in tiers[i] if v == form and k not in used}
            if len(hits) == 1:
                key = hits.pop()
                result[name] = key
                used.add(key)
                break
            if len(hits) > 1:
                log.warning("output %r matches several files %s; not paired", name, sorted(hits))
                break
    return result


@dataclass(frozen=True)
class ArraySource:
    """One tensor file, opened lazily as a flat read-only memmap."""

    path: Path
    dtype: np.dtype | None          # None: unknown (a native .raw without a given dtype)
    native: bool = False
    npy: bool = False
    shape: tuple[int, ...] | None = None
    offset: int = 0                 # data start in the file (.npy header)
    fortran: bool = False

    @property
    def data_bytes(self) -> int:
        return self.path.stat().st_size - self.offset

    def with_dtype(self, dtype: np.dtype | str | None) -> ArraySource:
        if dtype is None or self.npy:
            return self
        return replace(self, dtype=np.dtype(dtype))

    def size_problem(self) -> str | None:
        """Why the file cannot hold whole elements of its dtype, else None."""
        if self.dtype is None:
            return None
        nbytes = self.data_bytes
        if nbytes % self.dtype.itemsize:
            return (f"{self.path}: {nbytes} bytes is not a multiple of "
                    f"{self.dtype.itemsize} ({self.dtype.name})")
        return None

    @property
    def count(self) -> int:
        if self.dtype is None:
            raise ValueError(f"{self.path}: dtype unknown")
        return self.data_bytes // self.dtype.itemsize

    def open(self) -> np.ndarray:
        """A flat view of the data (a memmap; empty files give an empty array)."""
        if self.dtype is None:
            raise ValueError(f"{self.path}: dtype unknown")
        n = self.count
        if n == 0:
            return np.empty(0, dtype=self.dtype)
        if self.npy and self.fortran and self.shape:
            log.info("%s is Fortran-ordered: reading it into memory in C order", self.path)
            arr = np.load(self.path, mmap_mode="r")
            return np.ascontiguousarray(arr).reshape(-1)
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset,
                         shape=(n,))


@dataclass
class OutputFiles:
    """One output's files in one sample: the float32 file and/or the native-type file."""

    float: ArraySource | None = None    # <tensor>.raw or <tensor>.npy
    native: ArraySource | None = None   # <tensor>_native.raw

    def preferred(self) -> ArraySource | None:
        return self.float or self.native


@dataclass
class OutputSet:
    """A set of model outputs found on disk: its layout, samples and files per output."""

    root: Path
    kind: str                                   # "qnn-net-run" | "folder" | "file"
    samples: list[int]
    files: dict[str, dict[int, OutputFiles]]    # output key -> sample -> files
    findings: list[Finding] = field(default_factory=list)

    def names(self) -> list[str]:
        return sorted(self.files)

    def source(self, name: str, sample: int) -> ArraySource | None:
        entry = self.files.get(name, {}).get(sample)
        return entry.preferred() if entry else None


def _npy_source(path: Path) -> ArraySource:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError, OSError, EOFError, SyntaxError...
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"cannot read it as .npy: {first}", file=path) from None
    if not isinstance(arr, np.ndarray) or arr.dtype.hasobject or arr.dtype.kind not in "biuf":
        kind = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
        raise UserError(f"holds {kind} values, not numbers; compare numeric outputs",
                        file=path)
    offset = arr.offset if isinstance(arr, np.memmap) else path.stat().st_size
    fortran = arr.ndim > 1 and arr.flags.f_contiguous and not arr.flags.c_contiguous
    src = ArraySource(path, arr.dtype, npy=True, shape=tuple(arr.shape), offset=offset,
                      fortran=fortran)
    del arr
    return src


def _file_source(path: Path, dtype: np.dtype | None,
                 default: np.dtype | None) -> tuple[str, ArraySource]:
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    if path.suffix == ".npy":
        return stem, _npy_source(path)
    native = stem.endswith(NATIVE_SUFFIX) and len(stem) > len(NATIVE_SUFFIX)
    if native:
        stem = stem[: -len(NATIVE_SUFFIX)]
        return stem, ArraySource(path, dtype, native=True)
    return stem, ArraySource(path, dtype or default)


def _scan_sample(folder: Path, dtype: np.dtype | None) -> dict[str, OutputFiles]:
    found: dict[str, OutputFiles] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix not in DATA_SUFFIXES or not path.is_file():
            continue
        stem, src = _file_source(path, dtype, DEFAULT_RAW_DTYPE)
        rel = path.parent.relative_to(folder).as_posix()
        key = stem if rel == "." else f"{rel}/{stem}"
        entry = found.setdefault(key, OutputFiles())
        if src.native:
            entry.native = src
        elif entry.float is not None:
            log.warning("%s: both %s and %s; using the first", key, entry.float.path, path)
        else:
            entry.float = src
    return found


def _check_readable(path: Path) -> None:
    """A folder that can be listed or a regular file; a FIFO, device or socket is
    refused without opening it (opening a FIFO waits for a writer)."""
    if not path.exists():
        raise UserError("no such file or folder", file=path)
    try:
        if path.is_dir():
            next(path.iterdir(), None)
            return
    except OSError as exc:
        raise UserError(f"cannot read it: {exc.strerror or exc}", file=path) from exc
    check_regular(path, what="output file or folder")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise UserError(f"cannot read it: {exc.strerror or exc}", file=path) from exc


def load_output_set(path: str | Path, *, dtype: str | np.dtype | None = None) -> OutputSet:
    """Read the layout at ``path`` (see the module doc). ``dtype`` applies to every
    ``.raw`` file, native ones included; ``.npy`` files carry their own."""
    root = Path(path)
    _check_readable(root)
    dt = _parse_dtype(dtype)
    if root.is_file():
        if root.suffix != ".npy" and dt is None:
            raise UserError("a bare .raw file has no header: give its dtype (--dtype float32)",
                            file=root)
        stem, src = _file_source(root, dt, None)
        return OutputSet(root, "file", [0], {stem: {0: OutputFiles(float=src)}})

    results: dict[int, Path] = {}
    doubles: list[str] = []
    for child in sorted(root.iterdir()):
        m = RESULT_DIR.match(child.name)
        if m and child.is_dir():
            n = int(m.group(1))
            if n in results:         # Result_3 and Result_03
                doubles.append(f"{child.name} (sample {n} is also {results[n].name})")
                continue
            results[n] = child
    if results:
        out = _load_net_run(root, results, dt)
        if doubles:
            out.findings.append(Finding(
                "compare.missing", f"{root}: {_listed(doubles)} not read: one folder per "
                "sample number", Severity.WARNING, subject=str(root)))
        return out
    own = RESULT_DIR.match(root.name)
    sample = int(own.group(1)) if own else 0
    found = _scan_sample(root, dt)
    if not found:
        raise UserError("no .raw or .npy files in this folder (nor Result_N folders)", file=root)
    return OutputSet(root, "folder", [sample], {k: {sample: v} for k, v in found.items()})


def _load_net_run(root: Path, results: dict[int, Path], dt: np.dtype | None) -> OutputSet:
    samples = sorted(results)
    files: dict[str, dict[int, OutputFiles]] = {}
    findings: list[Finding] = []
    for n in samples:
        for key, entry in _scan_sample(results[n], dt).items():
            files.setdefault(key, {})[n] = entry
    gaps = missing_numbers(samples)
    if gaps:
        findings.append(Finding("compare.missing", f"{root}: {gaps} missing (found "
                                f"{len(samples)} Result_N folders up to Result_{samples[-1]})",
                                subject=str(root)))
    empty = [n for n in samples if not any(n in per for per in files.values())]
    for n in empty:
        findings.append(Finding("compare.missing", f"{results[n]}: no .raw or .npy files",
                                subject=str(results[n])))
    if not files:
        raise UserError("the Result_N folders hold no .raw or .npy files", file=root)
    return OutputSet(root, "qnn-net-run", samples, files, findings)


def _listed(items: list[str], limit: int = SHOWN) -> str:
    """In their order (sample numbers, folders: none is worse than another)."""
    return cut_text(items, limit)


def _ranges(numbers: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct numbers as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def _runs_text(runs: list[tuple[int, int]], count: int) -> str:
    words = [f"Result_{a}" if a == b else f"Result_{a}..Result_{b}" for a, b in runs]
    return (f"{count} sample(s): " if count > 1 else "") + _listed(words)


def missing_numbers(samples: list[int]) -> str | None:
    """The ``Result_N`` numbers below the highest that ``samples`` (sorted) lacks, as
    runs (``Result_1..Result_29999999``), computed from the gaps, not by
    enumerating them; None when there are none."""
    gaps: list[tuple[int, int]] = []
    prev = -1
    for n in samples:
        if n > prev + 1:
            gaps.append((prev + 1, n - 1))
        prev = n
    if not gaps:
        return None
    return _runs_text(gaps, sum(b - a + 1 for a, b in gaps))


def pair_outputs(reference: OutputSet, test: OutputSet, *, ref_label: str = "reference",
                 test_label: str = "test") -> tuple[list[tuple[str, str]], list[Finding]]:
    """``(reference key, test key)`` pairs plus findings for unpaired outputs
    (missing from the test: error; only in the test: warning)."""
    if reference.kind == "file" and test.kind == "file":
        r, t = reference.names()[0], test.names()[0]
        return [(r, t)], []
    mapping = match_names(reference.names(), test.names())
    findings = [Finding("compare.missing",
                        f"{test_label} {test.root} has no output {name!r} (looked for "
                        f"{name}.raw, {name}_native.raw, {name}.npy and sanitised names)",
                        subject=name)
                for name in reference.names() if name not in mapping]
    used = set(mapping.values())
    findings += [Finding("compare.missing", f"{test_label} output {name!r} has no "
                         f"counterpart in {ref_label} {reference.root}; not compared",
                         Severity.WARNING, subject=name)
                 for name in test.names() if name not in used]
    return sorted(mapping.items()), findings


def pair_samples(reference: OutputSet, test: OutputSet, *, ref_label: str = "reference",
                 test_label: str = "test") -> tuple[list[tuple[int, int]], list[Finding]]:
    """``(reference sample, test sample)`` pairs. Two single-sample sets pair with
    each other whatever their ``Result_N`` numbers; otherwise by equal N."""
    if len(reference.samples) == 1 and len(test.samples) == 1:
        return [(reference.samples[0], test.samples[0])], []
    ref_set, test_set = set(reference.samples), set(test.samples)
    common = sorted(ref_set & test_set)
    lacking = sorted(ref_set - test_set)
    findings: list[Finding] = []
    if len(lacking) <= SHOWN:        # one finding per sample while they are few
        findings += [Finding("compare.missing", f"{test_label} {test.root} has no Result_{n} "
                             f"({ref_label} has {len(reference.samples)} samples)",
                             subject=f"Result_{n}") for n in lacking]
    else:
        findings.append(Finding(
            "compare.missing", f"{test_label} {test.root} has no "
            f"{_runs_text(_ranges(lacking), len(lacking))} ({ref_label} has "
            f"{len(reference.samples)} samples)", subject=f"Result_{lacking[0]}"))
    extra = sorted(test_set - ref_set)
    if extra:
        names = _runs_text(_ranges(extra), len(extra))
        findings.append(Finding("compare.missing", f"{test_label} {names} have no "
                                f"counterpart in {ref_label}; not compared",
                                Severity.WARNING))
    return [(n, n) for n in common], findings


def _parse_dtype(dtype: str | np.dtype | None) -> np.dtype | None:
    if dtype is None:
        return None
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise UserError(f"unknown dtype {dtype!r}: use a numpy name such as float32, "
                        "float16, uint8, int32", key="dtype") from exc
    if dt.hasobject or dt.kind not in "biuf":
        raise UserError(f"dtype {dt.name!r} is not numeric: use float32, float16, uint8, ...",
                        key="dtype")
    return dt


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` -> ``(1, 3, 224, 224)``; a UserError naming the text otherwise."""
    try:
        dims = tuple(int(p) for p in text.split(","))
    except ValueError as exc:
        raise UserError(f"bad shape {text!r}: write positive integers like 1,3,224,224",
                        key="shape") from exc
    if not dims or any(d < 0 for d in dims):
        raise UserError(f"bad shape {text!r}: write positive integers like 1,3,224,224",
                        key="shape")
    return dims
