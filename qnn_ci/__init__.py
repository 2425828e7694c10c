"""qnn-ci: every ONNX -> Qualcomm QNN export as test cases.

The engine (``qnn_ci.engine.pipeline`` and the stages under ``qnn_ci.stages``) knows
nothing about pytest; ``qnn_ci.plugin`` and ``qnn_ci.cli`` only adapt it.
"""

__version__ = "0.1.0"
