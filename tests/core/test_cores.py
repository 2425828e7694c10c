"""Cores and threads under pytest-xdist: the simulator's processes and every
onnxruntime session take this process's share of the machine."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from qnn_ci.util.cores import limit_threads, session_threads, share_of_cores, usable_cores


def test_share_and_session_threads_follow_the_xdist_workers() -> None:
    cores = usable_cores()
    assert share_of_cores({}) == cores
    assert share_of_cores({"PYTEST_XDIST_WORKER_COUNT": "2"}) == max(1, cores // 2)
    assert share_of_cores({"PYTEST_XDIST_WORKER_COUNT": str(cores * 8)}) == 1
    assert share_of_cores({"PYTEST_XDIST_WORKER_COUNT": "junk"}) == cores
    assert session_threads({}) is None                       # not under xdist: ort's default
    assert session_threads({"PYTEST_XDIST_WORKER_COUNT": "1"}) is None
    assert session_threads({"PYTEST_XDIST_WORKER_COUNT": "2"}) == max(1, cores // 2)
    assert session_threads({"QNN_CI_THREADS": "3"}) == 3     # asked for, xdist or not
    assert session_threads({"QNN_CI_THREADS": "3", "PYTEST_XDIST_WORKER_COUNT": "2"}) == 3
    assert session_threads({"QNN_CI_THREADS": "0"}) is None  # not a count


def test_limit_threads_sets_a_real_session_options() -> None:
    so = limit_threads(ort.SessionOptions(), {"QNN_CI_THREADS": "1"})
    assert so.intra_op_num_threads == 1
    default = ort.SessionOptions().intra_op_num_threads
    assert limit_threads(ort.SessionOptions(), {}).intra_op_num_threads == default
    quiet = limit_threads(ort.SessionOptions(), {}, spin=False)
    assert quiet.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_products_sessions_take_their_share(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from qnn_ci.model.modelio import open_session
    from qnn_ci.sim.sessions import cpu_session
    from tests.core.graphs import scale_model

    model = tmp_path / "m.onnx"
    scale_model(model, dims=[1, 4])
    monkeypatch.delenv("QNN_CI_THREADS", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(usable_cores() * 2))
    for sess in (open_session(model), cpu_session(model)):
        assert sess.get_session_options().intra_op_num_threads == 1
    monkeypatch.setenv("QNN_CI_THREADS", "2")
    assert open_session(model).get_session_options().intra_op_num_threads == 2
