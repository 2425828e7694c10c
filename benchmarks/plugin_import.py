"""What installing qnn-ci costs a project that does not use it.

The plugin loads in every pytest run of a venv where qnn-ci is installed. Paired,
whole processes: an unrelated one-test pytest run with the plugin disabled
(`-p no:qnn_ci`, the yardstick) and the same run with it; goal: <= 1.10x. Also the
import of `qnn_ci.plugin` alone, next to `import pytest` (paired), and which heavy
modules it pulls in (none expected).

    python benchmarks/plugin_import.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import NOISE_NOTE, clean_env, goal_line, paired

HEAVY = ("numpy", "onnx", "onnxruntime", "jsonschema", "yaml", "fabric", "paramiko",
         "filelock", "junit_xml")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]
        run = paired([*base, "-p", "no:qnn_ci"], base, args.repeat, cwd=folder, env=env)
    imp = paired([sys.executable, "-c", "import pytest"],
                 [sys.executable, "-c", "import pytest, qnn_ci.plugin"], args.repeat, env=env)
    code = f"import sys, qnn_ci.plugin; print([m for m in {HEAVY!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env=env).stdout.strip()
    print(f"an unrelated one-test pytest run; {NOISE_NOTE}")
    print(run.describe("pytest -p no:qnn_ci (the yardstick)", "pytest (qnn-ci plugin loaded)"))
    print("import qnn_ci.plugin on top of import pytest:")
    print(imp.describe("import pytest", "import pytest, qnn_ci.plugin"))
    print(f"  +{1000 * (imp.b.median - imp.a.median):.1f} ms; heavy modules imported: {loaded}")
    print(goal_line("one-test pytest run, plugin loaded / disabled (median of paired runs)",
                    run.ratio, "<= 1.10x", run.ratio <= 1.10, unit="x"))


if __name__ == "__main__":
    main()
