"""The stages of this installation, in pipeline order: which modules make them and
how a run of only some stages finds what those need.

The engine (``qnn_ci.engine.pipeline``) is handed the stages it runs; it never
imports a stage module itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from qnn_ci.engine.spec import ExportSpec
from qnn_ci.engine.stage import STAGE_ORDER, Environment, Stage


def load_stages(names: tuple[str, ...] = STAGE_ORDER) -> dict[str, Stage]:
    """The stages that exist in this installation, in pipeline order. A stage whose
    module is not there yet makes no items."""
    stages: dict[str, Stage] = {}
    for name in names:
        module_name = f"qnn_ci.stages.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Stage) and obj is not Stage \
                    and getattr(obj, "name", None) == name:
                stages[name] = obj()
                break
    return stages


def load_stages_for(selected: set[str], exports: Iterable[ExportSpec] | None = None,
                    env: Environment | None = None) -> dict[str, Stage]:
    """The stages a run of only ``selected`` needs: those, and what they need (of their
    own export and of peers), transitively; in pipeline order. Other stage modules
    are not imported. A stage's needs may differ by export (``Stage.needs_for``):
    those of ``exports`` are followed (on the boards of ``env``, when given), else
    every need it may have."""
    exports = list(exports) if exports is not None else None
    want = set(selected) & set(STAGE_ORDER)
    loaded: dict[str, Stage] = {}
    tried: set[str] = set()
    while todo := tuple(n for n in STAGE_ORDER if n in want and n not in tried):
        tried.update(todo)
        for name, stage in load_stages(todo).items():
            loaded[name] = stage
            needs = stage.possible_needs() if exports is None else tuple(
                n for e in exports for n in stage.needs_for(e, env))
            want.update(n for n in (*needs, *stage.peer_needs, *stage.gates, *stage.reads)
                        if n in STAGE_ORDER)
    return {n: loaded[n] for n in STAGE_ORDER if n in loaded}
