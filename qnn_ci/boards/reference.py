"""The fp32 truth for a board run: the pinned ONNX model in onnxruntime on the
same samples, written in qnn-net-run's layout (``Result_N/<sanitized>.raw``,
float32) so one loader reads truth, CPU and HTP alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qnn_ci.calibration.sources import Expected, UpstreamRunner
from qnn_ci.compare.outputs import sanitize


def write_reference_outputs(model: Path, samples: list[dict[str, Path]],
                            inputs: list[Expected], out_dir: Path) -> Path:
    """Run ``model`` on every sample; returns ``out_dir``."""
    runner = UpstreamRunner(model, inputs, {})
    out_dir.mkdir(parents=True, exist_ok=True)
    for n, paths in enumerate(samples):
        rdir = out_dir / f"Result_{n}"
        rdir.mkdir(exist_ok=True)
        for name, value in runner.run(paths).items():
            np.ascontiguousarray(value, dtype="<f4").tofile(rdir / f"{sanitize(name)}.raw")
    return out_dir
