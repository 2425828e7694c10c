"""Loading output sets: qnn-net-run layouts, plain folders, single files, names."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from qnn_ci.compare.outputs import load_output_set, match_names, parse_shape, sanitize
from qnn_ci.errors import UserError
from tests.compare.conftest import make_net_run, write_raw
from tests.conftest import REAL_OUTPUTS
from tests.unprivileged import run_unprivileged, world_traversable_tmp


@pytest.mark.parametrize(("name", "want"), [
    ("/conv1/Conv_output_0", "_conv1_Conv_output_0"),
    ("/model/backbone/layer1.0/relu/Relu_output_0", "_model_backbone_layer1_0_relu_Relu_output_0"),
    ("onnx::Gemm_123", "onnx_Gemm_123"),
    ("output:0", "output_0"),
    ("logits", "logits"),
    ("23", "_23"),                       # numeric ONNX names get a leading '_'
    ("a--b..c", "a_b_c"),                # a run of non-word characters is one '_'
])
def test_sanitize(name, want):
    assert sanitize(name) == want
    assert sanitize(want) == want        # idempotent


def test_real_converter_tensor_names_are_already_sanitised():
    cpp = REAL_OUTPUTS / "naf_block_sota-qairt2.31.cpp"
    if not cpp.exists():
        pytest.skip(f"{cpp} not present")
    names = set(re.findall(r'\.name= "([^"]+)"', cpp.read_text(errors="replace")))
    assert len(names) > 20 and "_23" in names
    assert {n for n in names if sanitize(n) != n} == set()


def test_match_names_tiers():
    files = ["_conv1_Conv_output_0", "conv2/Conv_output_0", "graphA/_23", "logits"]
    got = match_names(["/conv1/Conv_output_0", "/conv2/Conv_output_0", "23", "logits",
                       "absent"], files)
    assert got == {"/conv1/Conv_output_0": "_conv1_Conv_output_0",
                   "/conv2/Conv_output_0": "conv2/Conv_output_0",
                   "23": "graphA/_23", "logits": "logits"}


def test_match_names_refuses_ambiguous_hits():
    assert match_names(["x"], ["g1/x", "g2/x"]) == {}


def test_net_run_layout_with_native_nested_and_graph_level(tmp_path):
    root = tmp_path / "out"
    for n in range(2):
        write_raw(root / f"Result_{n}" / "logits.raw", np.arange(4) + n)
        write_raw(root / f"Result_{n}" / "logits_native.raw", np.arange(4) + n, "uint8")
        write_raw(root / f"Result_{n}" / "conv1" / "Conv_output_0.raw", np.ones(3))
        write_raw(root / f"Result_{n}" / "det" / "boxes_native.raw", np.ones(8), "uint16")
    (root / "qnn-profiling-data_0.log").write_text("ignored")
    s = load_output_set(root)
    assert s.kind == "qnn-net-run" and s.samples == [0, 1] and s.findings == []
    assert s.names() == ["conv1/Conv_output_0", "det/boxes", "logits"]
    logits = s.files["logits"][1]
    assert logits.float.path.name == "logits.raw" and logits.native.native
    assert s.source("logits", 1) is logits.float                 # float preferred
    assert list(s.source("logits", 1).open()) == [1.0, 2.0, 3.0, 4.0]
    boxes = s.source("det/boxes", 0)
    assert boxes.native and boxes.dtype is None                   # native dtype unknown
    assert load_output_set(root, dtype="uint16").source("det/boxes", 0).count == 8


def test_result_gaps_and_empty_results_are_findings(tmp_path):
    root = make_net_run(tmp_path / "o", {"y": [np.ones(2)] * 2})
    (root / "Result_1" / "y.raw").rename(root / "Result_3.raw")
    (root / "Result_3").mkdir()
    write_raw(root / "Result_3" / "y.raw", np.ones(2))
    s = load_output_set(root)
    assert s.samples == [0, 1, 3]
    msgs = sorted(f.message for f in s.findings)
    assert all(f.check == "compare.missing" for f in s.findings)
    assert any("Result_2 missing" in m for m in msgs)
    assert any(m.endswith("Result_1: no .raw or .npy files") for m in msgs)


def test_single_result_folder_keeps_its_number(tmp_path):
    root = make_net_run(tmp_path / "o", {"y": [np.ones(2)] * 4})
    s = load_output_set(root / "Result_3")
    assert (s.kind, s.samples, s.names()) == ("folder", [3], ["y"])


def test_plain_folder_of_npy_and_raw(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.float16).reshape(2, 3))
    write_raw(tmp_path / "b.raw", np.arange(5), "int32")
    s = load_output_set(tmp_path, dtype="int32")
    a, b = s.source("a", 0), s.source("b", 0)
    assert a.npy and a.dtype == np.float16 and a.shape == (2, 3) and a.count == 6
    assert list(a.open()) == [0, 1, 2, 3, 4, 5]
    assert b.dtype == np.int32 and list(b.open()) == [0, 1, 2, 3, 4]


def test_fortran_npy_is_read_in_c_order(tmp_path):
    arr = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    np.save(tmp_path / "f.npy", arr)
    src = load_output_set(tmp_path / "f.npy").source("f", 0)
    assert src.fortran and list(src.open()) == [0, 1, 2, 3, 4, 5]


def test_single_raw_file_needs_a_dtype(tmp_path):
    p = write_raw(tmp_path / "x.raw", np.ones(4))
    with pytest.raises(UserError, match=r"x\.raw: a bare \.raw file .*--dtype"):
        load_output_set(p)
    s = load_output_set(p, dtype="float32")
    assert (s.kind, s.names(), s.source("x", 0).count) == ("file", ["x"], 4)


def test_size_not_a_multiple_of_the_itemsize(tmp_path):
    p = tmp_path / "x.raw"
    p.write_bytes(b"\0" * 10)
    src = load_output_set(p, dtype="float32").source("x", 0)
    assert "10 bytes is not a multiple of 4 (float32)" in src.size_problem()


def test_bad_inputs_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_output_set(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no \.raw or \.npy files"):
        load_output_set(tmp_path / "empty")
    with pytest.raises(UserError, match="unknown dtype 'floot32'"):
        load_output_set(tmp_path, dtype="floot32")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(UserError, match=r"bad\.npy: cannot read it as \.npy"):
        load_output_set(tmp_path / "bad.npy")


def test_unreadable_folder_is_a_user_error():
    """Run without root's right to read everything (CI runs as root)."""
    base = world_traversable_tmp()
    d = base / "locked"
    d.mkdir()
    (d / "x.raw").write_bytes(b"\0" * 16)
    d.chmod(0)

    def check() -> None:
        with pytest.raises(UserError, match="cannot read it"):
            load_output_set(d)

    try:
        assert run_unprivileged(check) == ""
    finally:
        d.chmod(0o755)
        shutil.rmtree(base)


def test_parse_shape():
    assert parse_shape("1,3,224,224") == (1, 3, 224, 224)
    assert parse_shape(" 7 ") == (7,)
    for bad in ("1,a", "", "-1,2", "2x5", "1,,2"):
        with pytest.raises(UserError, match="bad shape"):
            parse_shape(bad)
