"""The text of the files `qnn-ci init` writes: the manifest, the calibration
generator skeleton and the GitHub workflow.

Everything read from the model (tensor names, dim_params, file names) reaches these
files quoted: a YAML scalar is plain only when it cannot be read as anything but
that text, and model text in a comment or in Python is written with ``repr`` (no
line break, no quote, can ever end the comment or the string). Nothing from the
model goes into a docstring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from qnn_ci.tables import DEFAULT_COSINE, SocInfo

# Pinned as in action.yml and examples/workflows/ (tests/core/test_action.py holds them
# pinned by commit there).
CHECKOUT = "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1"
SETUP_PYTHON = "actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97 # v7.0.0"
QNN_CI_GIT = "git+https://github.com/qnn-ci/qnn-ci@v0"
PROBABILITY_MAX_ABS = 0.05

_PLAIN = re.compile(r"(\.{0,2}/)*[A-Za-z_][A-Za-z0-9_./-]*(:[A-Za-z0-9_./-]+)*\Z")
# Words YAML 1.1 (PyYAML) reads as booleans or null, whatever their case.
_YAML_WORDS = frozenset({"y", "yes", "n", "no", "on", "off", "true", "false", "null"})


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar that reads back as exactly this string."""
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def shown(text: str) -> str:
    """Model text for a comment: as is when plain, else its repr (one line)."""
    return text if _PLAIN.match(text) else repr(text)


@dataclass(frozen=True)
class FreeDim:
    """A dim the model leaves open, and the size written for it."""

    index: int
    label: str          # "dim_param 'N'", "unnamed", "-1 in the model"
    value: int
    given: bool         # from --dim: the user's size, no TODO


@dataclass
class InputPlan:
    """One graph input as the manifest writes it."""

    name: str
    dtype: str                          # numpy name, "?" when the model does not say
    model_dims: tuple[object, ...] | None
    shape: tuple[int, ...] | None       # None: the model gives no rank
    free: list[FreeDim] = field(default_factory=list)
    integer: bool = False               # encoding: other

    def dims_text(self) -> str:
        if self.model_dims is None:
            return "(no shape)"
        return "[" + ", ".join("?" if d is None else (repr(d) if isinstance(d, str) else str(d))
                               for d in self.model_dims) + "]"


@dataclass(frozen=True)
class OutputPlan:
    """One graph output as the manifest will judge it: its kind picks the thresholds."""

    name: str
    dtype: str
    kind: str           # "probabilities", "integer", "float"
    producer: str       # op type that makes it ("" when a graph input passes through)


@dataclass
class InitPlan:
    """Everything the three files say."""

    export: str
    model_ref: str              # as the manifest writes `model:`
    model_file: str             # the model's file name, for comments
    inputs: list[InputPlan]
    outputs: list[OutputPlan]
    soc: SocInfo | None
    module: str                 # the calibration generator's module
    manifest_rel: str           # the manifest's path from the repository root (workflow)
    wheel: tuple[str, str] | None = None    # (distribution, version) shipping the model


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def manifest_text(plan: InitPlan) -> str:
    lines = [
        f"# Written by `qnn-ci init` from {shown(plan.model_file)}: a start to read and edit.",
        "# Every key: the README's \"The manifest\" (`qnn-ci schema` for your editor).",
        "# Check it with: qnn-ci run qnn-ci.yaml --stage static_shapes",
        "version: 1",
        "",
        "exports:",
        f"  - name: {yaml_scalar(plan.export)}",
        f"    model: {yaml_scalar(plan.model_ref)}",
        "    # route: classic       # qnn-onnx-converter -> libmodel.so -> a context binary built",
        "    #                      # on the board; or dlc: qairt-converter -> a DLC -> a binary",
        "    #                      # built on the host (README: \"Choosing a route\")",
        "    # board: my-board      # the board stages' board (qnn-boards.yaml): ssh, adb,",
        "    #                      # local, or an AI Hub device (README: \"No board? AI Hub\")",
    ]
    if plan.soc is not None:
        fp16 = "FP16" if plan.soc.fp16 else "no FP16"
        lines += ["    target:",
                  f"      soc: {plan.soc.name}            # HTP {plan.soc.arch_name}, {fp16}",
                  "      # TODO (SDK stages): the qnn-model-lib-generator -t target your board",
                  "      # runs; model_lib needs it, e.g.",
                  "      # lib_target: aarch64-oe-linux-gcc11.2"]
    else:
        lines += ["    # TODO: the SoC you ship on (or qnn-ci init --soc); the simulator stages",
                  "    # skip without it. And for the SDK stages, the qnn-model-lib-generator -t",
                  "    # target your board runs (model_lib needs it):",
                  "    # target:",
                  "    #   soc: QCS6490",
                  "    #   lib_target: aarch64-oe-linux-gcc11.2"]
    lines.append("    inputs:" if plan.inputs else "    inputs: {}          # the model takes none")
    for inp in plan.inputs:
        lines += _input_lines(inp)
    lines += [
        "    calibration:",
        f"      generator: {plan.module}:samples   # TODO: fill {plan.module}.py with real inputs",
        "      samples: 100         # calibrate on 100 samples ...",
        "      held_out: 4          # ... and keep 4 more back for the numeric checks",
        "      # depends: [data/calibration/**]   # the data files it reads (cache key)",
        "    thresholds:",
        f"      cosine: {DEFAULT_COSINE}         # every output, fp32 vs quantized",
    ]
    lines += _output_lines(plan.outputs)
    return "\n".join(lines) + "\n"


