"""A work folder cannot be walked out of: a symbolic link below it (an export or
stage folder, a result.json, a lock file, .memo, .shared, .cache), left by a restored
cache archive or by hand, is refused with one line naming it, where it points and
what to do, and nothing is read, written or removed through it. Through the engine,
the helpers that write beside it, and `qnn-ci run` as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from qnn_ci.engine.pipeline import Pipeline, exit_status
from qnn_ci.engine.results import StageResult, Status
from qnn_ci.engine.shared_results import claim
from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import Environment, Stage, StageContext
from qnn_ci.errors import UserError
from qnn_ci.stages.sdk_common import cache_dir
from qnn_ci.util.memo import Memo, memo_key
from qnn_ci.util.workfolder import open_new, refuse_links
from tests.core.graphs import small_project


class Writes(Stage):
    """Writes out.txt in its own folder."""

    crash_in_fingerprint: ClassVar[bool] = False

    def fingerprint(self, ctx: StageContext) -> dict[str, Any]:
        if self.crash_in_fingerprint:
            raise ZeroDivisionError("boom")
        return {}

    def run(self, ctx: StageContext) -> StageResult:
        out = ctx.workdir / "out.txt"
        out.write_text("made here")
        return StageResult(self.name, Status.PASSED, "ok", artefacts={"out": str(out)})


def make(work: Path, exports: tuple[str, ...] = ("a",), *, crash: bool = False) -> Pipeline:
    first = type("first", (Writes,), {"name": "first", "crash_in_fingerprint": crash})()
    second = type("second", (Writes,), {"name": "second", "needs": ("first",)})()
    specs = [ExportSpec(name=n, model=work.parent / "m.onnx",
                        manifest=work.parent / "qnn-ci.yaml", line=3) for n in exports]
    return Pipeline(specs, Environment(workdir=work), stages={"first": first, "second": second})


def snapshot(folder: Path) -> dict[str, str]:
    """Everything below ``folder`` (links not followed): path -> content or kind."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                found[rel] = f"-> {os.readlink(p)}"
            elif p.is_file():
                found[rel] = p.read_text(errors="replace")
            else:
                found[rel] = "<dir>"
    return found


def assert_refused(text: str, link: Path, where: str = "outside") -> None:
    assert "\n" not in text and "Traceback" not in text, text
    assert text.startswith(f"{link}: a symbolic link to "), text
    assert f"{where} the work folder" in text, text
    assert text.endswith(f"remove the link (rm {link}) and run again"), text


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the work folder, with a file in it that must stay as it is."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    return folder


# -- the engine ------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["export", "stage", "lock", "dangling_lock"])
def test_a_link_on_a_stage_path_is_a_one_line_error_and_nothing_goes_through(
        tmp_path: Path, outside: Path, where: str) -> None:
    work = tmp_path / "work"
    (work / "a").mkdir(parents=True)
    link = {"export": work / "a", "stage": work / "a" / "first",
            "lock": work / "a" / ".first.lock", "dangling_lock": work / "a" / ".first.lock"
            }[where]
    if where == "export":
        (work / "a").rmdir()
    target = {"lock": outside / "precious.txt", "dangling_lock": outside / "made.lock"
              }.get(where, outside)
    link.symlink_to(target)
    before = snapshot(outside)
    results = {r.stage: r for r in make(work).run_export("a")}
    first = results["first"]
    assert first.status == Status.ERROR
    assert_refused(first.summary, link)
    assert str(target) in first.summary
    assert [f.message for f in first.findings] == [first.summary]
    assert results["second"].summary == "blocked by a::first"
    assert exit_status({"a": list(results.values())}) == 2
    assert snapshot(outside) == before      # nothing written, cleared or locked there
    assert link.is_symlink()                # and the link left for the user to remove


def test_a_result_linked_from_outside_is_not_read_as_cached(tmp_path: Path,
                                                            outside: Path) -> None:
    work = tmp_path / "work"
    assert make(work).result("a", "first").status == Status.PASSED
    stored = work / "a" / "first" / "result.json"
    forged = json.loads(stored.read_text())
    forged["result"]["summary"] = "forged elsewhere"
    (outside / "result.json").write_text(json.dumps(forged))
    stored.unlink()
    stored.symlink_to(outside / "result.json")
    before = snapshot(outside)
    result = make(work).result("a", "first")
    assert result.status == Status.ERROR
    assert_refused(result.summary, stored)
    assert snapshot(outside) == before


def test_a_link_inside_the_work_folder_is_refused_too(tmp_path: Path) -> None:
    """Two exports sharing one folder would clear each other's results."""
    work = tmp_path / "work"
    assert make(work).result("a", "first").status == Status.PASSED
    kept = snapshot(work / "a")
    (work / "b").symlink_to(work / "a")
    result = make(work, ("a", "b")).result("b", "first")
    assert result.status == Status.ERROR
    assert_refused(result.summary, work / "b", "inside")
    assert snapshot(work / "a") == kept


def test_the_work_folder_itself_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere" / "work"
    real.mkdir(parents=True)
    (tmp_path / "work").symlink_to(real)
    results = make(tmp_path / "work").run_export("a")
    assert [r.status for r in results] == [Status.PASSED, Status.PASSED]
    assert (real / "a" / "second" / "out.txt").read_text() == "made here"


