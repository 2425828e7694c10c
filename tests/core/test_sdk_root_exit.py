"""Bad input exits 2 under pytest as under `qnn-ci run` (real processes): a wrong SDK
root, a manifest error. A failed check still exits 1 in both."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.core.graphs import FLOATS_GEN, scale_model

ZEROS_GEN = '''
import numpy as np

def zeros(count):
    for _ in range(count):
        yield {"x": np.zeros((1, 8), np.float32)}
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    scale_model(tmp_path / "m.onnx", dims=["N", 8])
    (tmp_path / "gens.py").write_text(FLOATS_GEN)
    (tmp_path / "zgens.py").write_text(ZEROS_GEN)
    (tmp_path / "qnn-ci.yaml").write_text(textwrap.dedent("""
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 8]}}
            calibration: {generator: "gens:floats", samples: 4, held_out: 1}
            target: {soc: QCS6490}
        """).lstrip())
    return tmp_path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("QNN_SDK_ROOT", "ESDK_ENV", "GITHUB_ACTIONS", "PYTEST_ADDOPTS",
                        "PYTEST_XDIST_WORKER")}
    return env | extra


def _pytest(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=_env(**env), capture_output=True, text=True,
                          timeout=300)


def _run(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qnn_ci", "run", *args], cwd=folder,
                          env=_env(**env), capture_output=True, text=True, timeout=300)


def test_wrong_sdk_root_exits_2_under_pytest_and_run(project: Path) -> None:
    wrong = str(project / "no-such-sdk")
    message = (f"QNN_SDK_ROOT: QNN SDK root {wrong} does not exist; set QNN_SDK_ROOT to a "
               "QAIRT SDK root")
    res = _pytest(project, "-k", "dry_run", QNN_SDK_ROOT=wrong)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stdout
    assert "1 failed" in res.stdout
    cli = _run(project, "--stage", "dry_run", QNN_SDK_ROOT=wrong)
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert message in cli.stdout
    # the same option on the command line, pytest's and qnn-ci's
    res = _pytest(project, "-k", "dry_run", "--qnn-sdk-root", wrong)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"--qnn-sdk-root / --sdk-root: QNN SDK root {wrong} does not exist" in res.stdout
    cli = _run(project, "--stage", "dry_run", "--sdk-root", wrong)
    assert cli.returncode == 2, cli.stdout + cli.stderr


def test_manifest_error_exits_2_under_pytest(project: Path) -> None:
    (project / "qnn-ci.yaml").write_text("exports:\n  - name: a\n    modle: m.onnx\n")
    res = _pytest(project)
    assert res.returncode == 2, res.stdout + res.stderr
    # relative to where pytest runs, as `qnn-ci run` names it
    assert "qnn-ci.yaml:3: exports[0].modle: unknown key 'modle'" in res.stdout
    assert str(project / "qnn-ci.yaml") + ":3" not in res.stdout
    assert _run(project).returncode == 2


def test_failed_check_still_exits_1(project: Path) -> None:
    manifest = project / "qnn-ci.yaml"
    manifest.write_text(manifest.read_text().replace("gens:floats", "zgens:zeros"))
    res = _pytest(project, "-k", "calibration")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "every one of the 5 sample(s) of input 'x' is all zeros" in res.stdout
    cli = _run(project, "--stage", "calibration")
    assert cli.returncode == 1, cli.stdout + cli.stderr