def _input_lines(inp: InputPlan) -> list[str]:
    out: list[str] = []
    if inp.shape == ():
        out.append(f"      # TODO: {shown(inp.name)} is a scalar: when the model needs one value "
                   "there (a sample rate), add value: N")
    for d in inp.free:
        if d.given:
            continue
        out.append(f"      # TODO: {shown(inp.name)} dim {d.index}: the model leaves this dim free "
                   f"({d.label}); {d.value} here: pin the size you ship")
    parts: list[str] = []
    if inp.shape is not None:
        parts.append(f"shape: {_shape_text(inp.shape)}")
    else:
        out.append(f"      # TODO: the model gives {shown(inp.name)} no shape: add "
                   "shape: [...] (static_shapes cannot pin it without)")
    if inp.dtype != "?":
        parts.append(f"dtype: {inp.dtype}")
    if inp.integer:
        parts.append("encoding: other")
    body = "{" + ", ".join(parts) + "}"
    tail = "   # integer input: kept unquantized" if inp.integer else ""
    out.append(f"      {yaml_scalar(inp.name)}: {body}{tail}")
    return out


def _output_lines(outputs: list[OutputPlan]) -> list[str]:
    probs = [o for o in outputs if o.kind == "probabilities"]
    ints = [o for o in outputs if o.kind == "integer"]
    lines: list[str] = []
    if probs:
        lines.append("      outputs:")
        for o in probs:
            lines.append(f"        {yaml_scalar(o.name)}: {{max_abs: {PROBABILITY_MAX_ABS}}}   "
                         f"# probabilities ({o.producer}): at most 5 points off")
    for o in ints:
        lines.append(f"      # {shown(o.name)}: {o.dtype} output (ids, counts, masks): give it "
                     "max_abs: 0 under outputs: to ask for the same values")
    return lines


_NP_NAMES = {"bool": "bool_", "?": "float32"}


def generator_text(plan: InitPlan) -> str:
    width = max((len(repr(i.name)) for i in plan.inputs), default=0)
    table = [f"#   {repr(i.name).ljust(width)}  {i.dtype:8} "
             f"{_shape_text(i.shape) if i.shape is not None else '(no shape)'}"
             for i in plan.inputs]
    example = [f"    #             {i.name!r}: your_{'ids' if i.integer else 'input'}"
               f"(item).astype(np.{_NP_NAMES.get(i.dtype, i.dtype)}),"
               for i in plan.inputs]
    return "\n".join([
        f'"""Calibration samples for the qnn-ci export {plan.export!r}.',
        "",
        "Written by `qnn-ci init`, to be filled in by you. The calibration stage calls",
        "``samples(count)`` and writes every sample it yields for the converter and the",
        "simulator: activation ranges are measured on them, and the last ``held_out``",
        "samples check the numerics. So they must be real inputs, preprocessed exactly as",
        "your application feeds the model (not random tensors: ranges measured on noise",
        "give a model that is wrong on real data). Until this is filled in, the calibration",
        "stage stops with the TODO below, and the stages that need its data are blocked.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Iterator",
        "",
        "import numpy as np",
        "",
        "# What each sample holds: {input name: array} in this dtype and shape (the shapes",
        "# pinned in qnn-ci.yaml; the calibration stage checks every sample against them):",
        *table,
        "",
        "",
        "def samples(count: int) -> Iterator[dict[str, np.ndarray]]:",
        '    """Up to ``count`` real samples, each {input name: array}."""',
        "    # TODO: replace the raise below with your data, for example:",
        "    #     for item in your_dataset()[:count]:",
        "    #         yield {",
        *example,
        "    #         }",
        "    # and list the data files it reads under calibration.depends in qnn-ci.yaml.",
        "    raise NotImplementedError(",
        '        f"{__name__}.py has no calibration data yet: make samples() yield real inputs "',
        '        "(the TODO there); qnn-ci never makes calibration data up")',
        "",
    ])


