"""Hostile files fed to the converter-output and AIMET readers and their commands
(`qnn-ci fp16`, `qnn-ci namespace`, `qnn-ci encodings`): a FIFO, a symlink to
/dev/zero, a folder, a socket, a sparse file bigger than the reader's cap, JSON
nested 5,000 deep, numbers with 5,000 digits and inputs that made a pattern
backtrack quadratically. Each must end in one line (UserError, exit 2) quickly
-- never hang, never read gigabytes, never a traceback."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from qnn_ci.cli import main
from qnn_ci.errors import UserError
from qnn_ci.sdk.cpp_model import CPP_CAP, parse_cpp_stream, parse_cpp_text, read_cpp_model
from qnn_ci.sdk.encodings import ENCODINGS_CAP, read_encodings
from qnn_ci.sdk.fp16_audit import audit_fp16
from qnn_ci.sdk.net_json import NET_JSON_CAP, parse_net_json, read_net_json
from qnn_ci.sdk.record import parse_record_text, read_record, same_value
from qnn_ci.util.safe_read import json_depth, read_bytes, safe_int
from tests.conftest import REAL_OUTPUTS

READERS: dict[str, Callable[[Path], object]] = {
    "cpp": read_cpp_model, "net_json": read_net_json, "record": read_record,
    "encodings": read_encodings, "fp16": audit_fp16}
COMMANDS = {"fp16": ["fp16", "{}", "--soc", "QCS6490"], "namespace": ["namespace", "{}"],
            "encodings": ["encodings", "{}"]}


def refused_quickly(call: Callable[[], object], *, fifo: Path | None = None,
                    within: float = 5.0) -> UserError:
    """``call()`` must raise UserError within ``within`` seconds. A call stuck on a
    FIFO is released by opening its write end, so a failing test does not hang."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # reported below
            box["exc"] = exc

    start = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(within)
    if thread.is_alive():
        if fifo is not None:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        thread.join(10)
        pytest.fail(f"not refused within {within} s (still running)")
    assert time.monotonic() - start < within
    exc = box.get("exc")
    assert isinstance(exc, UserError), f"expected UserError, got {box!r}"
    line = exc.oneline()
    assert line and "\n" not in line
    return exc


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "model_net.json"
    os.mkfifo(path)
    yield path