def test_a_file_where_a_folder_belongs_is_a_one_line_error(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a").write_text("not a folder")
    result = make(work).result("a", "first")
    assert result.status == Status.ERROR
    assert result.summary.startswith(f"{work / 'a'}: not a folder, where qnn-ci keeps one")
    assert (work / "a").read_text() == "not a folder"


def test_a_crash_log_link_is_replaced_not_written_through(tmp_path: Path,
                                                          outside: Path) -> None:
    """fingerprint() crashing leaves its log in a folder that was not cleared."""
    work = tmp_path / "work"
    (work / "a" / "first").mkdir(parents=True)
    log = work / "a" / "first" / "crash.log"
    log.symlink_to(outside / "precious.txt")
    result = make(work, crash=True).result("a", "first")
    assert result.status == Status.FAILED and "internal error" in result.summary
    assert (outside / "precious.txt").read_text() == "keep me"
    assert not log.is_symlink() and "ZeroDivisionError: boom" in log.read_text()


# -- the other folders of the work folder -----------------------------------------------

@pytest.mark.parametrize("linked", [".memo", ".memo/schema"])
def test_memo_refuses_a_link_on_the_way_to_an_entry(tmp_path: Path, outside: Path,
                                                   linked: str) -> None:
    work = tmp_path / "work"
    (work / ".memo").mkdir(parents=True)
    link = work / linked
    if link.exists():
        link.rmdir()
    link.symlink_to(outside)
    before = snapshot(outside)
    memo, key = Memo(work / ".memo"), memo_key("x")
    for call in (lambda: memo.get("schema", key), lambda: memo.put("schema", key, "ok")):
        with pytest.raises(UserError) as info:
            call()
        assert_refused(str(info.value), link)
    assert snapshot(outside) == before


def test_memo_still_works_in_a_plain_folder(tmp_path: Path) -> None:
    memo, key = Memo(tmp_path / "work" / ".memo"), memo_key("x")
    assert memo.get("schema", key) is None
    memo.put("schema", key, "ok")
    assert memo.get("schema", key) == "ok"


@pytest.mark.parametrize("linked", [".shared", ".shared/calibration", "lock"])
def test_shared_results_refuse_a_link(tmp_path: Path, outside: Path, linked: str) -> None:
    work = tmp_path / "work"
    key = "k" * 64
    link = work / (".shared/calibration/" + key + ".lock" if linked == "lock" else linked)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside / "precious.txt" if linked == "lock" else outside)
    before = snapshot(outside)
    with pytest.raises(UserError) as info, \
            claim(Environment(workdir=work), "calibration", key, "a"):
        pytest.fail("claimed through a link")
    assert_refused(str(info.value), link)
    assert snapshot(outside) == before


def test_the_sdk_probe_cache_refuses_a_link(tmp_path: Path, outside: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / ".cache").symlink_to(outside)
    with pytest.raises(UserError) as info:
        cache_dir(Environment(workdir=work))
    assert_refused(str(info.value), work / ".cache")
    assert snapshot(outside) == {"precious.txt": "keep me"}


def test_refuse_links_looks_only_below_the_root(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "root").symlink_to(tmp_path / "real")
    refuse_links(tmp_path / "root", tmp_path / "root" / "a" / "b" / "result.json")  # fine


def test_open_new_replaces_a_link_and_leaves_its_target(tmp_path: Path, outside: Path) -> None:
    path = tmp_path / "tool.log"
    path.symlink_to(outside / "precious.txt")
    with open_new(path) as fh:
        fh.write(b"a log")
    assert not path.is_symlink() and path.read_bytes() == b"a log"
    assert (outside / "precious.txt").read_text() == "keep me"
    with open_new(path) as fh:      # a plain file: truncated and written
        fh.write(b"again")
    assert path.read_bytes() == b"again"


# -- `qnn-ci run` as a real process ----------------------------------------------------

def qnn_ci_run(manifest: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("QNN_SDK_ROOT", "ESDK_ENV", "GITHUB_ACTIONS")}
    return subprocess.run([sys.executable, "-m", "qnn_ci", "run", str(manifest), "--workdir",
                           str(work), "--stage", "calibration"], cwd=manifest.parent, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("where", ["export", "stage", "result", "lock", "memo", "shared"])
def test_qnn_ci_run_refuses_a_link_with_one_line_and_exit_2(tmp_path: Path, outside: Path,
                                                             where: str) -> None:
    manifest = small_project(tmp_path)
    work = tmp_path / "w"
    if where == "result":
        assert qnn_ci_run(manifest, work).returncode == 0
    else:
        (work / "a").mkdir(parents=True)
    link = {"export": work / "a", "stage": work / "a" / "calibration",
            "result": work / "a" / "calibration" / "result.json",
            "lock": work / "a" / ".static_shapes.lock", "memo": work / ".memo",
            "shared": work / ".shared"}[where]
    if where == "export":
        (work / "a").rmdir()
    if where == "result":
        (outside / "result.json").write_text(link.read_text())
        link.unlink()
    target = {"result": outside / "result.json", "lock": outside / "precious.txt"
              }.get(where, outside)
    link.symlink_to(target)
    before = snapshot(outside)
    proc = qnn_ci_run(manifest, work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "internal error" not in out, out
    (line,) = [line for line in out.splitlines() if "symbolic link" in line]
    assert line.startswith(("  ERROR ", "qnn-ci run: error: ")), out
    assert_refused(line[line.index(f"{link}: "):], link)
    assert snapshot(outside) == before
