"""The dry_run / convert / model_lib stage adapters with hand-built contexts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from qnn_ci.engine.results import Severity, StageResult, Status
from qnn_ci.engine.spec import InputSpec, QuantizationSpec, SdkSpec, TargetSpec
from qnn_ci.engine.stage import Environment, StageContext
from qnn_ci.errors import UserError
from qnn_ci.stages.convert import ConvertStage
from qnn_ci.stages.dry_run import DryRunStage
from qnn_ci.stages.model_lib import ModelLibStage
from tests.sdk_tools.conftest import (
    PPOCR_CLS,
    tiny_conv_model,
    unsupported_op_model,
    weightless_model,
    write_input_list,
)

AARCH64 = "aarch64-oe-linux-gcc11.2"


def _env(tmp_path: Path, root: Path | None, esdk: Path | None = None) -> Environment:
    environ = {"PATH": "/usr/bin:/bin"}
    if root is not None:
        environ["QNN_SDK_ROOT"] = str(root)
    if esdk is not None:
        environ["ESDK_ENV"] = str(esdk)
    return Environment(workdir=tmp_path / "work", environ=environ)


def _ctx(export, env: Environment, stage: str, upstream: dict[str, StageResult]) -> StageContext:
    workdir = env.workdir / export.name / stage
    workdir.mkdir(parents=True, exist_ok=True)
    return StageContext(export=export, env=env, workdir=workdir, upstream=upstream)


def _shapes(model: Path, inputs: list[tuple[str, str, list[int]]]) -> StageResult:
    return StageResult("static_shapes", Status.PASSED, artefacts={"model": str(model)},
                       data={"inputs": [{"name": n, "dtype": d, "shape": s}
                                        for n, d, s in inputs]})


def _calibration(input_list: Path) -> StageResult:
    return StageResult("calibration", Status.PASSED, artefacts={"input_list": str(input_list)})


def test_skip_reasons_name_the_missing_piece(export_factory, standin_root,
                                             tmp_path: Path) -> None:
    export = export_factory(target=TargetSpec(lib_target=AARCH64))
    assert DryRunStage().unavailable(export, _env(tmp_path, None)) == "QNN_SDK_ROOT is not set"
    # A configured root that is wrong is not a skip (CI would go green): find_sdk
    # reports it as bad input (tests/sdk_tools/test_sdk_config.py).
    missing = tmp_path / "nowhere"
    assert ConvertStage().unavailable(export, _env(tmp_path, missing)) is None
    with pytest.raises(UserError, match=f"QNN_SDK_ROOT: QNN SDK root {missing} does not exist"):
        ConvertStage().fingerprint(_ctx(export, _env(tmp_path, missing), "convert", {}))
    root = standin_root()
    assert ConvertStage().unavailable(export, _env(tmp_path, root)) is None
    assert ModelLibStage().unavailable(export, _env(tmp_path, root)) == \
        "ESDK_ENV is not set (needed by qnn-model-lib-generator for aarch64 Linux targets)"
    x86 = export_factory(target=TargetSpec(lib_target="x86_64-linux-clang"))
    assert ModelLibStage().unavailable(x86, _env(tmp_path, root)) is None
    assert all(s.marker == "qnn_sdk" for s in (DryRunStage(), ConvertStage(), ModelLibStage()))


def test_fingerprint_changes_with_the_sdk(export_factory, standin_root, tmp_path: Path) -> None:
    export = export_factory()
    fps = []
    for version in ("2.31.0", "2.13.0"):
        env = _env(tmp_path, standin_root(version))
        fps.append(DryRunStage().fingerprint(_ctx(export, env, "dry_run", {})))
    assert fps[0]["sdk_version"] == "2.31.0" and fps[1]["sdk_version"] == "2.13.0"
    assert fps[0]["converter_help"] != fps[1]["converter_help"]
    assert "--act_bitwidth" in fps[0]["converter_flags"]
    assert "--act_bitwidth" not in fps[1]["converter_flags"]
    pinned = export_factory(sdk=SdkSpec(root=standin_root("2.13.0")))
    env = _env(tmp_path, standin_root("2.31.0"))
    assert DryRunStage().fingerprint(_ctx(pinned, env, "dry_run", {})) == fps[1]


def test_dry_run_stage_fails_on_problem_rows(export_factory, standin_root,
                                             tmp_path: Path) -> None:
    model = unsupported_op_model(tmp_path / "u.onnx")
    env = _env(tmp_path, standin_root())
    export = export_factory(model=model)
    res = DryRunStage().run(_ctx(export, env, "dry_run",
                                 {"static_shapes": _shapes(model, [("x", "float32",
                                                                    [1, 2, 4, 4])])}))
    assert res.status == Status.FAILED and res.data["exit_code"] == 0
    assert [f.subject for f in res.errors()] == ["warp/GridSample"]
    assert "GridSample" in res.summary and Path(res.artefacts["log"]).is_file()


def _cubic_resize_model(path: Path) -> Path:
    """x -> Resize(mode=cubic, node named "rz"): a supported op with a bad attribute."""
    from onnx import TensorProto, helper, numpy_helper

    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="rz", mode="cubic")],
        "rz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], [scales])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_dry_run_attribute_row_names_the_op_from_the_model(export_factory, standin_root,
                                                           tmp_path: Path) -> None:
    model = _cubic_resize_model(tmp_path / "rz.onnx")
    env = _env(tmp_path, standin_root())
    res = DryRunStage().run(_ctx(export_factory(model=model), env, "dry_run", {
        "static_shapes": _shapes(model, [("x", "float32", [1, 2, 4, 4])])}))
    assert res.status == Status.FAILED
    assert [f.message for f in res.errors()] == [
        "layer rz (Resize): Attributes: mode=cubic unsupported value"]
    assert res.data["problems"][0]["op"] == "Resize"


def test_convert_stage_artefacts_and_data(export_factory, standin_root, tmp_path: Path) -> None:
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=False)
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    env = _env(tmp_path, standin_root("2.13.0"))
    export = export_factory(model=model, name="det-v2")
    res = ConvertStage().run(_ctx(export, env, "convert", {
        "static_shapes": _shapes(model, [("x", "float32", [1, 3, 8, 8])]),
        "calibration": _calibration(lst)}))
    assert res.status == Status.PASSED, res.failure_text()
    assert set(res.artefacts) == {"cpp", "bin", "net_json", "log"}
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in res.artefacts.values())
    assert Path(res.artefacts["cpp"]).name == "det_v2.cpp"
    assert res.data["sdk_version"] == "2.13.0" and res.properties["sdk_version"] == "2.13.0"
    # a 2.13 source has no QNN_SDK_VERSION and the record a bare tool name: the SDK folder
    assert res.properties["sdk_version_source"] == "SDK folder"
    argv = res.data["argv"]
    assert argv[argv.index("--act_bw") + 1] == "16" and argv[argv.index("--bias_bw") + 1] == "32"
    assert argv[argv.index("--input_dim") + 1:argv.index("--input_dim") + 3] == ["x", "1,3,8,8"]
    assert "--input_list" in res.properties["converter_argv"]


def test_convert_stage_without_weights_has_no_bin(export_factory, standin_root,
                                                  tmp_path: Path) -> None:
    model = weightless_model(tmp_path / "w.onnx")
    lst = write_input_list(tmp_path / "cal", {"a": ((1, 4), "float32"),
                                              "b": ((1, 4), "float32")})
    env = _env(tmp_path, standin_root())
    res = ConvertStage().run(_ctx(export_factory(model=model), env, "convert", {
        "static_shapes": _shapes(model, [("a", "float32", [1, 4]), ("b", "float32", [1, 4])]),
        "calibration": _calibration(lst)}))
    assert res.status == Status.PASSED, res.failure_text()
    assert set(res.artefacts) == {"cpp", "net_json", "log"}


def test_float_fallback_refused_before_running(export_factory, standin_root,
                                               tmp_path: Path) -> None:
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=False)
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    env = _env(tmp_path, standin_root())
    export = export_factory(model=model, quantization=QuantizationSpec(float_fallback=True),
                            target=TargetSpec(soc="QCS6490"))
    ctx = _ctx(export, env, "convert", {
        "static_shapes": _shapes(model, [("x", "float32", [1, 3, 8, 8])]),
        "calibration": _calibration(lst)})
    with pytest.raises(UserError, match=r"quantization\.float_fallback: refused for QCS6490"):
        ConvertStage().run(ctx)
    assert not (ctx.workdir / "convert.log").exists()


def test_convert_stage_unsupported_op(export_factory, standin_root, tmp_path: Path) -> None:
    model = unsupported_op_model(tmp_path / "u.onnx")
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 2, 4, 4), "float32")})
    env = _env(tmp_path, standin_root())
    res = ConvertStage().run(_ctx(export_factory(model=model), env, "convert", {
        "static_shapes": _shapes(model, [("x", "float32", [1, 2, 4, 4])]),
        "calibration": _calibration(lst)}))
    assert res.status == Status.FAILED
    [finding] = res.errors()
    assert finding.check == "convert.unsupported_op" and finding.subject == "warp/GridSample"
    assert Path(res.artefacts["log"]).is_file()


def _pin(model: Path, out: Path, dims: list[int]) -> Path:
    proto = onnx.load(str(model))
    shape = proto.graph.input[0].type.tensor_type.shape
    for dim, value in zip(shape.dim, dims, strict=True):
        dim.Clear()
        dim.dim_value = value
    onnx.save(onnx.shape_inference.infer_shapes(proto), str(out))
    return out


def test_ppocr_classifier_dry_run_convert_model_lib(export_factory, standin_root,
                                                    esdk_script: Path, tmp_path: Path) -> None:
    if not PPOCR_CLS.is_file():
        pytest.skip(f"{PPOCR_CLS} is not installed")
    model = _pin(PPOCR_CLS, tmp_path / "cls.static.onnx", [1, 3, 48, 192])
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 48, 192), "float32")}, samples=2)
    env = _env(tmp_path, standin_root(), esdk_script)
    export = export_factory(model=model, name="cls",
                            inputs={"x": InputSpec("x", (1, 3, 48, 192), "float32")},
                            target=TargetSpec(soc="QCS6490", lib_target=AARCH64))
    shapes = _shapes(model, [("x", "float32", [1, 3, 48, 192])])
    dry = DryRunStage().run(_ctx(export, env, "dry_run", {"static_shapes": shapes}))
    assert dry.status == Status.PASSED, dry.failure_text()
    conv = ConvertStage().run(_ctx(export, env, "convert", {
        "static_shapes": shapes, "calibration": _calibration(lst), "dry_run": dry}))
    assert conv.status == Status.PASSED, conv.failure_text()
    # The classifier's weights are Constant nodes, not initializers: a .bin is expected.
    assert Path(conv.artefacts["bin"]).stat().st_size > 0
    lib = ModelLibStage().run(_ctx(export, env, "model_lib", {"convert": conv}))
    assert lib.status == Status.PASSED, lib.failure_text()
    assert lib.data == {"target": AARCH64, "elf_machine": 183, "sdk_version": "2.31.0"}
    assert Path(lib.artefacts["library"]).name == "libcls.so"


def test_model_lib_stage_requires_target(export_factory, standin_root, tmp_path: Path) -> None:
    env = _env(tmp_path, standin_root())
    conv = StageResult("convert", Status.PASSED, artefacts={"cpp": str(tmp_path / "m.cpp")})
    ctx = _ctx(export_factory(), env, "model_lib", {"convert": conv})
    with pytest.raises(UserError, match=r"target\.lib_target: is required"):
        ModelLibStage().run(ctx)
    assert not (ctx.workdir / "model_lib.log").exists()      # the tool never ran


def test_converter_that_cannot_start_fails_with_last_lines(export_factory,
                                                           tmp_path: Path) -> None:
    from fixtures.qairt_standin import make_sdk

    root = make_sdk(tmp_path / "broken")
    tool = root / "bin" / "x86_64-linux-clang" / "qnn-onnx-converter"
    tool.write_text("#!/bin/bash\necho 'Traceback (most recent call last):'\n"
                    "echo 'ImportError: libpython3.10.so.1.0: cannot open shared object file'\n"
                    "exit 1\n")
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=False)
    env = _env(tmp_path, root)
    res = DryRunStage().run(_ctx(export_factory(model=model), env, "dry_run", {
        "static_shapes": _shapes(model, [("x", "float32", [1, 3, 8, 8])])}))
    assert res.status == Status.FAILED
    text = res.failure_text()
    assert "could not read the flags of qnn-onnx-converter --help" in text
    assert f"command: {tool} --help" in text          # the absolute path locate checked
    assert "ImportError: libpython3.10.so.1.0" in text


def _converted(export_factory, env: Environment, tmp_path: Path) -> StageResult:
    model = tiny_conv_model(tmp_path / "m.onnx", dynamic_batch=False)
    lst = write_input_list(tmp_path / "cal", {"x": ((1, 3, 8, 8), "float32")})
    res = ConvertStage().run(_ctx(export_factory(model=model), env, "convert", {
        "static_shapes": _shapes(model, [("x", "float32", [1, 3, 8, 8])]),
        "calibration": _calibration(lst)}))
    assert res.status == Status.PASSED, res.failure_text()
    return res


def test_model_lib_warns_when_the_target_cannot_run_on_a_linux_board(
        export_factory, standin_root, tmp_path: Path) -> None:
    env = _env(tmp_path, standin_root())
    ndk = tmp_path / "ndk"
    ndk.mkdir()
    env = Environment(workdir=env.workdir, environ={**env.environ, "ANDROID_NDK_ROOT": str(ndk)})
    conv = _converted(export_factory, env, tmp_path)
    for target, soc, built in (("aarch64-android", "SM8550", "an Android library"),
                               ("x86_64-linux-clang", "QCS6490", "a library for the x86_64 host"),
                               ("x86_64-linux-clang", None, None)):
        export = export_factory(target=TargetSpec(soc=soc, lib_target=target))
        assert ModelLibStage().unavailable(export, env) is None     # no eSDK asked for
        res = ModelLibStage().run(_ctx(export, env, f"model_lib-{target}-{soc}",
                                       {"convert": conv}))
        assert res.status == Status.PASSED, res.failure_text()
        warnings = [f for f in res.findings if f.check == "model_lib.target"]
        if built is None:
            assert warnings == []
            continue
        [w] = warnings
        assert w.severity == Severity.WARNING
        assert w.message.startswith(f"lib_target {target} builds {built}: it will not run on "
                                    f"an aarch64 Linux board ({soc})")


def test_tools_run_by_the_absolute_path_locate_checked(export_factory, tmp_path: Path) -> None:
    from fixtures.qairt_standin import make_sdk

    root = make_sdk(tmp_path / "sdk")
    envsetup = root / "bin" / "envsetup.sh"              # an envsetup that leaves PATH alone
    envsetup.write_text("\n".join(line for line in envsetup.read_text().splitlines()
                                  if not line.startswith("export PATH=")) + "\n")
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    for tool in ("qnn-onnx-converter", "qnn-model-lib-generator"):
        (decoy / tool).write_text("#!/bin/sh\necho 'the wrong tool ran' >&2\nexit 1\n")
        (decoy / tool).chmod(0o755)
    env = Environment(workdir=tmp_path / "work", environ={
        "PATH": f"{decoy}:/usr/bin:/bin", "QNN_SDK_ROOT": str(root)})
    conv = _converted(export_factory, env, tmp_path)
    assert conv.data["argv"][0] == str(root / "bin/x86_64-linux-clang/qnn-onnx-converter")
    export = export_factory(target=TargetSpec(lib_target="x86_64-linux-clang"))
    lib = ModelLibStage().run(_ctx(export, env, "model_lib", {"convert": conv}))
    assert lib.status == Status.PASSED, lib.failure_text()
    assert Path(lib.artefacts["log"]).read_text().startswith(
        f"command: {root}/bin/x86_64-linux-clang/qnn-model-lib-generator -c ")
