"""A work folder that travels: two clones of a project at different paths share a
restored work folder, and the second run starts no tool and runs no model (every
stage is read from the cache, relocated)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.graphs import FLOATS_GEN, tiny_matmul_model

MANIFEST = """\
exports:
  - name: tiny
    model: models/m.onnx
    inputs: {x: {shape: [1, 8]}}
    calibration: {generator: 'gens:floats', samples: 6, held_out: 2}
    target: {soc: QCS6490}
"""




def _run(project: Path, work: Path, sdk: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "ESDK_ENV")}
    env["QNN_SDK_ROOT"] = str(sdk)
    env["COLUMNS"] = "300"
    return subprocess.run([sys.executable, "-m", "qnn_ci", "run", "--workdir", str(work)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)


def _rows(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASS", "FAIL", "skip", "ERROR"):
            rows[parts[1]] = line.strip()
    return rows


def test_second_clone_reuses_the_restored_work_folder(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from fixtures.qairt_standin import make_sdk

    sdk = make_sdk(tmp_path / "sdk" / "qairt", "2.31.0")
    one = tmp_path / "ci" / "one" / "repo"
    (one / ".git").mkdir(parents=True)            # a repository root (the project folder)
    tiny_matmul_model(one / "models" / "m.onnx")
    (one / "gens.py").write_text(FLOATS_GEN)
    (one / "qnn-ci.yaml").write_text(MANIFEST)
    first = _run(one, one / ".qnn-ci", sdk)
    ran = _rows(first.stdout)
    passed = {s for s, line in ran.items() if line.startswith("PASS")}
    assert {"static_shapes", "calibration", "convert"} <= passed, first.stdout + first.stderr
    assert not any("(cached)" in ran[s] for s in passed)

    # another clone at another path; the work folder restored into it (actions/cache)
    two = tmp_path / "elsewhere" / "two" / "checkout"
    shutil.copytree(one, two, ignore=shutil.ignore_patterns(".qnn-ci"))
    shutil.copytree(one / ".qnn-ci", two / ".qnn-ci")
    shutil.rmtree(one)                            # the first clone is gone (another runner)
    second = _run(two, two / ".qnn-ci", sdk)
    again = _rows(second.stdout)
    assert second.returncode == first.returncode, second.stdout + second.stderr
    for stage in passed:
        assert "(cached)" in again[stage], (stage, second.stdout)
    listing = (two / ".qnn-ci" / "tiny" / "calibration" / "input_list.txt")
    if listing.is_file():                          # relocated for the new place
        assert str(two) in listing.read_text() and str(one) not in listing.read_text()
