"""Property-based fuzzing of every loader and reader: each may only return a result,
findings, or raise ``UserError`` -- never another exception.

`make test` runs a bounded number of examples per target (QNN_CI_FUZZ_EXAMPLES,
default 150); `make fuzz` runs 10,000 per target.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("QNN_CI_FUZZ_EXAMPLES", "150"))

settings.register_profile(
    "qnn_ci", max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 1000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    database=None, print_blob=True)
settings.load_profile("qnn_ci")
