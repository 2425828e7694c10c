"""The engine imported up front for the in-process pytester runs of this folder.

The plugin imports the engine (manifest, yaml, numpy, onnx) only when it collects a
manifest. ``pytester.runpytest`` (in-process) restores ``sys.modules`` after each
run, so a module the run imported is imported again by the next one -- and C
extensions (PyYAML's ``_yaml``, numpy) cannot be: their classes would no longer be
the re-imported package's. Modules imported before the run are kept.
"""

from __future__ import annotations

import qnn_ci.engine.pipeline
import qnn_ci.report.junit
import qnn_ci.runner.session  # noqa: F401
