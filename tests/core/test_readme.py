"""The README says what qnn-ci does: its ```console blocks are one shell session in
an empty folder, run here command by command, each output compared with what the
README prints (exactly, after trailing spaces); its ```sh commands are each either
run by another test or named below with why they are not run here; its manifest
example passes the schema.

Conventions of a console block: `$ CMD` starts a command, the lines after it are
its output (stdout and stderr together, as a terminal shows them); a `$ cat FILE` of
a file that does not exist yet writes FILE with the lines shown first."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)

# The ```sh commands of the README not run by this test, and why.
NOT_RUN = {
    "make demo": "installs into .venv and runs the simulator on the OCR example (minutes); "
                 "the same manifest runs in tests/sim",
    "make test": "the whole suite (this test is part of it)",
    "make bench": "benchmarks take minutes each; their figures are in the README table",
    "make fuzz": "10,000 hypothesis examples per target (tests/fuzz runs 150)",
    'python -m pip install "qnn-ci[sim] @ git+https://github.com/qnn-ci/qnn-ci@v0"':
        "needs the published repository; tests/core/test_install.py installs the wheel "
        "built from this checkout into a fresh venv instead",
    'python -m pip install "qnn-ci[sim] @ git+https://github.com/qnn-ci/qnn-ci@COMMIT"':
        "the same, pinned: COMMIT is the reader's to choose",
    'python -m pip install -e ".[sim]"': "what `make setup` does (with the test extra)",
    "qnn-ci --version": "run in tests/core/test_install.py, in the fresh venv",
    "pytest -m qnn": "needs a project holding models and a QAIRT SDK / board for the "
                     "qnn_sdk / qnn_board items",
    'pytest -m "qnn and not qnn_sdk and not qnn_board" models/':
        "needs the reader's own models/ folder; marker selection is tested in "
        "tests/core/test_plugin.py",
    "pytest models/qnn-ci.yaml --qnn-export text_encoder -n 4":
        "needs the reader's text_encoder model; --qnn-export and xdist are tested in "
        "tests/core/test_plugin.py",
}


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


def blocks(kind: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(README.read_text("utf-8"))
            if m.group(1) == kind]


def steps(block: str) -> list[Step]:
    out: list[Step] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append(Step(line[2:]))
        else:
            assert out, f"console block output before any `$ command`: {line!r}"
            out[-1].expected.append(line)
    return out


def sh_commands() -> list[str]:
    return [line.split("  #", 1)[0].strip() for block in blocks("sh")
            for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _env(home: Path) -> dict[str, str]:
    """A plain user's shell: qnn-ci, pytest and python of this environment first on
    PATH, no QAIRT SDK, not in GitHub Actions, an 80-column terminal."""
    drop = ("QNN_SDK_ROOT", "ESDK_ENV", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY",
            "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTHONPATH", "COLUMNS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    bindir = str(Path(sys.executable).parent)
    return env | {"PATH": f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
                  "COLUMNS": "80", "PYTHONUNBUFFERED": "1", "LC_ALL": "C.UTF-8"}


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()] if text.strip() else []


def test_console_blocks_print_what_the_readme_says(tmp_path: Path) -> None:
    session = [s for block in blocks("console") for s in steps(block)]
    assert len(session) >= 8, "the README's console examples went missing"
    folder = tmp_path / "session"
    folder.mkdir()
    env = _env(tmp_path)
    status = 0
    for step in session:
        words = shlex.split(step.command)
        if words[0] == "cat" and len(words) == 2 and not (folder / words[1]).exists():
            target = folder / words[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(step.expected) + "\n")
        # `(exit N)` first: `$?` in a command is the status of the one before
        proc = subprocess.run(["bash", "-c", f"(exit {status}); {step.command} 2>&1"],
                              cwd=folder, env=env, capture_output=True, text=True,
                              timeout=300)
        status = proc.returncode
        got = _lines(proc.stdout + proc.stderr)
        assert got == [line.rstrip() for line in step.expected], (
            f"README command `{step.command}` printed:\n" + "\n".join(got))


def test_every_sh_command_is_run_elsewhere_or_named() -> None:
    commands = sh_commands()
    assert "make test" in commands
    unknown = [c for c in commands if c not in NOT_RUN]
    assert not unknown, f"README commands this test neither runs nor explains: {unknown}"
    stale = [c for c in NOT_RUN if c not in commands]
    assert not stale, f"no longer in the README: {stale}"


def test_manifest_examples_pass_the_schema() -> None:
    import jsonschema

    from qnn_ci.manifest.loader import schema

    manifests = [yaml.safe_load(b) for b in blocks("yaml") if "\nexports:" in f"\n{b}"]
    assert manifests, "the README's manifest example went missing"
    for data in manifests:
        jsonschema.validate(data, schema())


@pytest.mark.parametrize("target", ["Test material", "Recurrent state inputs", "pytest"])
def test_sections_other_files_point_to_exist(target: str) -> None:
    headings = [line.lstrip("#").strip() for line in README.read_text("utf-8").splitlines()
                if line.startswith("#")]
    assert target in headings
    anchor = "#" + target.lower().replace(" ", "-")
    assert f"]({anchor})" in README.read_text("utf-8")


def test_requirements_point_at_the_test_material_section() -> None:
    models = (README.parent / "requirements" / "models.txt").read_text()
    assert '"Test material"' in models
    pins = [line for line in models.splitlines() if line and not line.startswith("#")]
    section = README.read_text("utf-8").split("## Test material", 1)[1].split("\n## ", 1)[0]
    for pin in pins:        # every pinned wheel, with its version, is explained there
        assert f"`{pin}`" in section, pin
