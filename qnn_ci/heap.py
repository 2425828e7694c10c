"""Python's cyclic garbage collector around qnn-ci's bulk work.

A pytest run over many cached exports makes tens of thousands of long-lived objects
(nodes, reports, results) and little garbage, and CPython's collector walks all of
them again and again: a full collection while the items are reported, and at
interpreter exit the modules are torn down cycle by cycle (for 1,200 items that
shutdown costs more than reporting them). Two measures, in a pytest session only
when it collected qnn-ci items (the ``qnn-ci`` command takes the second one always:
the process is its own):

- ``Frozen``: while known items are reported (``qnn_ci.known_result.run_loop``),
  what existed before is frozen (``gc.freeze``), so a collection walks only what the
  reports make. It is thawed before any item runs pytest's own protocol: test code
  always sees every object collectable.
- ``freeze_after_session``: at the end of a pytest session with qnn-ci items (its
  ``pytest_unconfigure``, after every conftest's), the garbage is collected once --
  its finalizers run, and pytest reports what they raise, as it does with its own
  collection -- and what is alive is frozen. pytest's two full collections right
  after it (``unraisableexception``'s unconfigure and clean-up) and the one at exit
  then walk only what was made since: one walk of the whole heap instead of three
  (~30 ms each for 1,200 items). Not for a session run inside another one's test
  (an inline ``pytester`` run; the plugin checks) and not while other code holds
  objects frozen; a later session in the same process (``pytest.main`` again)
  thaws it first (``thaw_session``). What is alive then and dropped later in
  pytest's own clean-up is not walked again: finalizers of objects in a reference
  cycle dropped by a ``config.add_cleanup`` callback do not run.
- ``freeze_at_exit``: at interpreter exit (an ``atexit`` handler, so never for a
  pytest run inside a longer-lived process such as ``pytester``'s inline runs), the
  garbage there is collected once -- its finalizers run, nothing buffered is lost --
  and what is still alive is frozen: CPython's shutdown then frees modules without
  walking them, and the operating system reclaims the rest, as CPython allows
  (``__del__`` is not guaranteed for objects alive at exit).

``qnn_fast_exit = false`` in the pytest ini turns the last two off.
"""

from __future__ import annotations

import atexit
import gc

_registered = False
_session_frozen = False     # freeze_after_session froze the heap


class Frozen:
    """``freeze()`` what exists now, ``thaw()`` it back; both cheap (list splices).
    Freezing is a no-op while the collector is off or other code (a test) holds
    objects frozen: those are never thawed here."""

    def __init__(self) -> None:
        self.frozen = False

    def freeze(self) -> None:
        if not self.frozen and gc.isenabled() and gc.get_freeze_count() == 0:
            gc.freeze()
            self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            gc.unfreeze()
            self.frozen = False


def freeze_after_session() -> bool:
    """Collect the garbage, then freeze what is alive (and at exit, ``freeze_at_exit``);
    False (nothing done) while the collector is off or objects are frozen. The caller
    rules out a session inside another one's test."""
    global _session_frozen
    if not gc.isenabled() or gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    _session_frozen = True
    freeze_at_exit()
    return True


def thaw_session() -> None:
    """A new session in this process: what the last one froze is collectable again."""
    global _session_frozen
    if _session_frozen:
        _session_frozen = False
        gc.unfreeze()


def freeze_at_exit() -> None:
    """Once per process: at exit, collect the garbage, then freeze what is alive."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_collect_then_freeze)


def _collect_then_freeze() -> None:
    gc.collect()
    gc.freeze()