def workflow_text(plan: InitPlan) -> str:
    manifest = plan.manifest_rel
    install = [f'python -m pip install "qnn-ci[sim] @ {QNN_CI_GIT}"']
    if plan.wheel is not None:
        dist, version = plan.wheel
        install.append(f'python -m pip install --no-deps "{dist}=={version}"   # ships the model')
    run_lines = [f"          {line}" for line in install]
    self_hosted = [
        "  # SDK and board stages on your own runner (the QAIRT SDK installed, a board",
        "  # declared in qnn-boards.yaml beside the manifest). Uncomment, set the paths and",
        "  # the board; keep the `if:`: a fork's pull request must never run on your machine.",
        "  # sdk-and-board:",
        "  #   if: github.event_name == 'push' || "
        "github.event.pull_request.head.repo.full_name == github.repository",
        "  #   runs-on: [self-hosted, linux, qairt]",
        "  #   timeout-minutes: 180",
        "  #   steps:",
        f"  #     - uses: {CHECKOUT}",
        "  #       with:",
        "  #         persist-credentials: false",
        "  #     - name: Install qnn-ci",
        "  #       run: |",
        "  #         python3 -m venv .venv",
        *[f"  #         .venv/bin/{line}" for line in install],
        "  #     - name: Every stage, the SDK and board ones too",
        "  #       env:",
        "  #         QNN_SDK_ROOT: /opt/qcom/aistack/qairt/2.37.1.250807",
        "  #         ESDK_ENV: /opt/qcom-linux-esdk/environment-setup-armv8-2a-qcom-linux",
        f"  #       run: .venv/bin/qnn-ci run {manifest} --board qcs6490-a "
        "--junit qnn-ci-junit.xml",
        "",
        "  ## No board on a runner? Qualcomm AI Hub runs the board stages on a real device",
        "  ## (docs/ai-hub.md): declare it in qnn-boards.yaml beside the manifest, e.g.",
        '  ##   boards: {ai-hub: {transport: ai-hub, device: "RB3 Gen 2 (Proxy)"}}',
        "  ## add the repository secret QAI_HUB_API_TOKEN, and uncomment:",
        "  # ai-hub:",
        "  #   if: github.event_name == 'push' || "
        "github.event.pull_request.head.repo.full_name == github.repository",
        "  #   runs-on: ubuntu-latest",
        "  #   timeout-minutes: 120",
        "  #   steps:",
        f"  #     - uses: {CHECKOUT}",
        "  #       with:",
        "  #         persist-credentials: false",
        f"  #     - uses: {SETUP_PYTHON}",
        "  #       with:",
        '  #         python-version: "3.11"',
        "  #     - name: Install qnn-ci",
        "  #       run: |",
        *[f"  #         {line.replace('qnn-ci[sim]', 'qnn-ci[sim,ai-hub]')}" for line in install],
        "  #     - name: Board stages on AI Hub",
        "  #       env:",
        "  #         QAI_HUB_API_TOKEN: ${{ secrets.QAI_HUB_API_TOKEN }}",
        f"  #       run: qnn-ci run {manifest} --board ai-hub --junit qnn-ci-junit.xml",
    ]
    return "\n".join([
        "# Written by `qnn-ci init`. On every pull request and push to main: the host and",
        "# simulator stages of the manifest on a GitHub-hosted runner; the SDK and board",
        "# stages skip there with the reason. Pin qnn-ci to the commit of the release you",
        "# adopt (...@<sha>), as the actions below are. Until the calibration generator",
        "# yields real data, its TODO stops the run (exit 2) on purpose.",
        "name: qnn-ci",
        "on:",
        "  pull_request:",
        "  push:",
        "    branches: [main]",
        "",
        "permissions:",
        "  contents: read",
        "",
        "jobs:",
        "  host-and-simulator:",
        "    runs-on: ubuntu-latest",
        "    timeout-minutes: 60",
        "    steps:",
        f"      - uses: {CHECKOUT}",
        "        with:",
        "          persist-credentials: false",
        f"      - uses: {SETUP_PYTHON}",
        "        with:",
        '          python-version: "3.11"',
        "      - name: Install qnn-ci",
        "        run: |",
        *run_lines,
        "      - name: Host and simulator stages",
        f"        run: qnn-ci run {manifest} --junit qnn-ci-junit.xml",
        "",
        *self_hosted,
        "",
    ])
