"""Is the simulator installed? (``onnxruntime-qnn``, the ``qnn-ci[sim]`` extra.)"""

from __future__ import annotations

import importlib.util
from functools import cache

INSTALL_HINT = "onnxruntime-qnn is not installed: pip install 'qnn-ci[sim]'"


@cache
def sim_unavailable() -> str | None:
    """None when ``onnxruntime_qnn`` is installed, else the reason (with the install
    command) to skip the simulator items. Cheap: the package is found, not imported
    (a cached or skipped run never loads onnxruntime); a broken install shows when a
    simulator stage imports it."""
    try:
        if importlib.util.find_spec("onnxruntime_qnn") is None:
            return INSTALL_HINT
    except ImportError:
        return INSTALL_HINT
    except Exception as exc:  # a broken install: say what broke
        return f"onnxruntime-qnn cannot be found ({exc}); reinstall: pip install 'qnn-ci[sim]'"
    return None


def versions() -> dict[str, str]:
    """onnxruntime and onnxruntime-qnn versions, for cache keys and reports."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in ("onnxruntime", "onnxruntime-qnn"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "absent"
    return out
