"""onnxruntime sessions for the simulator path, and running samples through them:
fp32 or QDQ on the CPU, a prepared EPContext model on the HTP simulator."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qnn_ci.sim.ep import capture_native_output, htp_session_options
from qnn_ci.sim.samples import Feeds
from qnn_ci.tables import SocInfo
from qnn_ci.util.cores import limit_threads

Outputs = dict[str, np.ndarray]


def cpu_session(model: Path) -> Any:
    import onnxruntime as ort

    from qnn_ci.sim.quantize import QDQ_SESSION_CONFIG

    # no spinning threads between runs: the simulator's processes share the cores
    so = limit_threads(ort.SessionOptions(), spin=False)
    so.log_severity_level = 3
    for k, v in QDQ_SESSION_CONFIG.items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(str(model), sess_options=so, providers=["CPUExecutionProvider"])


def htp_session(ctx_model: Path, soc: SocInfo, log_path: Path) -> Any:
    """A session on a prepared EPContext model, every node on the HTP simulator."""
    import onnxruntime as ort

    so = htp_session_options(soc, record_assignment=False)
    with capture_native_output(log_path):
        return ort.InferenceSession(str(ctx_model), sess_options=so)


def run_all(session: Any, samples: Sequence[Feeds], *, log_path: Path | None = None
            ) -> tuple[list[Outputs], float]:
    """Outputs per sample and the mean seconds per inference."""
    names = [o.name for o in session.get_outputs()]
    outs: list[Outputs] = []
    start = time.monotonic()
    for feeds in samples:
        if log_path is not None:
            with capture_native_output(log_path):
                values = session.run(names, feeds)
        else:
            values = session.run(names, feeds)
        outs.append(dict(zip(names, values, strict=True)))
    return outs, (time.monotonic() - start) / max(1, len(samples))
