"""The advisor on a real detector (PP-OCRv4 det from the rapidocr wheel, pinned at
1x3x96x256, rendered text pages) for QCS6490: the honest answers, pinned.

Measured when this was written (8 calibration pages, 2 held-out):

| settings | QDQ on CPU | QCS6490 simulator |
|---|---|---|
| W8A16 per-tensor (the export) | 0.96468 | 0.96447 |
| per_channel: true | 0.99913 | 0.99536 |

With a cosine bound of 0.998 the per-channel recipe passes the CPU screen and
FAILS on the simulator: the case where a CPU number would have printed "passes".
16-bit weights do not prepare on the v68 HTP (QNN error 3110 on a Conv).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from qnn_ci.diagnose.model import FAILS_SIM, REJECTED, SIMULATOR
from qnn_ci.engine.bounds import Thresholds
from tests.conftest import once_per_run
from tests.diagnose.conftest import Checked, check
from tests.sim.conftest import needs_sim, pin_model

pytestmark = [needs_sim, pytest.mark.slow]
BOUND = 0.998


def _pages(n: int) -> list[dict[str, Any]]:
    path = Path(__file__).resolve().parents[2] / "examples" / "ocr" / "ocr_samples.py"
    spec = importlib.util.spec_from_file_location("ocr_samples_for_advice", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return list(module.text_pages(n))


@pytest.fixture(scope="module")
def det_checked(det_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Checked:
    from qnn_ci.sim.quantize import QuantSettings

    def make(folder: Path) -> Checked:
        pinned = pin_model(det_model, folder / "det.static.onnx", {"x": [1, 3, 96, 256]})
        pages = _pages(10)
        return check(pinned, folder / "default", pages[:8], pages[8:], QuantSettings(),
                     thresholds=Thresholds(default={"cosine": BOUND}))

    return once_per_run(tmp_path_factory, "det_checked", make)


@pytest.fixture(scope="module")
def diagnosed(det_checked: Checked, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from qnn_ci.diagnose.sim import diagnose_sim

    c = det_checked
    lines: list[str] = []
    d = diagnose_sim(float_model=c.model, qdq_model=c.qdq, ctx_model=c.ctx, soc=c.soc,
                     numerics=c.numerics, calibration=c.calibration, held_out=c.held_out,
                     settings=c.settings, thresholds=Thresholds(default={"cosine": BOUND}),
                     out_dir=tmp_path_factory.mktemp("det_diag"), budget_s=300.0,
                     progress=lines.append)
    return d, lines


def test_the_premise(det_checked: Checked) -> None:
    assert not det_checked.numerics.passed and not det_checked.numerics.qdq_cpu.passed


def test_a_cpu_pass_that_does_not_hold_on_the_simulator_is_not_a_pass(diagnosed: Any) -> None:
    d, _ = diagnosed
    pc = next(r for r in d.recipes if r.name == "per_channel")
    assert pc.cpu_passes is True and pc.cpu_worst["cosine"] >= BOUND      # CPU: "passes"
    assert pc.prepared is True and pc.measured_on == SIMULATOR
    assert pc.verdict == FAILS_SIM and not pc.passes
    assert pc.worst["cosine"] < BOUND < pc.cpu_worst["cosine"]
    assert "fails on the simulator" in d.headline() or "no fix" in d.headline()
    assert not any(r.passes and r.measured_on != SIMULATOR for r in d.recipes)


def test_16bit_weights_do_not_prepare_on_v68(diagnosed: Any) -> None:
    d, _ = diagnosed
    w16 = next(r for r in d.recipes if r.name == "weights_16bit")
    assert w16.verdict == REJECTED and w16.prepared is False and not w16.passes
    assert w16.rejection.startswith("rejected by QCS6490 HTP: QNN error 3110 on node ")
    assert "(Conv)" in w16.rejection


def test_nothing_passes_is_said_plainly_with_what_is_left(diagnosed: Any) -> None:
    d, _ = diagnosed
    if any(r.passes for r in d.recipes):            # a pair may pass: then it is the fix
        best = d.recipes[0]
        assert best.passes and best.measured_on == SIMULATOR and "+" in best.name
        return
    assert d.advice[0].startswith("nothing tried passes on QCS6490; best: ")
    assert "on the QCS6490 simulator" in d.advice[0]
    assert any("AIMET encodings" in x for x in d.advice)
    assert "no fix: nothing tried passes on QCS6490" in d.headline()
