"""A new user's install, for real: qnn-ci's wheel built from this repository and
installed into a fresh virtual environment (the repository nowhere on its path), then
the GitHub Action's own install and run scripts, as action.yml calls them, putting the
user's project beside it so that a calibration generator can import it.

The fresh venv takes qnn-ci's dependencies from the package index like any user's
(pip's cache makes a second install quick); the test is slow (about a minute).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.core.graphs import scale_model

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no venv of ours on PATH."""
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "PIP_FIND_LINKS", "PIP_CERT",
                     "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK", "HOME",
                     "XDG_CACHE_HOME", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    venv_bin = str(Path(sys.executable).parent)
    keep["PATH"] = os.pathsep.join(p for p in keep.get("PATH", "").split(os.pathsep)
                                   if p != venv_bin)
    keep.setdefault("HOME", str(home))
    return keep | extra


def _action_step(name: str) -> dict:
    steps = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    return next(s for s in steps if s.get("name") == name)


def _user_project(root: Path) -> None:
    """A user's repository: their own package (installed only by the action's
    ``install`` input), a model and a manifest whose generator imports the package."""
    pkg = root / "acme-data"
    (pkg / "acme_data").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "acme-data"
        version = "1.0"
        dependencies = ["numpy"]
        """))
    (pkg / "acme_data" / "__init__.py").write_text(textwrap.dedent("""
        import numpy as np

        def frames(count):
            rng = np.random.default_rng(4)
            for _ in range(count):
                yield {"x": rng.normal(size=(1, 4)).astype(np.float32)}
        """))
    scale_model(root / "model.onnx", dims=["N", 4])
    (root / "calib.py").write_text("from acme_data import frames\n")
    (root / "qnn-ci.yaml").write_text(textwrap.dedent("""
        exports:
          - name: tiny
            model: model.onnx
            inputs: {x: {shape: [1, 4]}}
            target: {soc: QCS6490}
            calibration: {generator: "calib:frames", samples: 4, held_out: 2}
            sim: {samples: 2}
        """).lstrip())


def test_a_wheel_in_a_fresh_venv_then_the_action_installs_the_users_project(
        tmp_path: Path) -> None:
    # 1. the wheel, from the repository as a user's `pip install git+URL` builds it
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(dist), str(ROOT)], check=True, timeout=300)
    (wheel,) = dist.glob("qnn_ci-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "qnn_ci/manifest/schema/qnn-ci.schema.json" in names
    assert not [n for n in names if n.startswith(("tests/", "fixtures/"))]

    # 2. a fresh venv, as a new user makes one, outside the repository
    home = tmp_path / "user"
    home.mkdir()
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = _clean_env(home)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{wheel}[sim]"],
                   check=True, cwd=home, env=env, timeout=900)
    version = subprocess.run([str(venv / "bin" / "qnn-ci"), "--version"], cwd=home, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("qnn-ci "), version
    where = subprocess.run([str(python), "-c", "import qnn_ci; print(qnn_ci.__file__)"],
                           cwd=home, env=env, capture_output=True, text=True, timeout=60)
    assert str(venv) in where.stdout and str(ROOT) not in where.stdout

    # 3. the user's repository; their package is not installed yet
    repo = home / "repo"
    _user_project(repo)
    before = subprocess.run([str(python), "-c", "import acme_data"], cwd=home, env=env,
                            capture_output=True, text=True, timeout=60)
    assert before.returncode != 0

    # 4. the Action's install step, as action.yml runs it: `python: <their venv>`,
    #    `install: ./acme-data` (their project)
    output = tmp_path / "install-output.txt"
    step = _action_step("Install qnn-ci with your project")
    step_env = _clean_env(home, GITHUB_ACTION_PATH=str(ROOT), QNN_CI_ACTION_PATH=str(ROOT),
                          QNN_CI_EXTRAS="sim", QNN_CI_PYTHON=str(venv),
                          QNN_CI_INSTALL="./acme-data", QNN_CI_REQUIREMENTS="",
                          GITHUB_WORKSPACE=str(repo), GITHUB_OUTPUT=str(output),
                          RUNNER_TEMP=str(tmp_path))
    done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=step_env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"python={venv / 'bin' / 'python'}" in output.read_text().splitlines()

    # 5. the Action's run step with that interpreter: the generator imports acme_data,
    #    the simulator stages run in the fresh venv
    run_step = _action_step("Run the export checks")
    outputs = tmp_path / "run-output.txt"
    run_env = _clean_env(home, QNN_CI_INTERPRETER=str(venv / "bin" / "python"),
                         QNN_CI_MANIFESTS="qnn-ci.yaml",
                         QNN_CI_MARKERS="qnn and not qnn_sdk and not qnn_board",
                         QNN_CI_JUNIT=str(tmp_path / "junit.xml"),
                         QNN_CI_WORKDIR=str(tmp_path / "work"), QNN_CI_HTML="",
                         QNN_CI_PYTEST_ARGS="-p no:cacheprovider",
                         GITHUB_OUTPUT=str(outputs), GITHUB_WORKSPACE=str(repo))
    ran = subprocess.run(["bash", "-c", run_step["run"]], cwd=repo, env=run_env,
                         capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    got = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert got["status"] == "0" and got["failures"] == "0", got
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    assert {"calibration", "sim_npu", "sim_numerics"} <= set(cases), sorted(cases)
    assert cases["sim_numerics"].find("failure") is None
    assert cases["sim_numerics"].find("skipped") is None


def test_the_install_step_refuses_bad_inputs_in_one_line(tmp_path: Path) -> None:
    step = _action_step("Install qnn-ci with your project")
    base = _clean_env(tmp_path, GITHUB_ACTION_PATH=str(ROOT), QNN_CI_ACTION_PATH=str(ROOT),
                      QNN_CI_EXTRAS="sim", GITHUB_WORKSPACE=str(tmp_path),
                      RUNNER_TEMP=str(tmp_path))
    cases = [({"QNN_CI_PYTHON": "no/such/venv"}, "python", "is not an interpreter"),
             ({"QNN_CI_PYTHON": sys.executable, "QNN_CI_REQUIREMENTS": "req.txt"},
              "requirements", "req.txt, which is not a file"),
             ({"QNN_CI_PYTHON": sys.executable, "QNN_CI_EXTRAS": "sim;rm -rf /"},
              "extras", "not a comma-separated list"),
             ({"QNN_CI_PYTHON": sys.executable, "QNN_CI_INSTALL": "-e '.[dev]"},
              "install", "balance its quotes")]
    for extra, name, words in cases:
        done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path,
                              env=base | extra, capture_output=True, text=True, timeout=60)
        assert done.returncode == 64, (extra, done.stdout, done.stderr)
        (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("::error")]
        assert line.startswith(f"::error title=qnn-ci input {name}::") and words in line, line
