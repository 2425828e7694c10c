"""A JUnit property's text, the same in qnn-ci's own report and under pytest: numbers
as numbers (6 significant digits), structures as JSON. Its own module, so a pytest
run records properties without importing the JUnit writer."""

from __future__ import annotations

import json
from typing import Any


def property_value(value: Any) -> str:
    """A property's text: numbers as numbers, structures as JSON."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)