@pytest.mark.parametrize("reader", sorted(READERS))
def test_fifo_refused_without_waiting_for_a_writer(fifo: Path, reader: str) -> None:
    exc = refused_quickly(lambda: READERS[reader](fifo), fifo=fifo)
    assert "named pipe (FIFO)" in str(exc) and str(fifo) in str(exc)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_fifo_refused_by_the_commands(fifo: Path, command: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(fifo) for a in COMMANDS[command]]
    box: dict[str, int] = {}
    thread = threading.Thread(target=lambda: box.setdefault("rc", main(argv)), daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail(f"qnn-ci {command} on a FIFO did not return within 5 s")
    err = capsys.readouterr().err
    assert box["rc"] == 2
    assert err.count("\n") == 1 and "named pipe (FIFO)" in err and "Traceback" not in err


@pytest.mark.parametrize("reader", sorted(READERS))
def test_symlink_to_dev_zero_is_not_read(tmp_path: Path, reader: str) -> None:
    link = tmp_path / "m_net.json"
    link.symlink_to("/dev/zero")
    exc = refused_quickly(lambda: READERS[reader](link))
    assert "character device" in str(exc)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_folder_and_socket_refused(tmp_path: Path, reader: str) -> None:
    assert "folder" in str(refused_quickly(lambda: READERS[reader](tmp_path)))
    sock_path = tmp_path / "s.cpp"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        assert "socket" in str(refused_quickly(lambda: READERS[reader](sock_path)))


@pytest.mark.parametrize(("reader", "cap"), [
    ("net_json", NET_JSON_CAP), ("encodings", ENCODINGS_CAP), ("cpp", CPP_CAP),
    ("fp16", CPP_CAP)])
def test_sparse_file_above_the_cap(tmp_path: Path, reader: str, cap: int) -> None:
    path = tmp_path / "big_net.json"
    with path.open("wb") as fh:
        fh.truncate(cap + 1)          # sparse: no disk blocks, no bytes read
    exc = refused_quickly(lambda: READERS[reader](path))
    assert "cap of this reader" in str(exc) and f"{cap // (1 << 30)}.0 GiB" in str(exc)


def test_sparse_json_record_refused_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "big_net.json"
    with path.open("wb") as fh:
        fh.write(b'{"converter_command": "x"')
        fh.truncate(3 << 30)
    assert "cap of this reader" in str(refused_quickly(lambda: read_record(path)))


def test_read_bytes_refuses_a_file_that_outgrows_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bytes(path, cap=100) == b"x" * 100
    with pytest.raises(UserError, match="more than the 99 bytes"):
        read_bytes(path, cap=99)


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(("reader", "text"), [
    ("net_json", '{"graph": {"tensors": ' + DEEP + "}}"),
    ("record", '{"converter_command": "x=1", "y": ' + DEEP + "}"),
    ("encodings", '{"version": "1.0.0", "activation_encodings": ' + DEEP + "}"),
    ("fp16", '{"graph": ' + DEEP + "}"),
])
def test_json_nested_5000_deep(tmp_path: Path, reader: str, text: str) -> None:
    path = tmp_path / "deep_net.json"
    path.write_text(text, "utf-8")
    exc = refused_quickly(lambda: READERS[reader](path))
    assert re.search(r"JSON nested 500\d levels deep, more than the 100", str(exc))


def test_json_depth_ignores_brackets_in_strings() -> None:
    assert json_depth('{"a": "[[[[[[[[[[' + "[" * 200 + '", "b": [1, [2]]}') == 3
    assert json_depth('["\\"[[[' + "[" * 200 + '"]') == 1
    assert json_depth("[" * 150 + "]" * 150) == 150


def test_json_nested_just_within_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "m_net.json"
    path.write_text('{"graph": {"tensors": {}}, "extra": ' + "[" * 90 + "]" * 90 + "}")
    assert read_net_json(path).tensors == []


def test_numbers_with_5000_digits(tmp_path: Path) -> None:
    huge = "9" * 5000
    enc = tmp_path / "a.encodings"
    enc.write_text('{"activation_encodings": {"x": [{"bitwidth": ' + huge + "}]}}")
    assert "cannot be read" in str(refused_quickly(lambda: read_encodings(enc)))
    # as strings they reach int(): no ValueError
    net = parse_net_json({"graph": {"tensors": {"t": {"data_type": huge, "type": "²",
                                                      "dims": [huge, "٣", 1]}}}})
    assert net.tensors[0].data_type_code is None and net.tensors[0].dims is None
    m = parse_cpp_text(f'.name= "t", .rank= {huge}, .dataType= QNN_DATATYPE_FLOAT_32, '
                       f".quantizeParams= {{ QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, "
                       f".scale= 1.0f, .offset= -{huge}}}")
    assert m.tensors[0].rank is None and m.tensors[0].offset is None
    assert same_value(int("1" + "0" * 400), 1e308) is False        # no OverflowError
    assert safe_int("²") is None and safe_int(huge) is None and safe_int(" -12 ") == -12


def test_encodings_nested_scale_lists_and_huge_floats(tmp_path: Path) -> None:
    path = tmp_path / "a.encodings"
    nested = "[" * 20 + "0.5" + "]" * 20
    path.write_text('{"version": "1.0.0", "activation_encodings": [{"name": "x", "bw": 8, '
                    '"dtype": "INT", "enc_type": "PER_TENSOR", "scale": ' + nested + "}]}")
    assert "nested more than 8 deep" in str(refused_quickly(lambda: read_encodings(path)))
    path.write_text('{"encodings": [{"name": "x", "output_dtype": "int' + "9" * 5000 +
                    '", "y_scale": 1}]}')
    assert "unknown data type" in str(refused_quickly(lambda: read_encodings(path)))
    path.write_text('{"encodings": [{"name": "x", "output_dtype": "int8", "y_scale": 1'
                    + "0" * 400 + "}]}")
    assert "number too large" in str(refused_quickly(lambda: read_encodings(path)))


def test_patterns_do_not_backtrack_quadratically() -> None:
    """Inputs on which the earlier patterns took minutes; a generous bound."""
    n = 200_000
    start = time.monotonic()
    parse_record_text("a=1" + " " * n + "x")
    parse_record_text("a=[ " * (n // 4))
    rec = parse_record_text("a=1 " + "x" * (2 * n))
    assert rec.truncated is not None            # 400,000 characters: cut, and said
    parse_cpp_text("uint32_t a[]={" * (n // 14))
    parse_cpp_text('const char* a[]={"x",' * (n // 20))
    parse_cpp_text('.name= "t", .quantizeParams= {' * (n // 30))
    parse_cpp_text("QnnModel_composeGraphs(" + "(" * n)
    path_text = ("converter" * (n // 9)) + "\n"
    from qnn_ci.sdk.record import _record_from_source
    _record_from_source(path_text)
    assert time.monotonic() - start < 60


def test_record_longer_than_any_real_one_is_cut_and_said() -> None:
    rec = parse_record_text("qnn-onnx-converter; " + "; ".join(f"k{i}=1" for i in range(60000)))
    assert rec.truncated is not None and "only its start was read" in rec.truncated


@pytest.mark.parametrize("name", ["naf_block_sota-qairt2.31.cpp", "resnet18_int8-qairt2.18.cpp",
                                  "vector_search-qairt2.29.cpp"])
def test_streamed_parse_equals_whole_parse(name: str) -> None:
    """The block-by-block reader gives what the whole-text parse gives, wherever
    the blocks end."""
    path = REAL_OUTPUTS / name
    if not path.is_file():
        pytest.skip(f"real converter output {path} is not available")
    text = path.read_text("utf-8")
    whole = parse_cpp_text(text, source="x").to_dict()
    assert whole["tensors"] and not whole["truncated"]
    for block, step in ((300, 37), (5000, 999), (70000, 4096)):
        pieces = (text[i:i + step] for i in range(0, len(text), step))
        assert parse_cpp_stream(pieces, source="x", block=block,
                                max_block=100 * block).to_dict() == whole
    assert read_cpp_model(path).to_dict() == whole | {"source": str(path)}


def test_cut_comment_across_blocks_is_still_truncation(tmp_path: Path) -> None:
    path = REAL_OUTPUTS / "vector_search-qairt2.29.cpp"
    if not path.is_file():
        pytest.skip(f"real converter output {path} is not available")
    text = path.read_text("utf-8") + "\n/* an unterminated comment\n" + "x;\n" * 10
    streamed = parse_cpp_stream((text[i:i + 50] for i in range(0, len(text), 50)),
                                source="x", block=100, max_block=1000)
    assert streamed.truncated == "an unterminated /* comment"
    assert streamed.to_dict() == parse_cpp_text(text, source="x").to_dict()


def test_non_utf8_and_lone_surrogates_in_reports(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A tensor name that is a lone surrogate (a JSON escape) must print and dump."""
    path = tmp_path / "m_net.json"
    path.write_text(json.dumps({"graph": {"tensors": {"\udcff": {"data_type": 534,
                                                                 "type": 3}}}}), "utf-8")
    assert main(["fp16", str(path), "--soc", "QCS6490"]) == 1
    out = capsys.readouterr().out
    assert "\\udcff" in out and "FAIL" in out
    assert main(["fp16", str(path), "--soc", "QCS6490", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["files"][0]["fp16_tensors"] == ["\udcff"]
