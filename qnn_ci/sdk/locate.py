"""Find the QAIRT SDK (and the eSDK environment script) for an export.

Precedence: the manifest's ``sdk.root`` / ``sdk.esdk_env``, then the run's
``Environment`` (``--qnn-sdk-root``), then ``$QNN_SDK_ROOT`` / ``$ESDK_ENV``.
``sdk_problem`` names the exact missing piece as one line, which stages use as
their skip reason.

The SDK version is read without running anything: ``<root>/sdk.yaml``
(``version: 2.31.0.250130``) or a version in the root folder's name
(``.../qairt/2.31.0.250130``). When neither says, it stays ``None`` until a
converted source reports ``QNN_SDK_VERSION``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from qnn_ci.errors import UserError
from qnn_ci.spec import ExportSpec
from qnn_ci.stage import Environment

log = logging.getLogger(__name__)

HOST_TOOLS_DIR = Path("bin") / "x86_64-linux-clang"
ENVSETUP = Path("bin") / "envsetup.sh"
CONVERTER = "qnn-onnx-converter"
LIB_GENERATOR = "qnn-model-lib-generator"

_VERSION_RE = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+)(?:\.\d+)?(?![\d])")


@dataclass
class Sdk:
    root: Path
    esdk_env: Path | None
    version: str | None
    # The environment the tools start from (the run's Environment.environ); None:
    # this process's.
    environ: dict[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def tools_dir(self) -> Path:
        return self.root / HOST_TOOLS_DIR

    @property
    def envsetup(self) -> Path:
        return self.root / ENVSETUP

    def tool(self, name: str) -> Path:
        return self.tools_dir / name

    def describe(self) -> str:
        return f"QAIRT SDK {self.version or '(version unknown)'} at {self.root}"


def _pick(first: Path | None, second: Path | None, environ: dict[str, str],
          var: str) -> Path | None:
    if first is not None:
        return Path(first)
    if second is not None:
        return Path(second)
    value = environ.get(var, "").strip()
    return Path(value) if value else None


def sdk_root_for(export: ExportSpec, env: Environment) -> Path | None:
    return _pick(export.sdk.root, env.sdk_root, env.environ, "QNN_SDK_ROOT")


def esdk_env_for(export: ExportSpec, env: Environment) -> Path | None:
    return _pick(export.sdk.esdk_env, env.esdk_env, env.environ, "ESDK_ENV")


def version_from_root(root: Path) -> str | None:
    """``major.minor.patch`` from ``<root>/sdk.yaml`` or the root folder's name."""
    sdk_yaml = root / "sdk.yaml"
    try:
        text = sdk_yaml.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.strip().lower().startswith("version:"):
            match = _VERSION_RE.search(line.split(":", 1)[1])
            if match:
                return match.group(1)
    for part in (root.name, root.parent.name):
        match = _VERSION_RE.fullmatch(part) or _VERSION_RE.search(part)
        if match:
            return match.group(1)
    return None


def sdk_problem(export: ExportSpec, env: Environment, *,
                tools: tuple[str, ...] = (CONVERTER,), need_esdk: bool = False) -> str | None:
    """The exact missing piece as one line, or None when the SDK looks usable."""
    root = sdk_root_for(export, env)
    if root is None:
        return "QNN_SDK_ROOT is not set"
    if not root.is_dir():
        return f"QNN SDK root {root} does not exist"
    if not (root / ENVSETUP).is_file():
        return f"{root / ENVSETUP} is missing (not a QAIRT SDK root?)"
    for tool in tools:
        if not (root / HOST_TOOLS_DIR / tool).is_file():
            return f"{tool} not found in {root / HOST_TOOLS_DIR}"
    if need_esdk:
        esdk = esdk_env_for(export, env)
        if esdk is None:
            return f"ESDK_ENV is not set (needed by {LIB_GENERATOR} for aarch64 targets)"
        if not esdk.is_file():
            return f"eSDK environment script {esdk} does not exist"
    return None


def find_sdk(export: ExportSpec, env: Environment, *,
             tools: tuple[str, ...] = (CONVERTER,), need_esdk: bool = False) -> Sdk:
    """The SDK to use for ``export``; UserError naming the missing piece otherwise."""
    problem = sdk_problem(export, env, tools=tools, need_esdk=need_esdk)
    if problem is not None:
        key = "sdk.esdk_env" if "ESDK" in problem or "eSDK" in problem else "sdk.root"
        raise UserError(problem, file=export.manifest, line=export.line, key=key)
    root = sdk_root_for(export, env)
    assert root is not None
    root = root.resolve()
    esdk = esdk_env_for(export, env)
    sdk = Sdk(root=root, esdk_env=esdk.resolve() if esdk is not None else None,
              version=version_from_root(root), environ=dict(env.environ))
    log.debug("using %s", sdk.describe())
    return sdk
