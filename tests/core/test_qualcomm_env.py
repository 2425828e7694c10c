"""`.qualcomm-env`: the marker decides complete vs half-written; values are read
without executing the file; every value says where it came from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_ci.errors import UserError
from qnn_ci.manifest.qualcomm_env import DEFAULT_BOARD_NAME, find, load_for, parse
from tests.core.graphs import scale_model


def _write(path: Path, text: str) -> Path:
    path.write_text(text, "utf-8")
    return path


def test_complete_file_gives_each_value_with_its_line(tmp_path: Path) -> None:
    sdk = tmp_path / "qairt" / "2.31"
    f = _write(tmp_path / ".qualcomm-env", (
        "# written by qualcomm-setup\n"
        f"export QNN_SDK_ROOT='{sdk}'\n"
        'ESDK_ENV="$HOME/esdk/environment-setup-armv8-2a-qcom-linux"\n'
        "BOARD_TRANSPORT=ssh\nBOARD_HOST=rb3.lab\nBOARD_USER=root\nBOARD_PORT=2222\n"
        "BOARD_SSH_KEY=keys/ci_ed25519\nBOARD_SOC=qcs6490\n"
        "QC_SETUP_VERSION=3\n"))
    env = parse(f)
    assert env.version == "3"
    assert env.sdk_root() is not None and env.sdk_root().value == str(sdk)  # type: ignore[union-attr]
    assert env.sdk_root().where == f"{f}:2"  # type: ignore[union-attr]
    esdk = env.esdk_env()
    assert esdk is not None and esdk.value.startswith(str(Path.home()))
    board = env.board()
    assert board is not None
    name, cfg = board
    assert name == DEFAULT_BOARD_NAME
    assert (cfg.transport, cfg.host, cfg.user, cfg.port, cfg.soc) == (
        "ssh", "rb3.lab", "root", 2222, "QCS6490")
    assert str(cfg.key_file) == str(tmp_path / "keys" / "ci_ed25519")


def test_half_written_file_is_one_line(tmp_path: Path) -> None:
    f = _write(tmp_path / ".qualcomm-env", "QNN_SDK_ROOT=/opt/qairt\nBOARD_HOST=rb3\n")
    with pytest.raises(UserError) as err:
        parse(f)
    text = str(err.value)
    assert "\n" not in text and str(f) in text and "QC_SETUP_VERSION=" in text
    assert "half-written" in text


def test_never_executed(tmp_path: Path) -> None:
    canary = tmp_path / "pwned"
    f = _write(tmp_path / ".qualcomm-env",
               f"QNN_SDK_ROOT=$(touch {canary})\n`touch {canary}`\nQC_SETUP_VERSION=1\n")
    env = parse(f)
    assert not canary.exists()
    assert env.sdk_root() is not None and "touch" in env.sdk_root().value  # type: ignore[union-attr]


def test_alternative_spellings_and_adb_board(tmp_path: Path) -> None:
    f = _write(tmp_path / ".qualcomm-env",
               "QAIRT_SDK_ROOT=/opt/qairt\nBOARD_ACCESS=adb\nANDROID_SERIAL=10.0.0.5:5555\n"
               "QC_SETUP_VERSION=2\n")
    env = parse(f)
    assert env.sdk_root().value == "/opt/qairt"  # type: ignore[union-attr]
    board = env.board()
    assert board is not None and board[1].transport == "adb"
    assert board[1].serial == "10.0.0.5:5555"


def test_board_not_available_yet(tmp_path: Path) -> None:
    f = _write(tmp_path / ".qualcomm-env", "BOARD_TRANSPORT=none\nQC_SETUP_VERSION=1\n")
    assert parse(f).board() is None


def test_bad_board_value_names_the_variable_and_line(tmp_path: Path) -> None:
    f = _write(tmp_path / ".qualcomm-env",
               "BOARD_TRANSPORT=ssh\nBOARD_HOST=rb3\nBOARD_PORT=99999\n"
               "BOARD_SSH_KEY=/k\nQC_SETUP_VERSION=1\n")
    with pytest.raises(UserError) as err:
        parse(f).board()
    assert f"{f}:3" in str(err.value) and "BOARD_PORT" in str(err.value)


def test_found_beside_manifest_then_at_repository_root(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    sub = tmp_path / "models" / "ocr"
    sub.mkdir(parents=True)
    manifest = sub / "qnn-ci.yaml"
    manifest.write_text("exports: []\n")
    assert find(manifest) is None and load_for(manifest) is None
    root_file = _write(tmp_path / ".qualcomm-env", "QNN_SDK_ROOT=/a\nQC_SETUP_VERSION=1\n")
    assert find(manifest) == root_file
    near = _write(sub / ".qualcomm-env", "QNN_SDK_ROOT=/b\nQC_SETUP_VERSION=1\n")
    assert find(manifest) == near
    env = load_for(manifest)
    assert env is not None and env.sdk_root().value == "/b"  # type: ignore[union-attr]


def test_unbalanced_quote_is_one_line(tmp_path: Path) -> None:
    f = _write(tmp_path / ".qualcomm-env", "QNN_SDK_ROOT='/opt/qairt\nQC_SETUP_VERSION=1\n")
    with pytest.raises(UserError) as err:
        parse(f)
    assert f"{f}:1" in str(err.value)


def test_folder_named_like_the_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".qualcomm-env").mkdir()
    with pytest.raises(UserError):
        parse(tmp_path / ".qualcomm-env")


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("QNN_SDK_ROOT", "ESDK_ENV", "GITHUB_ACTIONS")}
    return subprocess.run([sys.executable, "-m", "qnn_ci", "run", "--stage", "dry_run",
                           "--workdir", str(folder / "work"), *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    scale_model(tmp_path / "m.onnx")
    (tmp_path / "qnn-ci.yaml").write_text(
        "exports:\n  - name: m\n    model: m.onnx\n    inputs: {x: {shape: [1, 4]}}\n")
    return tmp_path


def test_run_takes_the_sdk_root_from_the_file_and_says_so(project: Path) -> None:
    _write(project / ".qualcomm-env", "QNN_SDK_ROOT=/nonexistent/qairt\nQC_SETUP_VERSION=1\n")
    done = _run(project)
    assert f"SDK root /nonexistent/qairt from {project / '.qualcomm-env'}:1" in done.stderr
    assert "/nonexistent/qairt" in done.stdout          # the stage used it
    assert "QNN_SDK_ROOT is not set" not in done.stdout
    # the command line still wins
    other = project / "sdk2"
    done = _run(project, "--sdk-root", str(other))
    assert "from" not in done.stderr.split("qnn-ci: SDK root")[-1] or \
        "SDK root /nonexistent" not in done.stderr
    assert str(other) in done.stdout


def test_run_stops_on_a_half_written_file(project: Path) -> None:
    _write(project / ".qualcomm-env", "QNN_SDK_ROOT=/opt/qairt\n")
    done = _run(project)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "QC_SETUP_VERSION=" in lines[0], done.stderr
