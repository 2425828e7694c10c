"""The QNN plugin execution provider of onnxruntime-qnn, used the one way that
does not silently fall back to the CPU:

- the EP library is registered once per process and sessions get it through
  ``SessionOptions.add_provider_for_devices`` (the classic
  ``providers=["QNNExecutionProvider"]`` form runs everything on the CPU EP
  without a word);
- CPU fallback is disabled, so a session only exists when every node is on QNN;
- the SoC is passed as the NUMERIC id from ``qnn_ci.tables`` (a name, or an
  unknown arch, only warns and builds for an unknown SoC);
- the EP's native log (C++ stderr, plus a stray line on stdout) is captured
  into a file by redirecting file descriptors 1 and 2 around native calls.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qnn_ci.errors import UserError
from qnn_ci.tables import SocInfo, get_soc, soc_names
from qnn_ci.util.cores import limit_threads

log = logging.getLogger(__name__)

EP_NAME = "QNNExecutionProvider"
_lock = threading.Lock()


def sim_target(name: str | None, *, file: str | Path | None = None, line: int | None = None,
               key: str | None = None) -> SocInfo:
    """The SoC ``name`` from the SoC table, checked to be one the simulator can target."""
    if not name:
        raise UserError("no target SoC given; the simulator prepares for one SoC "
                        f"(one of: {', '.join(simulated_soc_names())})",
                        file=file, line=line, key=key)
    soc = get_soc(name, file=str(file) if file else None, line=line, key=key)
    if soc.sim_soc_id is None:
        raise UserError(f"the simulator cannot target SoC {soc.name} (no simulator id is "
                        f"known for it); simulated SoCs: {', '.join(simulated_soc_names())}",
                        file=file, line=line, key=key)
    return soc


def simulated_soc_names() -> list[str]:
    return [n for n in soc_names() if get_soc(n).sim_soc_id is not None]


def _ort() -> Any:
    import onnxruntime as ort

    return ort


def qnn_devices() -> list[Any]:
    """The QNN EP devices, registering the plugin EP library on first use."""
    ort = _ort()
    with _lock:
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
        if not devices:
            import onnxruntime_qnn

            ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
            devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise RuntimeError("onnxruntime-qnn registered no QNN device")
    return devices


def htp_backend_path() -> str:
    import onnxruntime_qnn

    return str(onnxruntime_qnn.get_qnn_htp_path())


def htp_session_options(soc: SocInfo, *, allow_cpu_fallback: bool = False,
                        record_assignment: bool = True, log_severity: int = 2,
                        config: Mapping[str, str] | None = None,
                        provider_options: Mapping[str, str] | None = None) -> Any:
    """SessionOptions that put the QNN HTP EP (simulator) in front for ``soc``."""
    if soc.sim_soc_id is None:  # callers go through sim_target(); keep the guard
        raise UserError(f"the simulator cannot target SoC {soc.name}")
    ort = _ort()
    # onnxruntime's CPU worker threads would only spin beside the simulator (which
    # keeps the cores busy itself).
    so = limit_threads(ort.SessionOptions(), spin=False)
    so.log_severity_level = log_severity
    if not allow_cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.intra_op_num_threads = 1   # every node is on the HTP: no CPU kernels to share
    if record_assignment:
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    from qnn_ci.sim.quantize import QDQ_SESSION_CONFIG

    for k, v in {**QDQ_SESSION_CONFIG, **(config or {})}.items():
        so.add_session_config_entry(k, str(v))
    options = {"backend_path": htp_backend_path(), "soc_model": str(soc.sim_soc_id)}
    options.update({k: str(v) for k, v in (provider_options or {}).items()})
    so.add_provider_for_devices(qnn_devices(), options)
    return so


@contextmanager
def capture_native_output(log_path: Path) -> Iterator[None]:
    """Append everything written to fds 1 and 2 (onnxruntime's C++ logger, the
    QNN libraries) to ``log_path`` while the block runs."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    target = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for fd in (1, 2):
            os.dup2(target, fd)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(target)


def assignment(session: Any) -> dict[str, list[tuple[str, str]]]:
    """EP name -> [(node name, op type)] from the session's own assignment record."""
    out: dict[str, list[tuple[str, str]]] = {}
    for sub in session.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).extend((n.name, n.op_type) for n in sub.get_nodes())
    return out
