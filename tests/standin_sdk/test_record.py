"""The argument record at the top of the generated source, per SDK era, parsed by
simple checks written from the formats page and held against real files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fixtures.qairt_standin import make_sdk
from tests.standin_sdk.conftest import (
    RECORD,
    SDK_VERSION,
    convert,
    real_output,
    record_of,
    write_samples,
)

KEY_VALUE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def parse_semicolon(record: str) -> tuple[str, list[tuple[str, str]]]:
    head, *parts = record.split("; ")
    pairs = []
    for part in parts:
        match = KEY_VALUE.match(part)
        assert match, f"not key=value: {part!r}"
        pairs.append((match.group(1), match.group(2)))
    return head, pairs


def parse_space(record: str) -> tuple[str, list[tuple[str, str]]]:
    """Split only before ``key=`` tokens: values may hold spaces inside list reprs."""
    head, *parts = re.split(r" (?=[A-Za-z_][A-Za-z0-9_]*=)", record)
    return head, [(p.split("=", 1)[0], p.split("=", 1)[1]) for p in parts]


@pytest.fixture(scope="module")
def new_run(sdk: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, object]:
    out = tmp_path_factory.mktemp("rec_new")
    samples = write_samples(out / "calib", {"x": ((1, 3, 8, 8), "float32")}, 2)
    cpp = out / "model.cpp"
    run = convert(sdk, "--input_network", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp,
                  "--input_list", samples, "--act_bw", "16", "--weights_bitwidth", "8",
                  "--bias_bitwidth", "32", "--input_encoding", "x", "other")
    assert run.code == 0, run.text
    return {"cpp": cpp, "samples": samples, "json": out / "model_net.json"}


def test_new_era_record_is_semicolon_separated_sorted_and_complete(new_run: dict) -> None:
    head, pairs = parse_semicolon(record_of(new_run["cpp"]))
    keys = [k for k, _ in pairs]
    values = dict(pairs)
    assert head == "qnn-onnx-converter"
    assert keys == sorted(keys)
    assert "input_network" not in keys and "output_path" not in keys
    # one spelling for most alias pairs, but both float spellings
    assert {"act_bitwidth", "weights_bitwidth", "bias_bitwidth"} <= set(keys)
    assert not {"act_bw", "weight_bw", "bias_bw"} & set(keys)
    assert values["float_bitwidth"] == values["float_bw"] == "32"
    # --act_bw is an alias with the same destination
    assert values["act_bitwidth"] == "16" and values["bias_bitwidth"] == "32"
    assert values["input_dim"] == "[['x', '1,3,8,8']]"
    assert values["input_encoding"] == "[['x', 'other']]"
    assert values["input_list"] == str(new_run["samples"])
    assert values["quantization_overrides"] == ""        # empty string prints as nothing
    assert values["copyright_file"] == "None" and values["float_fallback"] == "False"
    assert values["out_names"] == "['output']"


def test_new_era_record_has_every_key_of_real_records(new_run: dict) -> None:
    ours = {k for k, _ in parse_semicolon(record_of(new_run["cpp"]))[1]}
    real_227 = RECORD.search(real_output("passthrough-qairt2.27-head.cpp").read_text())
    real_231 = RECORD.search(real_output("naf_block_sota-qairt2.31.cpp").read_text())
    assert real_227 and real_231
    keys_227 = {k for k, _ in parse_semicolon(real_227.group(1))[1]}
    keys_231 = {k for k, _ in parse_semicolon(real_231.group(1))[1]}
    assert keys_227 <= ours
    assert keys_231 == ours


def test_net_json_carries_the_same_record(new_run: dict) -> None:
    data = json.loads(Path(new_run["json"]).read_text())
    assert data["converter_command"] == record_of(new_run["cpp"])


def test_sdk_version_line_matches_real_files_and_the_sdk(new_run: dict) -> None:
    for name in ("passthrough-qairt2.27-head.cpp", "naf_block_sota-qairt2.31.cpp"):
        assert SDK_VERSION.search(real_output(name).read_text()), name
    match = SDK_VERSION.search(Path(new_run["cpp"]).read_text())
    assert match and match.group(1) == "2.31.0"


def test_oldest_era_rejects_long_flags_with_argparse(models: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """2.13 and older only know ``--act_bw`` (formats page section 1; a real 2.10
    record lists only ``*_bw`` names); 2.18 already had both."""
    sdk213 = make_sdk(tmp_path / "sdk213", "2.13.0")
    run = convert(sdk213, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o",
                  tmp_path / "m.cpp", "--act_bitwidth", "16")
    assert run.code == 2
    assert "unrecognized arguments: --act_bitwidth" in run.stderr
    assert not (tmp_path / "m.cpp").exists()


def test_old_era_record_is_space_separated_with_alias_pairs(old_sdk: Path,
                                                            models: dict[str, Path],
                                                            tmp_path: Path) -> None:
    cpp = tmp_path / "m.cpp"
    run = convert(old_sdk, "-i", models["tiny"], "-d", "x", "1,3,8,8", "-o", cpp,
                  "--act_bw", "16", "--weight_bw", "8", "--out_name", "output")
    assert run.code == 0, run.text
    record = record_of(cpp)
    assert "; " not in record
    head, pairs = parse_space(record)
    keys = [k for k, _ in pairs]
    values = dict(pairs)
    assert head == "qnn-onnx-converter" and keys == sorted(keys)
    for canonical, short in (("act_bitwidth", "act_bw"), ("bias_bitwidth", "bias_bw"),
                             ("weights_bitwidth", "weight_bw")):
        first, second = sorted((canonical, short))
        assert keys.index(second) == keys.index(first) + 1, (first, second)
        assert values[canonical] == values[short]
    assert values["act_bw"] == "16"
    # the conflicting pair real 2.18 records carry
    assert (values["float_bias_bitwidth"], values["float_bias_bw"]) == ("0", "32")
    assert values["input_dim"] == "[['x', '1,3,8,8']]"    # a value with a space inside
    assert values["out_names"] == "['output']"


def test_help_lists_the_flags_of_the_era(sdk: Path, old_sdk: Path, tmp_path: Path) -> None:
    new_help = convert(sdk, "--help")
    old_help = convert(old_sdk, "--help")
    oldest_help = convert(make_sdk(tmp_path / "sdk210", "2.10.0"), "--help")
    assert new_help.code == old_help.code == oldest_help.code == 0
    assert "--act_bitwidth" in new_help.stdout and "--act_bw" in new_help.stdout
    # real 2.18 records carry act_bitwidth next to act_bw: both flags existed
    assert "--act_bw" in old_help.stdout and "--act_bitwidth" in old_help.stdout
    assert "--act_bw" in oldest_help.stdout and "--act_bitwidth" not in oldest_help.stdout
    # calibration/schema flags are not in the real 2.18 record; float_fallback not in 2.10
    assert "--act_quantizer_calibration" in new_help.stdout
    assert "--act_quantizer_calibration" not in old_help.stdout
    assert "--float_fallback" in old_help.stdout and "--float_fallback" not in oldest_help.stdout
    assert "--input_list" in old_help.stdout and "--dry_run" in new_help.stdout
