"""No AI Hub job for a fork's code: the same rule as the Action's fork guard
(``qnn_ci.gha``), applied where the jobs are submitted, so it holds for a bare
``pytest`` or ``qnn-ci run`` in any GitHub Actions workflow too. A fork's pull
request would otherwise spend the repository's AI Hub token and quota, and see its
results. ``QNN_CI_ALLOW_FORK_PRS=true`` in the environment allows it (the owner's
choice: a ``pull_request_target`` workflow comes from the base branch)."""

from __future__ import annotations

from collections.abc import Mapping


def fork_problem(environ: Mapping[str, str]) -> str | None:
    """Why AI Hub must not be used in this run (a skip reason), else None."""
    from qnn_ci.gha import ALLOW_VAR, Unverifiable, read_event, untrusted_source

    if environ.get("GITHUB_ACTIONS", "").strip().lower() != "true":
        return None
    if environ.get(ALLOW_VAR, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    env = dict(environ)
    event = env.get("GITHUB_EVENT_NAME", "") or "unknown"
    try:
        source = untrusted_source(event, read_event(env.get("GITHUB_EVENT_PATH")), env)
    except Unverifiable as exc:
        return (f"AI Hub is not used: the {event} event cannot show where the code comes "
                f"from ({exc}); set {ALLOW_VAR}=true to allow it")
    if source is None:
        return None
    return (f"AI Hub is not used for {source}: a fork's code must not spend this "
            f"repository's AI Hub token; set {ALLOW_VAR}=true to allow it")
