"""Reporting a stage item whose result is already known, without pytest's item set-up.

A cached stage's result is a lookup, yet pytest's run of an item costs far more than
the lookup: set-up, call and teardown phases, each with log and output capture and
fixture bookkeeping. For a stage item whose result the engine knows without running
anything (``Pipeline.lookup``: cached, or a skip that follows from the cache), the
plugin reports it with the same hooks a reporter sees -- ``logstart``, a
``makereport`` + ``logreport`` per phase, ``logfinish`` -- and the same reports
(outcome, location, properties, skip reason), but skips the phases' set-up.

It steps aside -- the item runs pytest's own protocol -- whenever that could change an
answer: a stage that has to run, a failed or erroring result (its traceback and
captured log belong to the normal path), skip/xfail marks on the item, a plugin or
conftest outside pytest's own that hooks into item set-up, call or teardown,
``--setup-only`` / ``--setup-plan``, and whenever pytest's set-up stack would need
tearing down (the last item; a move to another folder or file). A conftest's or
plugin's ``makereport`` still sees every phase pytest's protocol would show it: set-up,
call and teardown for a pass; set-up and teardown for a skip known without running
(``StageItem.setup`` reports it at set-up, as pytest reports a skip mark).

``run_loop`` goes one step further when only pytest's own plugins take part in an
item's protocol: it reports known items straight from the session's test loop,
without the protocol's per-item wrappers (warning capture, assertion hooks, fault
handler), which guard code that a known item never runs. Any other plugin's loop
(pytest-xdist's) or protocol hook (rerun, timeout plugins) keeps pytest's own loop.
While it reports known items, what existed before is frozen for the garbage
collector (``qnn_ci.heap.Frozen``); it is thawed before any item runs the protocol.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from qnn_ci.heap import Frozen
from qnn_ci.results import Status

if TYPE_CHECKING:
    from qnn_ci.plugin import StageItem
    from qnn_ci.results import StageResult

# Plugins whose item set-up/call/teardown hooks do nothing to a qnn-ci item: pytest's
# own, qnn-ci's, and those that act on Python test functions only.
_NEUTRAL = ("_pytest.", "qnn_ci.", "_hypothesis_pytestplugin", "xdist.", "pytest_cov")
_PHASE_HOOKS = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
_MARKS = frozenset(("skip", "skipif", "xfail"))
# The phases reported, by the phase the result shows in (a known skip: at set-up).
_PHASES = {"call": ("setup", "call", "teardown"), "setup": ("setup", "teardown")}
_NEUTRAL_FOR = pytest.StashKey[dict[str, "str | None"]]()   # item's file -> _plain's answer
_ALL_NEUTRAL, _PHASES_NEUTRAL = "all", "phases"


_TRIED = pytest.StashKey[bool]()     # report_known said no: the protocol runs the item


def run_loop(session: pytest.Session, is_stage: Callable[[pytest.Item], bool]) -> bool | None:
    """pytest's test loop, with known stage items reported directly; None (pytest's
    own loop runs) unless only pytest's own plugins take part in it."""
    config = session.config
    if session.testsfailed or config.option.collectonly or not _own_loop(config):
        return None
    items = session.items
    heap = Frozen()     # while known items are reported (qnn_ci.heap)
    try:
        for i, item in enumerate(items):
            nextitem = items[i + 1] if i + 1 < len(items) else None
            heap.freeze()
            if not (is_stage(item) and report_known(item, nextitem)):  # type: ignore[arg-type]
                heap.thaw()     # test code sees every object collectable
                item.stash[_TRIED] = True
                item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
    finally:
        heap.thaw()
    return True


def _own_loop(config: pytest.Config) -> bool:
    """Only pytest's (and qnn-ci's) loop, and only pytest's protocol hooks, are
    registered (wrappers around the loop itself are fine: they wrap this one too)."""
    hook = config.hook
    loop = [impl for impl in hook.pytest_runtestloop.get_hookimpls()
            if not (impl.hookwrapper or impl.wrapper)]
    return (all(_module(impl.plugin).startswith(("_pytest.main", "qnn_ci.plugin"))
                for impl in loop)
            and all(_module(impl.plugin).startswith(("_pytest.", "qnn_ci.plugin"))
                    for impl in hook.pytest_runtest_protocol.get_hookimpls()))


