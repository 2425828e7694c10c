"""Changed-only selection against a real git repository: every input kind selects
its export with a reason, `from:` chains propagate, a missing REF is one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.errors import UserError
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.runner.changed import select
from tests.core.graphs import scale_model

HELPER = "SEED = 1\n"
GEN = '''
import numpy as np
from helper import SEED

def samples(count):
    rng = np.random.default_rng(SEED)
    for _ in range(count):
        yield {"x": rng.normal(size=(1, 4)).astype(np.float32)}
'''
MANIFEST = """\
defaults:
  quantization: {act_bitwidth: 16}
exports:
  - name: gen
    model: a.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: 'gens:samples', samples: 2}
  - name: listed
    model: b.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {input_list: data/list.txt}
  - name: down
    model: c.onnx
    inputs: {y: {shape: [1, 4]}}
    calibration: {from: {export: gen, outputs: {y: y}}}
  - name: quiet
    model: d.onnx
    inputs: {x: {shape: [1, 4]}}
    calibration: {generator: 'other:samples', samples: 2}
"""
OTHER = '''
import numpy as np

def samples(count):
    for i in range(count):
        yield {"x": np.full((1, 4), i, np.float32)}
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "data").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "ci@example.com")
    git(r, "config", "user.name", "ci")
    for name in "abd":
        scale_model(r / f"{name}.onnx")
    scale_model(r / "c.onnx", in_name="y", out_name="z")
    (r / "gens.py").write_text(GEN)
    (r / "helper.py").write_text(HELPER)
    (r / "other.py").write_text(OTHER)
    for i in range(2):
        np.ones((1, 4), np.float32).tofile(r / "data" / f"x{i}.raw")
    (r / "data" / "list.txt").write_text("".join(f"x:={r}/data/x{i}.raw\n" for i in range(2)))
    (r / "qnn-ci.yaml").write_text(MANIFEST)
    git(r, "add", "-A")
    git(r, "commit", "-qm", "base")
    return r


def _select(repo: Path, ref: str = "HEAD") -> dict[str, list[str]]:
    manifest = load_manifest(repo / "qnn-ci.yaml")
    return select(repo / "qnn-ci.yaml", manifest.exports, None, ref).selected


def test_nothing_changed_selects_nothing(repo: Path) -> None:
    manifest = load_manifest(repo / "qnn-ci.yaml")
    sel = select(repo / "qnn-ci.yaml", manifest.exports, None, "HEAD")
    assert sel.selected == {}
    assert set(sel.deselected) == {"gen", "listed", "down", "quiet"}
    assert all(why.startswith("no input changed") for why in sel.deselected.values())


def test_helper_module_selects_generator_export_and_its_downstream(repo: Path) -> None:
    (repo / "helper.py").write_text("SEED = 2\n")
    got = _select(repo)
    assert got == {"gen": ["generator module helper changed"],
                   "down": ["upstream export 'gen' selected"]}


def test_model_change_is_named(repo: Path) -> None:
    scale_model(repo / "b.onnx", scale=3.0)
    assert _select(repo) == {"listed": ["model changed"]}


def test_raw_file_named_by_the_input_list(repo: Path) -> None:
    np.zeros((1, 4), np.float32).tofile(repo / "data" / "x1.raw")
    assert _select(repo) == {"listed": ["calibration input list changed"]}


def test_defaults_change_names_defaults_for_every_inheritor(repo: Path) -> None:
    text = (repo / "qnn-ci.yaml").read_text().replace("act_bitwidth: 16", "act_bitwidth: 8")
    (repo / "qnn-ci.yaml").write_text(text)
    got = _select(repo)
    assert set(got) == {"gen", "listed", "down", "quiet"}
    assert got["listed"] == ["defaults.quantization changed"]


def test_own_entry_change_and_new_export(repo: Path) -> None:
    text = (repo / "qnn-ci.yaml").read_text().replace(
        "    model: d.onnx\n", "    model: d.onnx\n    target: {soc: QCS6490}\n")
    text += "  - name: fresh\n    model: a.onnx\n    calibration: {generator: 'other:samples'}\n"
    (repo / "qnn-ci.yaml").write_text(text)
    got = _select(repo)
    assert got == {"quiet": ["target changed"], "fresh": ["new export"]}


def test_committed_change_against_an_older_ref(repo: Path) -> None:
    (repo / "other.py").write_text(OTHER.replace("i,", "i + 1,"))
    git(repo, "commit", "-qam", "tweak other")
    assert _select(repo, "HEAD") == {}
    assert _select(repo, "HEAD~1") == {"quiet": ["generator module other changed"]}


def test_untracked_depends_file(repo: Path) -> None:
    text = (repo / "qnn-ci.yaml").read_text().replace(
        "{generator: 'other:samples', samples: 2}",
        "{generator: 'other:samples', samples: 2, depends: ['data/*.bin']}")
    (repo / "qnn-ci.yaml").write_text(text)
    (repo / "data" / "w.bin").write_bytes(b"1")
    git(repo, "commit", "-qam", "depends")
    (repo / "data" / "v.bin").write_bytes(b"2")          # new, untracked
    assert _select(repo) == {"quiet": ["calibration.depends file changed"]}


def test_missing_ref_is_one_line(repo: Path) -> None:
    with pytest.raises(UserError) as err:
        _select(repo, "no-such-branch")
    assert "\n" not in str(err.value) and "no-such-branch" in str(err.value)


def test_option_like_ref_is_refused(repo: Path) -> None:
    with pytest.raises(UserError):
        _select(repo, "--output=/tmp/x")


def test_not_a_repository(tmp_path: Path) -> None:
    scale_model(tmp_path / "a.onnx")
    (tmp_path / "qnn-ci.yaml").write_text("exports:\n  - name: a\n    model: a.onnx\n")
    manifest = load_manifest(tmp_path / "qnn-ci.yaml")
    with pytest.raises(UserError) as err:
        select(tmp_path / "qnn-ci.yaml", manifest.exports, None, "HEAD")
    assert "git repository" in str(err.value)


def _cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("QNN_SDK_ROOT", "GITHUB_ACTIONS")}
    return subprocess.run([sys.executable, "-m", "qnn_ci", "run", "--stage", "static_shapes",
                           "--workdir", str(repo.parent / "work"), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)


def test_run_cli_runs_only_changed_exports_and_says_why(repo: Path) -> None:
    (repo / "helper.py").write_text("SEED = 2\n")
    done = _cli(repo, "--changed-since", "HEAD")
    assert done.returncode == 0, done.stderr
    assert "selected   gen: generator module helper changed" in done.stderr
    assert "selected   down: upstream export 'gen' selected" in done.stderr
    assert "deselected listed: no input changed" in done.stderr
    ran = {line.split()[0] for line in done.stdout.splitlines()
           if line and not line.startswith(" ") and "(" in line}
    assert ran == {"gen", "down"}, done.stdout


def test_run_cli_missing_ref_exits_2_with_one_line(repo: Path) -> None:
    done = _cli(repo, "--changed-since", "nope")
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope" in lines[0], done.stderr


def test_pytest_deselects_unchanged_exports(repo: Path) -> None:
    import os
    import sys

    scale_model(repo / "b.onnx", scale=5.0)
    env = {k: v for k, v in os.environ.items() if k not in ("QNN_SDK_ROOT", "GITHUB_ACTIONS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "-p", "qnn_ci", "--qnn-changed-since=HEAD", "-k", "static_shapes",
                           f"--qnn-workdir={repo.parent / 'work'}", "qnn-ci.yaml"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "deselected" in done.stdout, done.stdout
    assert "selected   listed: model changed" in done.stdout
    assert "deselected quiet: no input changed" in done.stdout


def test_hostile_manifest_at_ref_selects_everything_quickly(repo: Path) -> None:
    import time

    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    good = (repo / "qnn-ci.yaml").read_text()
    (repo / "qnn-ci.yaml").write_text(bomb)
    git(repo, "commit", "-qam", "a billion laughs")
    (repo / "qnn-ci.yaml").write_text(good)
    start = time.monotonic()
    got = _select(repo)
    assert time.monotonic() - start < 10
    assert set(got) == {"gen", "listed", "down", "quiet"}
    assert "the manifest at HEAD cannot be read" in got["listed"]


def test_a_changed_baseline_entry_selects_its_export(repo: Path) -> None:
    from qnn_ci.nightly.baselines import Entry, update

    path = repo / "qnn-baselines.yaml"
    update(path, {("gen", "QCS6490", "simulator"): Entry({"y.cosine": 0.999}, "abc"),
                  ("listed", "QCS6490", "simulator"): Entry({"y.cosine": 0.998}, "abc")})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "baselines")
    update(path, {("listed", "QCS6490", "simulator"): Entry({"y.cosine": 0.95}, "def")})
    manifest = load_manifest(repo / "qnn-ci.yaml")
    got = select(repo / "qnn-ci.yaml", manifest.exports, None, "HEAD",
                 baselines=manifest.baselines).selected
    assert got == {"listed": ["baseline entries changed (qnn-baselines.yaml)"]}
    path.write_text("{not: [valid")                  # unreadable now: every export
    got = select(repo / "qnn-ci.yaml", manifest.exports, None, "HEAD",
                 baselines=manifest.baselines).selected
    assert set(got) == {"gen", "listed", "down", "quiet"}


def test_the_work_folder_is_not_listed_as_changed_but_a_retargeted_link_is(
        repo: Path) -> None:
    """qnn-ci's own work folder (thousands of untracked results) is left out of the
    changed files; a tracked symlink that now points elsewhere is the file it names."""
    from qnn_ci.runner.changed import changed_paths, resolve_ref

    (repo / "link.onnx").symlink_to("a.onnx")
    git(repo, "add", "link.onnx")
    git(repo, "commit", "-qm", "link")
    head = resolve_ref(repo, "HEAD")
    work = repo / ".qnn-ci"
    (work / "e" / "calibration").mkdir(parents=True)
    (work / "e" / "calibration" / "x.raw").write_bytes(b"\0" * 16)
    (repo / "new.onnx").write_bytes(b"x")
    assert work / "e" / "calibration" / "x.raw" in changed_paths(repo, head)
    seen = changed_paths(repo, head, work)
    assert seen == {repo / "new.onnx"}
    (repo / "link.onnx").unlink()
    (repo / "link.onnx").symlink_to("b.onnx")
    assert changed_paths(repo, head, work) == {repo / "new.onnx", repo / "b.onnx"}


def test_run_changed_since_without_a_manifest_finds_those_of_the_work_tree(
        tmp_path: Path) -> None:
    """`qnn-ci run --changed-since HEAD` as docs/pr-checks.md shows it (no manifest
    given), from the repository's root or any folder in it: the manifests of the work
    tree are found in their subfolders, tracked or new, not those git ignores."""
    r = tmp_path / "repo"
    for sub in ("models/det", "models/cls", "docs", "venv"):
        (r / sub).mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "ci@example.com")
    git(r, "config", "user.name", "ci")
    scale_model(r / "models" / "det" / "det.onnx")
    scale_model(r / "models" / "cls" / "cls.onnx")
    (r / "models" / "det" / "qnn-ci.yaml").write_text(
        "exports:\n  - name: det\n    model: det.onnx\n    inputs: {x: {shape: [1, 4]}}\n")
    (r / "venv" / "qnn-ci.yaml").write_text("exports: [\n")     # ignored: never read
    (r / ".gitignore").write_text("venv/\n")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "base")
    # a new manifest, not committed yet: present in the work tree, so found
    (r / "models" / "cls" / "qnn-ci.yml").write_text(
        "exports:\n  - name: cls\n    model: cls.onnx\n    inputs: {x: {shape: [1, 4]}}\n")
    scale_model(r / "models" / "det" / "det.onnx", scale=3.0)     # det's model changed
    for cwd in (r, r / "docs"):
        done = _cli(cwd, "--changed-since", "HEAD")
        assert done.returncode == 0, done.stderr
        assert ("qnn-ci: manifests of the git work tree: "
                + ", ".join(os.path.relpath(p, cwd) for p in (
                    r / "models/cls/qnn-ci.yml", r / "models/det/qnn-ci.yaml"))) \
            in done.stderr, done.stderr
        assert "selected   det: model changed" in done.stderr
        assert "selected   cls: new export" in done.stderr
        ran = {line.split()[0] for line in done.stdout.splitlines()
               if line and not line.startswith(" ") and "(" in line}
        assert ran == {"det", "cls"}, done.stdout


def test_run_changed_since_with_no_manifest_anywhere_is_one_line(tmp_path: Path) -> None:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "manifest.yaml").write_text("exports: []\n")     # not a name qnn-ci looks for
    done = _cli(r, "--changed-since", "HEAD")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"no file named qnn-ci.yaml or qnn-ci.yml in the git work tree {r.resolve()}; " \
           "name the manifest qnn-ci.yaml" in done.stderr
    outside = tmp_path / "plain"
    outside.mkdir()
    done = _cli(outside, "--changed-since", "HEAD")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is in none: run it inside the repository or give the manifest" in done.stderr
