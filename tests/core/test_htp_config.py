"""`htp_config:` in the manifest: every mistake the SDK would silently accept is one
line naming file, line and key; a valid config lands in the ExportSpec (defaults
merged) and is written in the SDK's shape with the converter's graph names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qnn_ci.cli import main
from qnn_ci.engine.spec import HtpConfigSpec
from qnn_ci.errors import UserError
from qnn_ci.manifest.htp_config import parse_htp_config
from qnn_ci.manifest.loader import load_manifest
from qnn_ci.manifest.yaml_lines import dotted
from qnn_ci.sdk.htp_config import graph_names_from_cpp, render_htp_config, write_htp_config
from qnn_ci.tables import get_soc
from tests.conftest import REAL_OUTPUTS
from tests.core.graphs import scale_model
from tests.core.test_manifest import error_of, write

EXAMPLES = int(os.environ.get("QNN_CI_FUZZ_EXAMPLES", "150"))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return scale_model(tmp_path / "m.onnx")


def _manifest(tmp_path: Path, htp: str, soc: str = "QCS6490") -> Path:
    return write(tmp_path, f"""
        exports:
          - name: a
            model: m.onnx
            target: {{soc: {soc}}}
            htp_config: {htp}
        """)


@pytest.mark.parametrize("htp,key,words", [
    ("{vtcm: 2}", "exports[0].htp_config.vtcm",
     "unknown key 'vtcm' (did you mean 'vtcm_mb'?): the SDK would silently ignore it"),
    ("{optimization_level: 3}", "exports[0].htp_config.optimization_level",
     "(did you mean 'O'?)"),
    ("{fp16_relaxed_precision: true}", "exports[0].htp_config.fp16_relaxed_precision",
     "QCS6490 (HTP v68) has no FP16"),
    ("{vtcm_mb: 4}", "exports[0].htp_config.vtcm_mb",
     "vtcm_mb 4 is more than the 2 MiB of VTCM the QCS6490 has"),
    ("{O: 4}", "exports[0].htp_config.O", "4"),
    ("{soc_model: 35}", "exports[0].htp_config.soc_model",
     "soc_model 35 disagrees with target.soc QCS6490 (soc_model 93)"),
    ("{dsp_arch: v73}", "exports[0].htp_config.dsp_arch", "disagrees with target.soc"),
])
def test_each_mistake_is_one_line_with_file_line_and_key(tmp_path: Path, model: Path,
                                                         htp: str, key: str,
                                                         words: str) -> None:
    err = error_of(_manifest(tmp_path, htp))
    text = err.oneline()
    assert words in text, text
    assert err.line == 5 and err.key == key, text
    assert "\n" not in text and str(tmp_path / "qnn-ci.yaml") in text


def test_a_valid_config_lands_in_the_spec_and_defaults_merge(tmp_path: Path,
                                                             model: Path) -> None:
    p = write(tmp_path, """
        defaults:
          htp_config: {O: 3, hvx_threads: 4}
        exports:
          - name: a
            model: m.onnx
            target: {soc: SM8550}
            htp_config: {vtcm_mb: 8, fp16_relaxed_precision: true, dsp_arch: V73}
          - name: b
            model: m.onnx
        """)
    a, b = load_manifest(p).exports
    assert a.htp_config == HtpConfigSpec(vtcm_mb=8, O=3, fp16_relaxed_precision=True,
                                         hvx_threads=4, dsp_arch="v73")
    assert b.htp_config == HtpConfigSpec(O=3, hvx_threads=4) and b.htp_config.given
    assert not load_manifest(_manifest(tmp_path, "{}")).exports[0].htp_config.given


def test_a_defaults_mistake_names_the_defaults_line(tmp_path: Path, model: Path) -> None:
    p = write(tmp_path, """
        defaults:
          htp_config: {vtcm_mb: 3}
        exports:
          - name: a
            model: m.onnx
            target: {soc: QCS6490}
        """)
    err = error_of(p)
    assert err.line == 2 and err.key == "defaults.htp_config.vtcm_mb", err.oneline()


def test_written_files_have_the_sdk_shape_with_real_graph_names(tmp_path: Path) -> None:
    cpp = REAL_OUTPUTS / "naf_block_sota-qairt2.31.cpp"
    if not cpp.is_file():
        pytest.skip("no real converter output here")
    assert graph_names_from_cpp(cpp) == ["naf_block_sota"]
    assert graph_names_from_cpp(REAL_OUTPUTS / "resnet18_int8-qairt2.18.cpp") == ["resnet18_int8"]
    spec = HtpConfigSpec(vtcm_mb=2, O=3, hvx_threads=4)
    wrapper = write_htp_config(spec, get_soc("QCS6490"), graph_names_from_cpp(cpp),
                               tmp_path / "cfg", inner_path_text="/tmp/qnn-ci/run-1/htp.json")
    assert json.loads(wrapper.read_text()) == {"backend_extensions": {
        "shared_library_path": "libQnnHtpNetRunExtensions.so",
        "config_file_path": "/tmp/qnn-ci/run-1/htp.json"}}
    assert json.loads((tmp_path / "cfg" / "htp_config.json").read_text()) == {
        "graphs": [{"graph_names": ["naf_block_sota"], "vtcm_mb": 2, "O": 3,
                    "hvx_threads": 4}],
        "devices": [{"soc_model": 93, "dsp_arch": "v68"}]}
    assert render_htp_config(HtpConfigSpec(), None, ["g"]) == {}


def test_cli_prints_both_files_and_refuses_a_bad_value(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["htp-config", "--soc", "SM8550", "--O", "2", "--graph", "g", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["htp_config"]["graphs"] == [{"graph_names": ["g"], "O": 2}]
    assert out["htp_config"]["devices"] == [{"soc_model": 43, "dsp_arch": "v73"}]
    assert out["wrapper"]["backend_extensions"]["config_file_path"] == "htp_config.json"
    assert main(["htp-config", "--soc", "QCS6490", "--O", "7", "--graph", "g"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--O" in err[0] and "1, 2 or 3" in err[0]
    assert main(["htp-config", "--soc", "QCS6490", "--O", "1"]) == 2
    assert "--graph" in capsys.readouterr().err


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 80), st.text(max_size=6),
                    st.floats(allow_nan=True), st.lists(st.integers(), max_size=2))
_KEYS = st.one_of(st.sampled_from(["vtcm_mb", "O", "fp16_relaxed_precision", "hvx_threads",
                                   "dlbc", "soc_model", "dsp_arch"]), st.text(max_size=8))


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(value=st.one_of(_VALUES, st.dictionaries(_KEYS, _VALUES, max_size=5)),
       soc=st.sampled_from([None, "QCS6490", "SM8550", "SM8850"]))
def test_fuzz_the_validator_gives_a_spec_or_one_line(value: object, soc: str | None) -> None:
    def error(key_path: tuple, message: str) -> UserError:   # as the loader's ctx.error
        return UserError(message, key=dotted(key_path))
    try:
        spec = parse_htp_config(value, get_soc(soc) if soc else None, error)
    except UserError as exc:
        assert "\n" not in exc.oneline()
        return
    assert isinstance(spec, HtpConfigSpec)
    render_htp_config(spec, get_soc(soc) if soc else None, ["g"])