def report_known(item: StageItem, nextitem: pytest.Item | None) -> bool | None:
    """True when ``item`` was reported here; None to let pytest run it."""
    if item.stash.get(_TRIED, False):   # run_loop asked already
        return None
    hooks = _plain(item, nextitem)
    if hooks is None:
        return None
    result = item.pipeline.lookup(item.export.name, item.name)
    if result is None or result.status not in (Status.PASSED, Status.SKIPPED):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    if hooks == _ALL_NEUTRAL:
        for report in _reports(item, result):
            ihook.pytest_runtest_logreport(report=report)
    else:               # a conftest's or plugin's makereport sees every phase
        reraise = (pytest.exit.Exception, KeyboardInterrupt)

        def phase(when: str, func: Callable[[], None]) -> pytest.TestReport:
            call = pytest.CallInfo.from_call(func, when=when,  # type: ignore[arg-type]
                                             reraise=reraise)
            report: pytest.TestReport = ihook.pytest_runtest_makereport(item=item, call=call)
            ihook.pytest_runtest_logreport(report=report)
            return report

        if phase("setup", item.setup).passed:   # a known skip shows at set-up
            phase("call", item.runtest)
        phase("teardown", _nothing)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _reports(item: StageItem, result: StageResult) -> Iterator[pytest.TestReport]:
    """The reports pytest's own protocol and ``makereport`` build for this item and
    result -- setup, call and teardown for a pass; setup (skipped) and teardown for a
    skip (``StageItem.setup``) -- without raising and catching a skip to get there."""
    nodeid = getattr(item, "id", item.nodeid)   # pytest >= 9: the parsed node id
    keywords = dict.fromkeys(item.keywords, 1)
    shown = "setup" if result.status == Status.SKIPPED else "call"
    for when in _PHASES[shown]:
        start, began = time.time(), time.perf_counter()
        outcome, longrepr = item.known_outcome(result) if when == shown else ("passed", None)
        sections = [(f"Captured {key} {rwhen}", content)
                    for rwhen, key, content in item._report_sections]
        yield pytest.TestReport(nodeid, item.location, dict(keywords), outcome, longrepr,
                                when, sections, time.perf_counter() - began, start,
                                time.time(), user_properties=item.user_properties)


def _nothing() -> None:
    return None


def _plain(item: pytest.Item, nextitem: pytest.Item | None) -> str | None:
    """None when the item must run pytest's own protocol; else which hooks are
    neutral: _ALL_NEUTRAL or _PHASES_NEUTRAL (``makereport`` is not)."""
    if nextitem is None:    # the last item tears down the session (its fixtures too)
        return None
    option = item.config.option
    if getattr(option, "setuponly", False) or getattr(option, "setupplan", False):
        return None         # --setup-only / --setup-plan: nothing is to run
    stack = getattr(getattr(item.session, "_setupstate", None), "stack", None)
    if stack is None:       # a pytest whose set-up state we do not know
        return None
    if stack:
        needed = set(nextitem.listchain())
        if any(node not in needed for node in stack):
            return None
    if not _MARKS.isdisjoint([mark.name for mark in item.iter_markers()]):  # one walk
        return None
    return _neutral_hooks(item)


def _neutral_hooks(item: pytest.Item) -> str | None:
    seen = item.config.stash.setdefault(_NEUTRAL_FOR, {})
    key = str(item.path)    # which conftests apply follows from the file
    if key not in seen:
        ihook = item.ihook

        def neutral(names: tuple[str, ...]) -> bool:
            return all(_neutral(impl.plugin) for name in names
                       for impl in getattr(ihook, name).get_hookimpls())

        seen[key] = (None if not neutral(_PHASE_HOOKS) else
                     _ALL_NEUTRAL if neutral(("pytest_runtest_makereport",)) else
                     _PHASES_NEUTRAL)
    return seen[key]


def _module(plugin: Any) -> str:
    """The module a plugin (a module or an object) comes from, with a trailing dot."""
    name = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__module__
    return str(name) + "."


def _neutral(plugin: Any) -> bool:
    return _module(plugin).startswith(_NEUTRAL)
