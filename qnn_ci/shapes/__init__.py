"""The static-shape stage's logic: report and pin dynamic dims, list every
interior tensor left dynamic, fill from onnxruntime, verify equivalence.

Entry point: ``analyse_and_pin``. Library only: logs, never prints."""

from qnn_ci.shapes.analyse import analyse_and_pin
from qnn_ci.shapes.pin import validate_dims
from qnn_ci.shapes.report import (
    DimInfo,
    EquivalenceCheck,
    FilledTensor,
    InteriorTensor,
    ShapeReport,
    TensorShapeInfo,
)

__all__ = [
    "DimInfo",
    "EquivalenceCheck",
    "FilledTensor",
    "InteriorTensor",
    "ShapeReport",
    "TensorShapeInfo",
    "analyse_and_pin",
    "validate_dims",
]
