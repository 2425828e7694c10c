"""Write the HTP backend-extension config the SDK tools read (``--config_file`` of
qnn-context-binary-generator and qnn-net-run; formats page, sections 4 and 8).

Two files: the inner ``htp_config.json`` (``graphs``: the manifest's graph settings
for the graph names the converter wrote; ``devices``: ``soc_model`` / ``dsp_arch``
from ``target.soc``) and the wrapper ``{"backend_extensions": {"shared_library_path":
"libQnnHtpNetRunExtensions.so", "config_file_path": <inner>}}``. The SDK falls back to
its defaults for a ``graph_names`` entry that matches no graph, without a word, so
the names are read from the converter's ``.cpp``, never guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qnn_ci.engine.spec import HtpConfigSpec
from qnn_ci.tables import HTP_CONFIG_FILE, HTP_CONFIG_WRAPPER, HTP_EXTENSIONS_LIB, SocInfo
from qnn_ci.util.safe_read import read_text

# `VALIDATE(<var>.initialize(backendHandle, interface, contextHandle, "<graph>", ...`
_INITIALIZE = re.compile(r"\.initialize\(\s*[^,()]+,\s*[^,()]+,\s*[^,()]+,\s*\"([^\"]+)\"")
MAX_CPP = 256 << 20


def graph_names_from_cpp(cpp: Path) -> list[str]:
    """The graph names a converter ``.cpp`` gives its graphs (in order, once each)."""
    text = read_text(cpp, cap=MAX_CPP, what="generated model source")
    return list(dict.fromkeys(_INITIALIZE.findall(text)))


def render_htp_config(spec: HtpConfigSpec, soc: SocInfo | None,
                      graph_names: Sequence[str]) -> dict[str, Any]:
    """The inner config: one ``graphs`` entry naming every graph (when a graph key is
    set), one ``devices`` entry (when the SoC is known)."""
    out: dict[str, Any] = {}
    settings = spec.graph_settings()
    if settings:
        out["graphs"] = [{"graph_names": list(graph_names), **settings}]
    if soc is not None:
        out["devices"] = [{"soc_model": soc.sdk_soc_id, "dsp_arch": soc.arch_name}]
    return out


def render_wrapper(inner_path_text: str) -> dict[str, Any]:
    return {"backend_extensions": {"shared_library_path": HTP_EXTENSIONS_LIB,
                                   "config_file_path": inner_path_text}}


def write_htp_config(spec: HtpConfigSpec, soc: SocInfo | None, graph_names: Sequence[str],
                     folder: Path, *, inner_path_text: str | None = None) -> Path:
    """Write the inner file and the wrapper into ``folder``; the wrapper's path. The
    wrapper names the inner file as ``inner_path_text`` (its path where the tool runs,
    e.g. on the board), else by its absolute local path."""
    folder.mkdir(parents=True, exist_ok=True)
    inner = folder / HTP_CONFIG_FILE
    inner.write_text(json.dumps(render_htp_config(spec, soc, graph_names), indent=2) + "\n",
                     encoding="utf-8")
    wrapper = folder / HTP_CONFIG_WRAPPER
    wrapper.write_text(json.dumps(render_wrapper(inner_path_text or str(inner.resolve())),
                                  indent=2) + "\n", encoding="utf-8")
    return wrapper
