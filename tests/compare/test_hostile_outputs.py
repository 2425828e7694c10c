"""Hostile output folders for `qnn-ci compare` and the board's result checks:
sample numbers far apart (Result_0 + Result_30000000 used to build a 30-million
element set: 60 s and 3 GB; Result_99999999999999 a MemoryError), two folders
for one sample, FIFOs and folders named like outputs, non-numeric and corrupt
.npy files, file names that are not UTF-8, a _net.json whose scale is not a
number. Each ends in a result, findings, or one line."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from qnn_ci.boards.native_outputs import native_types
from qnn_ci.boards.result_files import ExpectedOutput, check_result_files, result_files
from qnn_ci.cli import main
from qnn_ci.compare import compare_sets, load_output_set
from qnn_ci.compare.outputs import missing_numbers, pair_samples
from qnn_ci.engine.results import Severity
from qnn_ci.errors import UserError


def _sample(root: Path, n: int | str, values: list[float] | None = None) -> None:
    folder = root / (n if isinstance(n, str) else f"Result_{n}")
    folder.mkdir(parents=True, exist_ok=True)
    np.asarray(values or [1.0, 2.0, 3.0, 4.0], np.float32).tofile(folder / "y.raw")


def test_far_apart_sample_numbers_use_the_folders_that_exist(tmp_path: Path) -> None:
    for side in ("ref", "test"):
        for n in (0, 30_000_000, 99_999_999_999_999):
            _sample(tmp_path / side, n)
    start = time.monotonic()
    ref, test = load_output_set(tmp_path / "ref"), load_output_set(tmp_path / "test")
    comp = compare_sets(ref, test)
    assert time.monotonic() - start < 5             # was 60 s, 3 GB, then MemoryError
    assert ref.samples == [0, 30_000_000, 99_999_999_999_999]
    assert [s.sample for s in comp.outputs[0].samples] == ref.samples
    assert all(s.verdict == "ok" for s in comp.outputs[0].samples)
    gaps = [f.message for f in ref.findings if f.check == "compare.missing"]
    assert len(gaps) == 1 and "Result_1..Result_29999999, Result_30000001.." \
        "Result_99999999999998 missing" in gaps[0]
    assert gaps[0].startswith(f"{tmp_path / 'ref'}: 99999999999997 sample(s): ")


def test_missing_numbers_lists_runs() -> None:
    assert missing_numbers([0, 1, 2]) is None
    assert missing_numbers([1]) == "Result_0"
    assert missing_numbers([0, 2, 5]) == "3 sample(s): Result_1, Result_3..Result_4"
    many = missing_numbers(list(range(0, 60, 2)))
    assert many is not None and many.endswith("(+19 more)")


def test_samples_missing_on_one_side_are_summarised(tmp_path: Path) -> None:
    for n in range(40):
        _sample(tmp_path / "ref", n)
    for n in (0, 1, 50):
        _sample(tmp_path / "test", n)
    pairs, findings = pair_samples(load_output_set(tmp_path / "ref"),
                                   load_output_set(tmp_path / "test"))
    assert pairs == [(0, 0), (1, 1)]
    errors = [f.message for f in findings if f.severity == Severity.ERROR]
    assert len(errors) == 1 and "has no 38 sample(s): Result_2..Result_39" in errors[0]
    warnings = [f.message for f in findings if f.severity == Severity.WARNING]
    assert warnings == ["test Result_50 have no counterpart in reference; not compared"]


def test_two_folders_for_one_sample(tmp_path: Path) -> None:
    _sample(tmp_path, "Result_3", [1, 2, 3, 4])
    _sample(tmp_path, "Result_03", [9, 9, 9, 9])
    _sample(tmp_path, "Result_٣", [7, 7, 7, 7])           # not an ASCII number: not a sample
    out = load_output_set(tmp_path)
    assert out.samples == [3]
    assert out.files["y"][3].float is not None
    assert out.files["y"][3].float.path.parent.name == "Result_03"   # first in name order
    notes = [f.message for f in out.findings if "one folder per sample" in f.message]
    assert notes and "Result_3 (sample 3 is also Result_03)" in notes[0]
    assert sorted(result_files(tmp_path)) == [3]


def test_fifo_as_output_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "y.raw"
    os.mkfifo(fifo)
    box: dict[str, BaseException | None] = {}

    def target() -> None:
        try:
            load_output_set(fifo, dtype="float32")
            box["exc"] = None
        except BaseException as exc:
            box["exc"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail("load_output_set waited on a FIFO")
    assert isinstance(box["exc"], UserError) and "named pipe (FIFO)" in str(box["exc"])


def test_fifos_folders_and_links_named_like_outputs_are_skipped(tmp_path: Path) -> None:
    for n in (0, 1):
        _sample(tmp_path, n)
    os.mkfifo(tmp_path / "Result_0" / "z.raw")
    (tmp_path / "Result_1" / "z.raw").mkdir()
    (tmp_path / "Result_1" / "w.raw").symlink_to("/dev/zero")
    (tmp_path / "Result_1" / "v_native.raw").symlink_to(tmp_path / "gone")
    out = load_output_set(tmp_path)
    assert out.names() == ["y"]
    assert result_files(tmp_path) == {0: {"y": tmp_path / "Result_0" / "y.raw"},
                                      1: {"y": tmp_path / "Result_1" / "y.raw"}}
    findings = check_result_files(tmp_path, samples=2, backend="htp", board="b",
                                  expected=[ExpectedOutput("y", "y", 4),
                                            ExpectedOutput("z", "z", 4)])
    assert sorted(f.message.split(":")[0] for f in findings) == [
        "output z of sample 0 (HTP backend on board b)",
        "output z of sample 1 (HTP backend on board b)"]
    assert all(f.check == "board.output_missing" for f in findings)


@pytest.mark.parametrize(("array", "why"), [
    (np.array([1, "x"], dtype=object), "cannot read it as .npy"),
    (np.array(["ab", "c"]), "holds <U2 values, not numbers"),
    (np.array([1 + 2j]), "holds complex128 values, not numbers"),
])
def test_non_numeric_npy_is_one_line(tmp_path: Path, array: np.ndarray, why: str) -> None:
    path = tmp_path / "y.npy"
    np.save(path, array, allow_pickle=True)
    with pytest.raises(UserError, match=why.replace("(", r"\(")) as info:
        load_output_set(tmp_path)
    assert "\n" not in info.value.oneline()


def test_corrupt_npy_header_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "y.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00\xff\xff{'descr': '<f4', 'shape': (" + b"9" * 5000)
    with pytest.raises(UserError, match=r"cannot read it as \.npy") as info:
        load_output_set(path)
    assert "\n" not in info.value.oneline()


def test_non_utf8_file_names_print(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for side in (b"ref", b"test"):
        folder = os.path.join(os.fsencode(tmp_path), side, b"Result_0")
        os.makedirs(folder)
        np.arange(4, dtype=np.float32).tofile(os.path.join(folder, b"\xff.raw"))
    assert main(["compare", str(tmp_path / "ref"), str(tmp_path / "test")]) == 0
    out = capsys.readouterr().out
    assert "output \\udcff" in out and "PASSED" in out
    assert main(["compare", str(tmp_path / "ref"), str(tmp_path / "test"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"][0]["name"] == "\udcff"


@pytest.mark.parametrize("scale", ["abc", 1e400, -1, None, [1], 10 ** 400])
def test_net_json_scale_that_is_not_a_number(tmp_path: Path, scale: object) -> None:
    net = tmp_path / "m_net.json"
    quant = {"definition": 1, "encoding": 0, "scale_offset": {"scale": scale, "offset": 3}}
    net.write_text(json.dumps({"graph": {"tensors": {"y": {
        "type": 1, "data_type": 1032, "dims": [4], "quant_params": quant}}}}))
    types, findings = native_types(net, ["y"])
    assert types == {}
    assert len(findings) == 1 and "not a positive finite number" in findings[0].message
