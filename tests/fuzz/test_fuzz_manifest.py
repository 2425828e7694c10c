"""Fuzz the manifest loader: `load_manifest` on mutated valid manifests (bytes
inserted, deleted and replaced; YAML fragments, aliases, tags, deep nesting, odd
keys and values spliced in; values swapped for random ones) next to real ONNX
models, and `load_yaml_with_lines` on arbitrary bytes, may only return or raise a
one-line `UserError` naming the file -- never another exception."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from qnn_ci.errors import UserError
from qnn_ci.manifest import yaml_lines
from qnn_ci.manifest.loader import Manifest, load_manifest
from qnn_ci.manifest.yaml_lines import load_yaml_with_lines
from tests.core.graphs import scale_model, two_input_model

SEEDS = [
    """\
exports:
  - name: a
    model: m.onnx
""",
    """\
version: 1
defaults: &defaults
  target: {soc: QCS6490, lib_target: aarch64-oe-linux-gcc11.2}
  quantization: {act_bitwidth: 16, per_channel: true, percentile: 99.9}
  thresholds: {cosine: 0.99, snr: 20}
  sim: {samples: 2}
exports:
  - name: a
    model: m.onnx
    inputs: {x: {shape: [1, 4], dtype: float32, encoding: other}}
    calibration: {generator: "gens:floats", samples: 4, held_out: 1}
    thresholds: {outputs: {y: {max_abs: 0.5}}}
  - name: b.two
    model: two.onnx
    inputs:
      ids: {value: [1, 2, 3, 4], dtype: int64}
      x: {value: 0.5}
    calibration: {input_list: cal.txt}
    sdk: {timeout: 60}
""",
    """\
x-common: &common
  model: m.onnx
  inputs: {x: {shape: [1, 4]}}
  thresholds: {cosine: 0.9}
exports:
  - <<: *common
    name: up
    calibration: {generator: "gens:floats"}
  - <<: [*common]
    name: down
    calibration: {from: {export: up, outputs: {y: x}}}
    board: kit
boards:
  kit: {transport: local, soc: QCS6490, timeout_s: 30, env: {A: 1}}
""",
    """\
exports:
  - name: p
    model: m.onnx
    opset: 17
    native_outputs: true
    quantization: {overrides: enc.json, float_fallback: true, float_bitwidth: 16}
""",
]

FRAGMENTS = [
    "&a ", "*a", "&b [*a, *a, *a]", "<<: *a\n", "<<: [*a, *b]\n", "!!map ", "!!seq ", "!!str ",
    "!!int ", "!!float ", "!!bool ", "!!binary ", "!!set ", "!!omap ", "!!timestamp ",
    "!!python/object:os.system ", "!local ", "! ", "? ", "? [a, b]\n: 1\n", "[", "]", "{", "}",
    "- ", ": ", ",", "\t", "\n", "\n  ", "'", '"', "|\n", ">-\n", "~", "null", ".nan", ".NaN",
    ".inf", "-.inf", "99999999999999999999", "1" * 400, "1e999", "0b_", "0x_", "-0", "4.0",
    "2024-01-01", "=", "<<", "on", "yes", "\x00", "\x07", "\x85", "\u2028", "\ufeff", "\r",
    "%YAML 1.1\n", "%TAG ! tag:x,2002:\n", "---\n", "...\n", "# c\n", "pkg:__main__/x.onnx",
    "pkg:os/x", "~nosuchuser_qnn_ci/m.onnx", "__main__:f", "gens:floats", "x" * 300,
    "[" * 80 + "]" * 80, "{a: " * 70 + "1" + "}" * 70, "m.onnx", "two.onnx", "cal.txt",
    "name: a\n", "model: m.onnx\n", "inputs: {1: {shape: [1]}}\n", "value: [1, 2.5]",
    "shape: [0]", "thresholds: {cosine: .nan}", "defaults: {}", "exports: []", "&x {k: *x}",
]

KEYS = ["version", "defaults", "boards", "exports", "name", "model", "inputs", "x", "ids",
        "y", "shape", "dtype", "encoding", "value", "calibration", "samples", "held_out",
        "input_list", "generator", "from", "export", "outputs", "depends", "quantization",
        "act_bitwidth", "overrides", "target", "soc", "lib_target", "thresholds", "cosine",
        "snr", "max_abs", "board", "sdk", "root", "timeout", "sim", "opset", "native_outputs",
        "transport", "host", "port", "env", "timeout_s", "x-any", "<<", "", "ü", "a" * 200]

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(),
    st.sampled_from([0, -1, 1, 4, 7, 16, 17, 100, 2**31, 2**63, -2**63, 2**64, 10**30,
                     0.5, 4.0, -0.0, 1e39, 1e308, float("nan"), float("inf"), float("-inf")]),
    st.sampled_from(["m.onnx", "two.onnx", "gens:floats", "QCS6490", "float32", "int64",
                     "other", "local", "a", "up", "", "pkg:__main__/m.onnx", "~x/y",
                     "m\x00.onnx", "x" * 300, "/", ".", "..", "8", "16"]),
    st.text(max_size=20))

VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8),
                                            inner, max_size=4)),
    max_leaves=12)

GEN = """
import numpy as np

