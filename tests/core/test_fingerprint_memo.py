"""The calibration fingerprint without importing the generator, and the per-process
memo of a generator's project-module closure: both must key exactly what they did."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qnn_ci.calibration.project_modules import import_closure
from qnn_ci.stages.calibration import defined_here

PLAIN = "def samples(n):\n    pass\n"


@pytest.mark.parametrize(("source", "plain"), [
    (PLAIN, True),
    ("def other(n):\n    samples = 1\n" + PLAIN, True),           # a local, not the module's
    (PLAIN + "class A:\n    samples = 1\n", True),                # a class attribute
    (PLAIN + "samples = 1\n", False),                             # rebound
    ("import functools\n@functools.cache\n" + PLAIN, False),      # decorated: code elsewhere
    ("from helpers import *\n" + PLAIN, False),                   # may rebind it
    ("from helpers import samples\n", False),                     # defined elsewhere
    ("if True:\n    " + PLAIN.replace("\n    ", "\n        "), False),
    (PLAIN + "def g():\n    global samples\n    samples = 2\n", False),
    (PLAIN + "for samples in []:\n    pass\n", False),
    (PLAIN + "try:\n    pass\nexcept Exception as samples:\n    pass\n", False),
    (PLAIN + "import samples\n", False),
    (PLAIN + "def h(x=(samples := 1)):\n    pass\n", False),
    (PLAIN + "with open('f') as samples:\n    pass\n", False),
    ("samples = lambda n: n\n", False),
    ("def samples(:\n", False),                                   # not Python
])
def test_defined_here_only_when_certain(tmp_path: Path, source: str, plain: bool) -> None:
    file = tmp_path / "gens.py"
    file.write_text(source)
    assert defined_here(file, "samples") is plain
    assert defined_here(None, "samples") is False


def test_closure_memo_follows_edits(tmp_path: Path) -> None:
    """A project file edited within the process: the closure is found again (here the
    generator starts importing a new project module)."""
    (tmp_path / "helper.py").write_text("SEED = 1\n")
    gens = tmp_path / "memo_gens.py"
    gens.write_text(PLAIN)
    first = import_closure("memo_gens", tmp_path)
    assert first is not None and set(first.files) == {"memo_gens"}
    assert import_closure("memo_gens", tmp_path) is first          # memoised
    gens.write_text("import helper\n" + PLAIN)
    st = gens.stat()     # same size and mtime would not hide it either (racy window)
    os.utime(gens, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = import_closure("memo_gens", tmp_path)
    assert second is not None and set(second.files) == {"memo_gens", "helper"}
