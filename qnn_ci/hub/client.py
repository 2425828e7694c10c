"""One ``qai_hub.Client`` per AI Hub board, configured in code (never through
``~/.qai_hub`` or an environment variable qnn-ci would set in the user's process),
and every failure of the service turned into one line naming the board.

The API token comes from the environment variable the board entry names
(``token_env``, default ``QAI_HUB_API_TOKEN``); it is never written to a file, never
logged, and every text that leaves this module passes ``HubClient.mask``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from qnn_ci.errors import ToolError

if TYPE_CHECKING:
    from qnn_ci.transport.config import BoardConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

# The frame the client draws around long texts: line-drawing characters, or a lone
# "|" / "+" and runs of "-", "=", "+" standing between spaces.
_BOX = re.compile(r"[\u2500-\u257f]+|(?:^|(?<=\s))(?:[|+]|[-=+]{3,})(?=\s|$)", re.MULTILINE)
INSTALL_HINT = "pip install 'qnn-ci[ai-hub]'"
MASK = "***"


class HubError(ToolError):
    """An AI Hub call that failed: ``check`` says what kind (auth, quota, unreachable,
    job failed, timeout, device, error); the text is one line, token masked."""

    def __init__(self, check: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.check = check
        self.transient = transient     # the service's state, not the export's: not cached


def client_installed() -> bool:
    return importlib.util.find_spec("qai_hub") is not None


def token_of(board: BoardConfig, environ: Mapping[str, str]) -> str | None:
    value = environ.get(board.token_env, "").strip()
    return value or None


def hub_problem(board: BoardConfig, environ: Mapping[str, str]) -> str | None:
    """Why AI Hub cannot be used for ``board`` here (a skip reason), else None."""
    if not client_installed():
        return (f"board {board.name} is an AI Hub board and the qai-hub client is not "
                f"installed ({INSTALL_HINT})")
    if token_of(board, environ) is None:
        return (f"board {board.name}: {board.token_env} is not set (the AI Hub API token; "
                f"in GitHub Actions: env: {board.token_env}: "
                f"${{{{ secrets.{board.token_env} }}}})")
    return None


class HubClient:
    """The client for one board, and the translation of its errors."""

    def __init__(self, board: BoardConfig, environ: Mapping[str, str]) -> None:
        import qai_hub
        from qai_hub.public_rest_api import DEFAULT_HUB_API_URL, DEFAULT_HUB_WEB_URL

        token = token_of(board, environ)
        if token is None:
            raise HubError("hub.auth", hub_problem(board, environ) or "no token")
        self.board = board
        self._token = token
        api_url = board.api_url or DEFAULT_HUB_API_URL
        if not api_url.endswith("/"):
            api_url += "/"          # the client joins "api/v1/..." onto it
        web_url = board.api_url.rstrip("/") if board.api_url else DEFAULT_HUB_WEB_URL
        config = qai_hub.ClientConfig(api_token=token, api_url=api_url, web_url=web_url,
                                      verbose=False, default_project=board.project)
        self.api_url = api_url
        self.client = qai_hub.Client(config=config)

    def mask(self, text: str) -> str:
        return text.replace(self._token, MASK) if self._token else text

    def where(self) -> str:
        return f"board {self.board.name} (AI Hub)"

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; any failure of the service as a ``HubError`` naming ``what``.

        The client prints some notes to stdout whatever its ``verbose`` says
        ("Downloaded model to ..."); stdout belongs to the shell (``qnn-ci run --json``
        is one JSON document), so they go to the debug log instead."""
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                return fn()
        except HubError:
            raise
        except Exception as exc:       # the client raises many kinds: each is one line
            raise self.error(what, exc) from None
        finally:
            for line in printed.getvalue().splitlines():
                if line.strip():
                    log.debug("%s: qai-hub: %s", self.where(), self.mask(line))

    def error(self, what: str, exc: BaseException) -> HubError:
        check, text, transient = classify(exc)
        return HubError(check, self.mask(f"{self.where()}: {what}: {text}"),
                        transient=transient)


def classify(exc: BaseException) -> tuple[str, str, bool]:
    """(check, one line, transient) for an exception out of the qai-hub client."""
    name = type(exc).__name__
    # one line: the client frames long texts in a box of line-drawing characters
    text = " ".join(_BOX.sub(" ", str(exc)).split()) or name
    low = text.lower()
    # (by type and words only: a number such as 429 may be part of an address's port)
    if name == "RateLimitedError" or "throttled" in low or "rate limit" in low:
        return ("hub.quota", f"{text} (AI Hub's rate limit or quota; wait, or lower the "
                "number of exports run at once)", True)
    if "failed to authenticate" in low or "invalid token" in low or \
            "api token" in low or "credentials" in low:
        return ("hub.auth", f"{text} (check the token in the board's token_env variable)",
                False)
    if name in ("ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout",
                "ChunkedEncodingError", "ProtocolError", "RemoteDisconnected") or \
            "could not connect" in low or "communication error" in low or \
            ("connection" in low and ("refused" in low or "aborted" in low or "reset" in low)):
        return ("hub.unreachable", text, True)
    if isinstance(exc, TimeoutError):
        return ("hub.timeout", text, True)
    if name == "InternalError":
        return ("hub.error", text, True)
    return ("hub.error", text, False)

