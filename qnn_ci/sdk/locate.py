"""Find the QAIRT SDK (and the eSDK environment script) for an export.

Precedence: the manifest's ``sdk.root`` / ``sdk.esdk_env``, then the run's
``Environment`` (``--qnn-sdk-root``), then ``$QNN_SDK_ROOT`` / ``$ESDK_ENV``.

Skip only what is not configured at all: ``sdk_unavailable`` gives a skip
reason when no SDK root (or, for a cross target, no eSDK script) is named
anywhere. One that IS named but is not an SDK (missing folder, no
``bin/envsetup.sh``, no tool, no eSDK script) is a mistake a green CI run would
hide: ``find_sdk`` raises a one-line ``UserError`` naming where it came from
(``sdk.root`` at its manifest line, ``--qnn-sdk-root`` or ``QNN_SDK_ROOT``), so
the stage is an ERROR and the run exits 2. ``sdk_problem`` names the exact
missing piece as one line.

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

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment
from qnn_ci.errors import UserError
from qnn_ci.manifest.yaml_lines import load_yaml_with_lines

log = logging.getLogger(__name__)

HOST_TOOLS_DIR = Path("bin") / "x86_64-linux-clang"
ENVSETUP = Path("bin") / "envsetup.sh"
CONVERTER = "qnn-onnx-converter"
LIB_GENERATOR = "qnn-model-lib-generator"
# The DLC route's host tools (docs/dlc-route.md).
DLC_CONVERTER = "qairt-converter"
DLC_QUANTIZER = "qairt-quantizer"
DLC_INFO = "qairt-dlc-info"
CONTEXT_GENERATOR = "qnn-context-binary-generator"
HOST_LIB_DIR = Path("lib") / "x86_64-linux-clang"

_VERSION_RE = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+)(?:\.\d+)?(?![\d])")


@dataclass
class Sdk:
    """A located QAIRT SDK: its root, eSDK environment script and version."""

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

    def host_lib(self, name: str) -> Path:
        """A library of the SDK's host folder (``lib/x86_64-linux-clang/<name>``)."""
        return self.root / HOST_LIB_DIR / name

    def describe(self) -> str:
        return f"QAIRT SDK {self.version or '(version unknown)'} at {self.root}"


@dataclass(frozen=True)
class Configured:
    """A path the user configured and where it was said: a manifest key (with its
    file and line), a command-line option or an environment variable."""

    path: Path
    key: str                      # "sdk.root", "--qnn-sdk-root", "QNN_SDK_ROOT", ...
    file: Path | None = None      # the manifest, for sdk.* keys
    line: int | None = None

    def error(self, problem: str, hint: str) -> UserError:
        return UserError(f"{problem}; {hint}", file=self.file, line=self.line, key=self.key)


def _manifest_line(export: ExportSpec, *key: str) -> int:
    """The line of ``sdk.<key>`` for ``export`` in its manifest (the export's own
    entry, else ``defaults``); the export's line when it cannot be found."""
    try:
        _, lines = load_yaml_with_lines(export.manifest)
    except Exception:                # only a line number is at stake
        return export.line
    idx = next((k[1] for k, v in lines.items()
                if len(k) == 2 and k[0] == "exports" and v == export.line), None)
    for path in (("exports", idx, "sdk", *key), ("defaults", "sdk", *key)):
        if path in lines:
            return lines[path]
    return export.line


def _pick(export: ExportSpec, manifest_value: Path | None, manifest_key: str,
          env_value: Path | None, option: str, environ: dict[str, str],
          var: str) -> Configured | None:
    if manifest_value is not None:
        return Configured(Path(manifest_value), f"sdk.{manifest_key}", export.manifest,
                          _manifest_line(export, manifest_key))
    value = environ.get(var, "").strip()
    if env_value is not None:
        # The session folds $VAR into the Environment: same path, same source.
        from_var = bool(value) and Path(value) == Path(env_value)
        return Configured(Path(env_value), var if from_var else option)
    return Configured(Path(value), var) if value else None


def sdk_root_source(export: ExportSpec, env: Environment) -> Configured | None:
    """The configured SDK root and where it came from; None when none is."""
    return _pick(export, export.sdk.root, "root", env.sdk_root, "--qnn-sdk-root / --sdk-root",
                 env.environ, "QNN_SDK_ROOT")


