"""Output comparison: streaming metrics, per-output thresholds, output-set
loading (qnn-net-run ``Result_N`` layouts) and onnxruntime's accuracy oracle.

Public API::

    from qnn_ci.compare import (load_output_set, compare_sets, accuracy_rule,
                                apply_thresholds, compute_metrics, metric_properties,
                                sanitize)
"""

from qnn_ci.compare.accuracy import DEFAULT_TOLERANCE, accuracy_rule
from qnn_ci.compare.compare import (
    Comparison,
    OutputResult,
    SampleResult,
    compare_sets,
    metric_properties,
)
from qnn_ci.compare.metrics import DEFAULT_CHUNK, OutputMetrics, compute_metrics
from qnn_ci.compare.outputs import (
    ArraySource,
    OutputSet,
    load_output_set,
    match_names,
    parse_shape,
    sanitize,
)
from qnn_ci.compare.resolution import (
    NEAR_ZERO_OF_TEST,
    NEAR_ZERO_STEPS,
    near_zero_reason,
    steps_from_tokens,
)
from qnn_ci.compare.thresholds import (
    METRICS,
    apply_thresholds,
    evaluate,
    parse_threshold,
    resolve_bounds,
)

__all__ = [
    "DEFAULT_CHUNK", "DEFAULT_TOLERANCE", "METRICS", "NEAR_ZERO_OF_TEST", "NEAR_ZERO_STEPS",
    "ArraySource",
    "Comparison", "OutputMetrics", "OutputResult", "OutputSet", "SampleResult",
    "accuracy_rule", "apply_thresholds", "compare_sets", "compute_metrics", "evaluate",
    "load_output_set", "match_names", "metric_properties", "near_zero_reason", "parse_shape",
    "parse_threshold", "resolve_bounds", "sanitize", "steps_from_tokens",
]
