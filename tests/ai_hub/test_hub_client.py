"""The AI Hub client wrapper (qnn_ci.hub.client): the errors the real client and the
transport under it raise, each as one check and one line; the token masked."""

from __future__ import annotations

from pathlib import Path

import pytest

qai_hub = pytest.importorskip("qai_hub", reason="qai-hub is not installed (pip install qai-hub)")

import requests  # noqa: E402
from qai_hub.client import InternalError, RateLimitedError  # noqa: E402

from qnn_ci.hub.client import HubClient, HubError, classify, hub_problem  # noqa: E402
from qnn_ci.transport.config import BoardConfig  # noqa: E402

BOARD = BoardConfig("hub-rb3", "ai-hub", device="RB3 Gen 2 (Proxy)", token_env="T",
                    api_url="http://127.0.0.1:9/")


@pytest.mark.parametrize(("exc", "check", "transient"), [
    (RateLimitedError("Request was throttled. Expected available in 60 seconds."),
     "hub.quota", True),
    (qai_hub.UserError("Failed to authenticate with Qualcomm AI Hub."), "hub.auth", False),
    (requests.exceptions.ConnectionError("Connection refused"), "hub.unreachable", True),
    (qai_hub.UserError("Could not connect to Qualcomm AI Hub."), "hub.unreachable", True),
    (InternalError("The server had an error (500)"), "hub.error", True),
    (qai_hub.UserError("Device 'Pixel 99' is not available."), "hub.error", False),
    (TimeoutError("read timed out"), "hub.timeout", True),
])
def test_each_failure_is_one_check(exc: Exception, check: str, transient: bool) -> None:
    got, text, is_transient = classify(exc)
    assert (got, is_transient) == (check, transient)
    assert "\n" not in text and text


def test_the_token_is_masked_in_every_message() -> None:
    token = "sekrit-token-123"
    hub = HubClient(BOARD, {"T": token})

    def fails() -> None:
        raise qai_hub.UserError(f"bad request for token {token}\nsecond line")

    with pytest.raises(HubError) as info:
        hub.call("device lookup", fails)
    text = str(info.value)
    assert token not in text and "***" in text and "\n" not in text
    assert text.startswith("board hub-rb3 (AI Hub): device lookup: bad request")


def test_without_a_token_or_the_client_it_is_a_reason_not_a_crash() -> None:
    assert hub_problem(BOARD, {}) == (
        "board hub-rb3: T is not set (the AI Hub API token; in GitHub Actions: env: T: "
        "${{ secrets.T }})")
    assert hub_problem(BOARD, {"T": "  "}) is not None
    assert hub_problem(BOARD, {"T": "x"}) is None
    with pytest.raises(HubError) as info:
        HubClient(BOARD, {})
    assert info.value.check == "hub.auth"


def test_the_clients_framed_texts_become_one_plain_line() -> None:
    framed = qai_hub.UserError(
        "Failed to authenticate.\n+----------+\n| Go to http://127.0.0.1:42913/account/ |"
        "\n| a|b stays |\n+----------+")
    check, text, _ = classify(framed)
    assert check == "hub.auth"             # not a rate limit, though the port holds 429
    assert text.startswith("Failed to authenticate. Go to http://127.0.0.1:42913/account/ "
                           "a|b stays (check the token")
    boxed = qai_hub.UserError("Upgrade.\n┌────┐\n│ pip install -U qai-hub │\n└────┘")
    assert classify(boxed)[1] == "Upgrade. pip install -U qai-hub"


HOLD = """\
import sys
from pathlib import Path
from qnn_ci.hub.slots import hub_slot
from qnn_ci.transport.config import BoardConfig
board = BoardConfig("hub-rb3", "ai-hub", device="d", max_parallel=int(sys.argv[2]))
with hub_slot(board, Path(sys.argv[1])) as k:
    print(k, flush=True)
    sys.stdin.readline()
"""


def test_max_parallel_bounds_the_exports_of_every_process_on_this_machine(
        tmp_path: Path) -> None:
    """Slots are held across processes (as pytest-xdist workers hold them); a slot of a
    process that ended is free again; waiting past job_timeout_s is one line."""
    import subprocess
    import sys

    from qnn_ci.hub.slots import hub_slot

    def holder(parallel: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), str(parallel)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[2])
        assert proc.stdout is not None and proc.stdout.readline().strip() == "0"
        return proc

    two = BoardConfig("hub-rb3", "ai-hub", device="d", max_parallel=2, job_timeout_s=1.0)
    one = BoardConfig("hub-rb3", "ai-hub", device="d", max_parallel=1, job_timeout_s=1.0)
    proc = holder(2)
    try:
        with hub_slot(two, tmp_path) as k:
            assert k == 1                          # slot 0 is the other process's
        with pytest.raises(HubError) as info:
            with hub_slot(one, tmp_path):
                pass
        assert info.value.check == "hub.busy"
        assert str(info.value) == ("board hub-rb3 (AI Hub): all 1 slots (max_parallel) stayed "
                                   "taken by other runs for 1 s (job_timeout_s)")
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)
    with hub_slot(one, tmp_path) as k:
        assert k == 0