def esdk_env_source(export: ExportSpec, env: Environment) -> Configured | None:
    """The configured eSDK environment script and where it came from."""
    return _pick(export, export.sdk.esdk_env, "esdk_env", env.esdk_env, "the esdk_env option",
                 env.environ, "ESDK_ENV")


def sdk_root_for(export: ExportSpec, env: Environment) -> Path | None:
    found = sdk_root_source(export, env)
    return found.path if found else None


def esdk_env_for(export: ExportSpec, env: Environment) -> Path | None:
    found = esdk_env_source(export, env)
    return found.path if found else None


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


NO_SDK = "QNN_SDK_ROOT is not set"
NO_ESDK = f"ESDK_ENV is not set (needed by {LIB_GENERATOR} for aarch64 Linux targets)"


def _root_problem(root: Path, tools: tuple[str, ...]) -> str | None:
    if not root.is_dir():
        return f"QNN SDK root {root} does not exist"
    if not (root / ENVSETUP).is_file():
        return f"{root / ENVSETUP} is missing (not a QAIRT SDK root?)"
    for tool in tools:
        if not (root / HOST_TOOLS_DIR / tool).is_file():
            return f"{tool} not found in {root / HOST_TOOLS_DIR}"
    return None


def sdk_problem(export: ExportSpec, env: Environment, *,
                tools: tuple[str, ...] = (CONVERTER,), need_esdk: bool = False) -> str | None:
    """The exact missing piece as one line, or None when the SDK looks usable."""
    root = sdk_root_for(export, env)
    if root is None:
        return NO_SDK
    problem = _root_problem(root, tools)
    if problem:
        return problem
    if need_esdk:
        esdk = esdk_env_for(export, env)
        if esdk is None:
            return NO_ESDK
        if not esdk.is_file():
            return f"eSDK environment script {esdk} does not exist"
    return None


def sdk_unavailable(export: ExportSpec, env: Environment, *,
                    need_esdk: bool = False) -> str | None:
    """A skip reason only when nothing is configured: no SDK root anywhere (or, with
    ``need_esdk``, no eSDK script anywhere). A configured path that is wrong is not
    a skip: ``find_sdk`` reports it as bad input."""
    if sdk_root_source(export, env) is None:
        return NO_SDK
    if need_esdk and esdk_env_source(export, env) is None:
        return NO_ESDK
    return None


_ROOT_HINT = {
    "sdk.root": "set sdk.root to a QAIRT SDK root (the folder holding bin/envsetup.sh)",
    "QNN_SDK_ROOT": "set QNN_SDK_ROOT to a QAIRT SDK root (the folder holding "
                    "bin/envsetup.sh), or unset it to skip the SDK stages",
}
_DEFAULT_ROOT_HINT = "pass a QAIRT SDK root (the folder holding bin/envsetup.sh)"


def find_sdk(export: ExportSpec, env: Environment, *,
             tools: tuple[str, ...] = (CONVERTER,), need_esdk: bool = False) -> Sdk:
    """The SDK to use for ``export``; a one-line UserError naming the missing piece
    and the key, option or variable it was configured by otherwise."""
    source = sdk_root_source(export, env)
    if source is None:
        raise UserError(f"{NO_SDK}: no QAIRT SDK is configured (sdk.root, --qnn-sdk-root "
                        f"or QNN_SDK_ROOT)", file=export.manifest, line=export.line,
                        key="sdk.root")
    problem = _root_problem(source.path, tools)
    if problem:
        raise source.error(problem, _ROOT_HINT.get(source.key, _DEFAULT_ROOT_HINT))
    esdk_source = esdk_env_source(export, env)
    if need_esdk:
        if esdk_source is None:
            raise UserError(NO_ESDK, file=export.manifest, line=export.line,
                            key="sdk.esdk_env")
        if not esdk_source.path.is_file():
            raise esdk_source.error(
                f"eSDK environment script {esdk_source.path} does not exist",
                f"set {esdk_source.key} to the eSDK's environment-setup-* script")
    root = source.path.resolve()
    esdk = esdk_source.path if esdk_source else None
    sdk = Sdk(root=root, esdk_env=esdk.resolve() if esdk is not None else None,
              version=version_from_root(root), environ=dict(env.environ))
    log.debug("using %s", sdk.describe())
    return sdk
