"""The ``qairt-dlc-info`` reader on literal texts in every layout seen or plausible:
the SDK's ``snpe_dlc_utils.py`` table (types inline, ``[NW Input]``, encodings and
``axis-quant`` in the Parameters cell), a ``Data Type`` column, types only in the
input/output tables, ``+--+`` rules, the CSV of ``-s``, metadata wrapped in ``| |``,
``N/A`` and command-line records, ``Fxp_8`` for signed fixed point."""

from __future__ import annotations

from pathlib import Path

import pytest

from qnn_ci.errors import UserError
from qnn_ci.sdk.dlc_info import data_type_of, parse_dlc_info, read_dlc_info

DUMPS = Path(__file__).parent / "dumps"


def _dump(name: str) -> str:
    return (DUMPS / name).read_text(encoding="utf-8")


# snpe_dlc_utils.py's own layout (vendored in archwine/snpe_demo): types inline, the
# NW Input marker, encodings in the Parameters column (printed with %.12f).
SNPE = _dump("snpe_dlc_utils.txt")

# A Data Type column and +--+ rules; the op cells hold bare names; signed as Fxp_8.
COLUMN = _dump("data_type_column.txt")

# What `-s out.csv` writes (cells quoted, a cell's tensors joined by "; "), and a
# public parser's fixture: metadata first, an Output Name table.
CSV = _dump("save_csv.csv")

# A blog's markdown copy of a dump: every metadata line in a table cell.
WRAPPED = _dump("markdown_wrapped.txt")


def test_the_sdk_layout_gives_tensors_types_dims_kinds_encodings_and_records() -> None:
    info = parse_dlc_info(SNPE)
    assert info.problems == [] and not info.empty
    assert [op.name for op in info.ops] == ["/c1/Conv", "/r/Relu"]
    assert info.ops[0].inputs == ["x", "w1", "b1"] and info.ops[0].outputs == \
        ["/c1/Conv_output_0"]
    assert info.inputs == ["x"] and info.outputs == ["y"]
    x, w1, b1 = info.tensors["x"], info.tensors["w1"], info.tensors["b1"]
    assert (x.data_type, x.dims, x.kind) == ("QNN_DATATYPE_UFIXED_POINT_16", (1, 16, 16, 3),
                                             "APP_WRITE")
    assert x.encoding is not None and x.encoding.offset == -33777 and x.bits == 16
    assert w1.is_static and w1.data_type == "QNN_DATATYPE_SFIXED_POINT_8"
    assert w1.encoding is not None and w1.encoding.per_axis and w1.encoding.axis == 3
    assert b1.data_type == "QNN_DATATYPE_SFIXED_POINT_32" and b1.encoding is None
    assert info.quantizer is not None and info.quantizer.value("act_bitwidth") == 16
    assert info.quantizer.value("use_per_channel_quantization") is True
    assert info.converter is not None and info.converter.value("input_dim") == \
        [["x", "1,3,16,16"]]
    assert info.converter.raw_value("quantization_overrides") == ""
    assert info.sdk_version == "2.31.0" and info.total_parameters == 224
    assert info.graph_names == [] and info.fp16_tensors() == []


def test_a_data_type_column_and_command_line_records_are_read() -> None:
    info = parse_dlc_info(COLUMN)
    assert info.problems == []
    assert info.tensors["c"].data_type == "QNN_DATATYPE_UFIXED_POINT_8"
    assert info.tensors["c"].dims == (1, 8, 8, 4)
    assert [t.name for t in info.fp16_tensors()] == ["probs"]
    assert info.ops_of("probs")[0].name == "sm"
    assert info.tensors["w"].data_type is None          # a weight printed by name only
    assert info.inputs == ["x"] and info.outputs == ["probs"]
    assert info.tensors["x"].dims == (1, 8, 8, 3)
    q = info.quantizer
    assert q is not None and q.value("act_bitwidth") == 8 and q.value("float_fallback") is True
    assert q.value("input_dlc") == "m.dlc" and not q.has("input_list")
    assert info.converter is not None and info.converter.value("source_model_input_shape") == \
        ["x", "1,3,8,8"]
    assert info.graph_names == ["m"]


