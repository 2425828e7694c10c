"""A simulator worker killed by a signal (SIGKILL: what the kernel's OOM killer
sends) ends the run with one line naming the worker, the signal, the sample and
the memory available, and sim_numerics reports it as its own error, by name, never
cached. The worker is a real process that really receives SIGKILL
(``QNN_CI_SIM_KILL_WORKER``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qnn_ci.engine.pipeline import NO_CACHE
from qnn_ci.engine.results import Status
from qnn_ci.sim.ep import sim_target
from qnn_ci.sim.parallel import ENV_KILL, SimPool, WorkerKilled, killed_message
from tests.sim.conftest import make_conv_feeds, needs_sim


@pytest.fixture(scope="module")
def conv_ctx(graphs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from qnn_ci.sim.check import check_htp
    from qnn_ci.sim.quantize import QuantSettings

    report = check_htp(graphs["conv"], tmp_path_factory.mktemp("oom_npu"),
                       sim_target("SM8550"), make_conv_feeds(2), QuantSettings())
    return report.prepare.ctx_model


@needs_sim
def test_a_worker_killed_by_sigkill_is_one_line_naming_the_sample(
        conv_ctx: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KILL, "2")            # the worker dies on its 2nd sample
    monkeypatch.setenv("QNN_CI_MEMORY", "3G")
    feeds = make_conv_feeds(3, seed=7)
    with pytest.raises(WorkerKilled) as info, \
            SimPool(conv_ctx, sim_target("SM8550"), feeds, tmp_path / "sim_run.log", 2,
                    share_here=False) as pool:
        pool.run()
    text = str(info.value)
    assert "\n" not in text
    assert re.fullmatch(
        r"the HTP simulator's worker process qnn-ci-sim-0 \(pid \d+\) was killed "
        r"\(SIGKILL: out of memory\?\) while running sample 2 of 3; 3\.0 GiB were "
        r"available when the workers started; give the run more memory or fewer "
        r"simulator processes \(QNN_CI_SIM_PROCESSES=1\)", text), text
    assert pool.procs[0].exitcode == -9
    assert not list(tmp_path.glob(".sim_samples.*"))      # cleaned up all the same


@needs_sim
def test_sim_numerics_reports_the_kill_as_its_error(conv_ctx: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage's result for that exception: ERROR, the stage named in the one
    line the run shows, not cached."""
    from qnn_ci.stages.sim_numerics import SimNumericsStage

    monkeypatch.setenv(ENV_KILL, "1")
    with pytest.raises(WorkerKilled) as info, \
            SimPool(conv_ctx, sim_target("SM8550"), make_conv_feeds(2, seed=8),
                    tmp_path / "sim_run.log", 2, share_here=False) as pool:
        pool.run()
    result = SimNumericsStage()._killed(info.value)
    assert result.status == Status.ERROR and result.data[NO_CACHE]
    assert result.summary.startswith("stage sim_numerics: the HTP simulator's worker process")
    assert "while running sample 1 of 2" in result.summary
    assert [f.check for f in result.findings] == ["sim.worker_killed"]


def test_the_message_for_other_signals_and_before_any_sample() -> None:
    text = killed_message("qnn-ci-sim-1", 42, -15, None, 8, None)
    assert text.startswith("the HTP simulator's worker process qnn-ci-sim-1 (pid 42) was "
                           "killed (SIGTERM) before it ran a sample; give")
    assert "were available" not in text
