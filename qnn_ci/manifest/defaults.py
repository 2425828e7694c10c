"""Names and defaults the shells need before any manifest is read.

Importable without the engine (no numpy, onnx, yaml, jsonschema): the pytest
plugin reads these at every pytest start-up, in every project where qnn-ci is
installed, whether or not it has a manifest.
"""

from __future__ import annotations

MANIFEST_NAMES = ("qnn-ci.yaml", "qnn-ci.yml")
DEFAULT_WORKDIR = ".qnn-ci"