def test_the_csv_layout_and_a_semicolon_record_are_read() -> None:
    info = parse_dlc_info(CSV)
    assert info.problems == []
    assert info.ops[0].inputs == ["reference_input", "conv_weight", "conv_bias"]
    assert info.ops[0].outputs == ["biased_output", "reference_output"]
    assert info.tensors["conv_weight"].encoding is not None
    assert info.tensors["conv_weight"].encoding.scale == pytest.approx(0.003921568627)
    assert info.inputs == ["reference_input"] and info.outputs == ["reference_output"]
    assert info.converter is not None and info.converter.value("desired_io_layout") == \
        [["reference_input", "NCHW"], ["reference_output", "NCHW"]]
    assert info.quantizer is not None and info.quantizer.value("weights_bitwidth") == 8


def test_wrapped_metadata_and_na_records() -> None:
    info = parse_dlc_info(WRAPPED)
    assert info.quantizer is None and info.quantizer_command is None
    assert "quantizer_command" in info.seen and not info.empty
    assert info.converter is not None and info.converter.tool == "snpe-onnx-to-dlc"
    assert info.converter.value("out_names") == ["1066"]
    assert info.sdk_version == "1.68.0" and info.total_parameters == 1362816
    assert info.tensors == {}


def test_io_tables_alone_still_type_the_graph_io() -> None:
    text = COLUMN.replace("| Data Type |", "| Params2   |").replace("| uFxp_8    |", "|  |") \
        .replace("| Float_16  |", "|  |")
    info = parse_dlc_info(text)
    assert info.tensors["c"].data_type is None
    assert info.tensors["probs"].data_type == "QNN_DATATYPE_FLOAT_16"
    assert info.tensors["x"].data_type == "QNN_DATATYPE_UFIXED_POINT_8"


@pytest.mark.parametrize("raw,name", [
    ("uFxp_8", "QNN_DATATYPE_UFIXED_POINT_8"), ("sFxp_32", "QNN_DATATYPE_SFIXED_POINT_32"),
    ("Fxp_16", "QNN_DATATYPE_SFIXED_POINT_16"), ("Float_16", "QNN_DATATYPE_FLOAT_16"),
    ("Float_32", "QNN_DATATYPE_FLOAT_32"), ("Int_32", "QNN_DATATYPE_INT_32"),
    ("uInt_8", "QNN_DATATYPE_UINT_8"), ("Bool_8", "QNN_DATATYPE_BOOL_8"),
    ("QNN_DATATYPE_INT_64", "QNN_DATATYPE_INT_64"), ("UFIXED_POINT_16",
                                                     "QNN_DATATYPE_UFIXED_POINT_16"),
    ("float16", "QNN_DATATYPE_FLOAT_16"), ("Float_64", None), ("uFxp_12", None),
    ("banana", None), ("", None), ("QNN_DATATYPE_FLOAT_99", None),
])
def test_data_type_names(raw: str, name: str | None) -> None:
    assert data_type_of(raw) == name


def test_nothing_recognisable_is_empty_and_a_bad_file_is_one_line(tmp_path: Path) -> None:
    assert parse_dlc_info("Error: Failed to load DLC: x.dlc\n").empty
    bad = parse_dlc_info("| 0 | a | Conv | x (data type: uFxp_8; tensor dimension: [1,x]"
                         "; tensor type: NATIVE) | | |\n| 1 | b | Add | y (data type: uFxp_8 | | |")
    assert len(bad.problems) == 2 and bad.tensors["x"].dims is None
    with pytest.raises(UserError) as info:
        read_dlc_info(tmp_path)
    assert "\n" not in info.value.oneline() and "folder" in info.value.oneline()
