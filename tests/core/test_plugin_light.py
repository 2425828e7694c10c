"""The plugin costs nothing where it is not used: importing it, or a pytest run
that collects no manifest, imports none of the engine's heavy dependencies; they
come in when a manifest is collected."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.core.graphs import scale_model

pytest_plugins = ["pytester"]

HEAVY = ("numpy", "onnx", "onnxruntime", "jsonschema", "yaml", "fabric", "paramiko",
         "filelock", "junit_xml", "qnn_ci.manifest.loader", "qnn_ci.engine.pipeline",
         "qnn_ci.runner.session")

# Written by the project's conftest when pytest ends: which heavy modules it imported.
DUMP = f'''
import json, sys

def pytest_unconfigure(config):
    heavy = {list(HEAVY)!r}
    loaded = [m for m in heavy if m in sys.modules]
    with open("modules.json", "w") as fh:
        json.dump({{"loaded": loaded, "plugin": "qnn_ci.plugin" in sys.modules}}, fh)
'''


def test_importing_the_plugin_imports_nothing_heavy() -> None:
    code = ("import sys, qnn_ci.plugin; "
            f"print([m for m in {list(HEAVY)!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def _loaded(pytester: pytest.Pytester, *args: str) -> dict[str, object]:
    pytester.makeconftest(DUMP)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), res.stdout.str()
    return json.loads((pytester.path / "modules.json").read_text())


def test_a_run_without_a_manifest_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unrelated="def test_one():\n    assert 1 + 1 == 2\n")
    got = _loaded(pytester)
    assert got["plugin"] is True          # the plugin was loaded (entry point) ...
    assert got["loaded"] == []            # ... and imported nothing heavy


def test_a_run_with_a_manifest_loads_the_engine(pytester: pytest.Pytester) -> None:
    """The other side: collecting a manifest does bring the engine in (so the test
    above is not passing because the probe sees nothing)."""
    scale_model(pytester.path / "m.onnx", dims=["N", 4])
    (pytester.path / "qnn-ci.yaml").write_text(textwrap.dedent("""
        exports:
          - name: a
            model: m.onnx
            inputs: {x: {shape: [1, 4]}}
    """).lstrip())
    got = _loaded(pytester, "--collect-only")
    assert {"yaml", "qnn_ci.manifest.loader", "qnn_ci.engine.pipeline"} <= set(got["loaded"])  # type: ignore[arg-type]