def floats(count):
    for _ in range(count):
        yield {"x": np.zeros((1, 4), np.float32)}
"""


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    """A folder with real models, a generator module, an input list and encodings."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        scale_model(root / "m.onnx", dims=[1, 4])
        two_input_model(root / "two.onnx")
        (root / "gens.py").write_text(GEN)
        (root / "cal.txt").write_text("")
        (root / "enc.json").write_text("{}")
        yield root


def test_seeds_are_valid(project: Path) -> None:
    """The mutations start from manifests that load (so they reach deep checks)."""
    for seed in SEEDS:
        (project / "qnn-ci.yaml").write_text(seed)
        assert isinstance(load_manifest(project / "qnn-ci.yaml"), Manifest)


def check(path: Path) -> None:
    """The only outcomes allowed: a Manifest, or one line naming the file."""
    try:
        result = load_manifest(path)
    except UserError as exc:
        text = exc.oneline()
        assert len(text.splitlines()) == 1, text
        assert str(path.name) in text, text
        return
    assert isinstance(result, Manifest)


def _spots(data: bytes) -> list[int]:
    """Where a value or an entry starts: after `: ` and `- `, and at line starts."""
    out = [0]
    for sep in (b": ", b"- ", b"\n"):
        at = data.find(sep)
        while at >= 0:
            out.append(at + len(sep))
            at = data.find(sep, at + 1)
    return out


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid manifest with a few text mutations, mostly at token boundaries so
    most of them still parse and reach the manifest checks."""
    data = bytearray(draw(st.sampled_from(SEEDS)).encode())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["value", "value", "value", "line", "fragment", "delete",
                                   "byte"]))
        if op in ("value", "line"):
            spot = draw(st.sampled_from(_spots(bytes(data))))
            if op == "value":   # replace the rest of the token with a fragment
                stop = spot
                while stop < len(data) and data[stop:stop + 1] not in (b"\n", b",", b"}", b"]"):
                    stop += 1
                if draw(st.booleans()):
                    stop = spot
                data[spot:stop] = draw(st.sampled_from(FRAGMENTS)).encode()
            else:               # a whole line, indented like the one it goes before
                indent = len(data[spot:]) - len(data[spot:].lstrip(b" "))
                line = draw(st.sampled_from(FRAGMENTS)).strip("\n")
                data[spot:spot] = b" " * indent + line.encode() + b"\n"
        elif op == "fragment":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(FRAGMENTS)).encode()
        elif op == "delete":
            at = draw(st.integers(0, len(data)))
            del data[at:at + draw(st.integers(1, 20))]
        else:
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
    return bytes(data)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


@st.composite
def rewritten(draw: st.DrawFn) -> str:
    """A valid manifest with a few values replaced or keys added, as YAML or JSON."""
    data = yaml.safe_load(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)[1:]))
        new = draw(st.one_of(SCALARS, SCALARS, VALUES))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict) and draw(st.integers(0, 3)) == 0:
            parent[draw(st.sampled_from(KEYS))] = new
        else:
            parent[path[-1]] = new
    if draw(st.booleans()):
        return json.dumps(data, allow_nan=True, ensure_ascii=False)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, allow_unicode=draw(st.booleans()))


ODD_NUMBERS = st.sampled_from([0, -1, 0.5, 2**31, 2**63, 10**20, 1e39, float("nan"),
                               float("inf"), float("-inf"), True, "4", None])
ODD_TEXT = st.sampled_from(["", "missing.onnx", "gens:nothing", "__main__:f", "nomod_qnn_ci:f",
                            "pkg:__main__/m.onnx", "pkg:os/m.onnx", "pkg:qnn_ci/m.onnx",
                            "~nosuchuser_qnn_ci/m.onnx", "m\x00.onnx", "x" * 300, "/", "..",
                            "a\nb", "a\rb", "a\u2028b", "SM9999", "y", "z", "q"])


def odd(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any] = ODD_NUMBERS
        ) -> st.SearchStrategy[Any]:
    """Mostly a good value, sometimes an odd one: most manifests pass the schema and
    reach the checks behind it, each with one or two odd values."""
    return st.one_of(*[good] * 12, bad)


def ints(*values: int) -> st.SearchStrategy[Any]:
    return odd(st.sampled_from(values))


def texts(*values: str) -> st.SearchStrategy[Any]:
    return odd(st.sampled_from(values), ODD_TEXT)


SHAPES = st.lists(ints(1, 4, 2, 128, 2**31 - 1), max_size=4)
LEAF_VALUES = st.recursive(
    st.sampled_from([0, 1, -3, 0.5, 16000, True, 2**31, 2**63, -2**63 - 1, 10**20, 1e39,
                     float("nan"), float("inf"), None, "a"]),
    lambda inner: st.lists(inner, max_size=4), max_leaves=8)
BOUNDS = st.fixed_dictionaries({}, optional={
    "cosine": odd(st.sampled_from([0.9, 0.99, 1, -1])), "snr": odd(st.sampled_from([20, -5.5])),
    "psnr": odd(st.just(30)), "max_abs": odd(st.sampled_from([0, 0.5])),
    "mean_abs": odd(st.just(0.1))})


SETTINGS: dict[str, st.SearchStrategy[Any]] = {
    "inputs": st.dictionaries(texts("x", "ids"), st.fixed_dictionaries({}, optional={
        "shape": SHAPES, "dtype": texts("float32", "int64", "bool", "float16", "uint8"),
        "encoding": texts("other", "rgb"), "value": LEAF_VALUES}), max_size=2),
    "opset": ints(13, 17, 1000),
    "calibration": st.one_of(
        st.fixed_dictionaries({}, optional={"samples": ints(1, 4), "held_out": ints(0, 1),
                                            "generator": texts("gens:floats"),
                                            "depends": st.lists(texts("cal.txt", "*.txt"),
                                                                max_size=2)}),
        st.fixed_dictionaries({"input_list": texts("cal.txt")}),
        st.fixed_dictionaries({"from": texts("a", "b", "up") | st.fixed_dictionaries(
            {"export": texts("a", "b", "up")}, optional={"outputs": st.dictionaries(
                texts("y", "z"), texts("x", "ids"), max_size=2)})})),
    "quantization": st.fixed_dictionaries({}, optional={
        "act_bitwidth": ints(8, 16), "percentile": odd(st.just(99.9)),
        "overrides": texts("enc.json"), "per_channel": st.booleans()}),
    "target": st.fixed_dictionaries({}, optional={
        "soc": texts("QCS6490", "SM8550"), "lib_target": texts("aarch64-oe-linux-gcc11.2")}),
    "thresholds": st.tuples(BOUNDS, st.dictionaries(texts("y", "z"), BOUNDS, max_size=2)).map(
        lambda t: {**t[0], "outputs": t[1]}),
    "sdk": st.fixed_dictionaries({}, optional={
        "root": texts("sdk"), "esdk_env": texts("env.sh"), "timeout": odd(st.just(60))}),
    "sim": st.fixed_dictionaries({}, optional={"samples": ints(1, 2)}),
    "board": texts("kit"),
    "native_outputs": st.booleans(),
}
BOARD = st.fixed_dictionaries(
    {"transport": st.just("local")},
    optional={"soc": texts("QCS6490"), "timeout_s": odd(st.just(30)), "retries": ints(0, 3),
              "env": st.dictionaries(st.sampled_from(["A", "B_1"]), odd(st.just("v")),
                                     max_size=2)})
NAMES = st.sampled_from(["a", "b", "up", "a.b-c", "n" * 100, "n" * 101, "a/b", "", "a", "b",
                         "up", "a", "b", "up"])


@st.composite
def settings_block(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(list(SETTINGS)), max_size=5, unique=True))
    return {k: draw(SETTINGS[k]) for k in keys}


@st.composite
def structured(draw: st.DrawFn) -> str:
    """Manifests of the right shape with a few odd values, so most pass the schema
    and reach the checks behind it (paths, models, values, `from:` chains)."""
    exports = []
    for _ in range(draw(st.integers(1, 3))):
        e = {"name": draw(NAMES),
             "model": draw(texts("m.onnx", "two.onnx"))}
        exports.append({**e, **draw(settings_block())})
    data: dict[str, Any] = {"exports": exports}
    if draw(st.booleans()):
        data["defaults"] = draw(settings_block())
    if draw(st.booleans()):
        data["boards"] = {"kit": draw(BOARD)}
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, allow_unicode=True)


@given(text=structured())
def test_structured_manifest(project: Path, text: str) -> None:
    path = project / "qnn-ci.yaml"
    path.write_text(text, encoding="utf-8")
    check(path)


@given(text=mutated())
def test_mutated_manifest(project: Path, text: bytes) -> None:
    path = project / "qnn-ci.yaml"
    path.write_bytes(text)
    check(path)


@given(text=rewritten())
def test_rewritten_manifest(project: Path, text: str) -> None:
    path = project / "qnn-ci.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check(path)


@given(data=st.binary(max_size=600) | st.text(
    alphabet=st.sampled_from(list("ab:-[]{},&*!?|>'\"#%@`~<=.0123456789 \n\t")),
    max_size=300).map(str.encode))
@pytest.mark.parametrize("loader", yaml_lines._LOADERS, ids=lambda c: c.__name__)
def test_yaml_loader_on_any_bytes(project: Path, monkeypatch: pytest.MonkeyPatch, loader: type,
                                  data: bytes) -> None:
    monkeypatch.setattr(yaml_lines, "_LOADERS", [loader])
    path = project / "any.yaml"
    path.write_bytes(data)
    try:
        load_yaml_with_lines(path)
    except UserError as exc:
        assert len(exc.oneline().splitlines()) == 1 and path.name in exc.oneline()
