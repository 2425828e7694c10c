"""``qnn_ci.records.dataclass``: the standard library's classes, with the generated
methods' code kept on disk -- the same classes, and a store that survives any bytes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qnn_ci import records
from qnn_ci.records import _MAGIC, _Codes, _read


def _twins(**options: Any) -> tuple[type, type]:
    """One class body made by dataclasses and by records, with ``options``."""
    made = []
    for decorate in (dataclasses.dataclass, records.dataclass):
        @decorate(**options)
        class Point:
            x: int
            name: str = "p"
            tags: list[str] = dataclasses.field(default_factory=list)
        made.append(Point)
    return made[0], made[1]


@pytest.mark.parametrize("options", [{}, {"frozen": True}, {"eq": False}, {"order": True},
                                     {"frozen": True, "slots": True}])
def test_a_class_is_what_dataclasses_makes(options: dict[str, Any]) -> None:
    std, ours = _twins(**options)
    assert dataclasses.is_dataclass(ours)
    assert [f.name for f in dataclasses.fields(ours)] == ["x", "name", "tags"]
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__lt__"):
        a, b = getattr(std, name, None), getattr(ours, name, None)
        assert (a is None) == (b is None), name
        code_a, code_b = getattr(a, "__code__", None), getattr(b, "__code__", None)
        if code_a is not None and code_a.co_filename == "<string>":   # generated
            assert code_a.co_code == code_b.co_code, name
            assert code_a.co_filename == code_b.co_filename
            assert a.__annotations__ == b.__annotations__, name   # no __future__ leaked
    p, q = std(1, tags=["a"]), ours(1, tags=["a"])
    assert repr(p).split("(", 1)[1] == repr(q).split("(", 1)[1]
    assert dataclasses.asdict(q) == {"x": 1, "name": "p", "tags": ["a"]}
    assert dataclasses.replace(q, x=2).x == 2
    if options.get("frozen"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            q.x = 3  # type: ignore[misc]
    assert "exec" not in vars(dataclasses)        # the hook is gone afterwards


def test_the_store_spares_compiling_in_the_next_process(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "__pycache__" / "records.test.codes"
    first = _Codes(path)
    text = "def __create_fn__():\n def f(a):\n  return a + 1\n return f"
    code = first.compiled(text)
    assert first.new
    first.save()
    second = _Codes(path)
    again = second.compiled(text)
    assert not second.new and again.co_code == code.co_code     # read, not compiled
    namespace: dict[str, Any] = {}
    exec(again, {}, namespace)
    assert namespace["__create_fn__"]()(41) == 42
    assert sorted(p.name for p in path.parent.iterdir()) == ["records.test.codes"]


def test_nothing_is_written_without_bytecode_writing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    store = _Codes(tmp_path / "records.test.codes")
    store.compiled("x = 1")
    store.save()
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_store_still_compiles(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (tmp_path / "file").write_text("")
    store = _Codes(tmp_path / "file" / "records.test.codes")   # its folder is a file
    assert store.compiled("x = 1") is not None
    store.save()                                               # logged, not raised


@pytest.mark.parametrize("data", [b"", b"junk", _MAGIC, _MAGIC + b"\x00\x01",
                                  _MAGIC + b"\xff" * 64])
def test_a_broken_store_reads_as_empty(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "records.test.codes"
    path.write_bytes(data)
    assert _read(path) == {}


def test_qnn_ci_classes_come_from_the_store(tmp_path: Path) -> None:
    """In a fresh process, importing qnn-ci's records compiles nothing the store holds
    (a first process fills it when the install's __pycache__ is writable)."""
    probe = ("import sys, qnn_ci.records as r\n"
             "import qnn_ci.session, qnn_ci.pipeline\n"
             "print(int(r._codes.new), len(r._codes.used))\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}   # bytecode written

    def run() -> list[str]:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              env=env, check=True).stdout.split()

    run()
    if not (records._codes.path and records._codes.path.is_file()):
        pytest.skip("qnn_ci's __pycache__ is not writable here")
    new, used = run()
    assert int(used) > 20                    # the classes' generated methods ...
    assert new == "0"                        # ... all read from the store
