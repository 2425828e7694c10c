"""`pytest --qnn-update-baselines`: after the session, write the baselines from what
the stage items reported (their ``qnn.*`` properties and ``qnn.artefact.*`` paths:
the same on the xdist controller, where no stage ran, as on a worker)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import StageResult, Status
from qnn_ci.errors import UserError
from qnn_ci.nightly.baselines import STAGES, write_for_manifest

log = logging.getLogger(__name__)


def result_of(props: Mapping[str, Any]) -> StageResult:
    """A stage result read back from an item's ``qnn.*`` properties."""
    artefacts = {k[len("qnn.artefact."):]: str(v) for k, v in props.items()
                 if k.startswith("qnn.artefact.")}
    properties = {k[len("qnn."):]: v for k, v in props.items()
                  if k.startswith("qnn.") and not k.startswith("qnn.artefact.")}
    return StageResult(str(props["qnn.stage"]), Status(props["qnn.status"]),
                       str(props.get("qnn.summary", "")), properties=properties,
                       artefacts=artefacts)


def update_from_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], bool]:
    """(lines to show, ok). Each manifest's baselines file gets the entries of the
    exports its items measured; a manifest or baselines file that cannot be read is one
    line (not ok)."""
    from qnn_ci.manifest.loader import load_manifest

    by_manifest: dict[str, dict[str, dict[str, StageResult]]] = {}
    for p in rows:
        if p.get("qnn.stage") in STAGES and "qnn.manifest" in p and "qnn.export" in p:
            try:
                res = result_of(p)
            except ValueError:
                continue
            by_manifest.setdefault(str(p["qnn.manifest"]), {}).setdefault(
                str(p["qnn.export"]), {})[res.stage] = res
    lines: list[str] = []
    ok = True
    for path, results in sorted(by_manifest.items()):
        try:
            manifest = load_manifest(Path(path))
            known = manifest.by_name
            changed, empty = write_for_manifest(
                manifest, {n: r for n, r in results.items() if n in known})
        except UserError as exc:
            lines.append(f"qnn-ci: baselines not updated: {exc.oneline()}")
            ok = False
            continue
        lines += [f"{manifest.baselines}: {e} {soc} {scope}: updated"
                  for e, soc, scope in changed]
        lines += [f"qnn-ci: {e}: nothing measured; no baseline written" for e in empty]
        if not changed and len(empty) < len(results):
            lines.append(f"{manifest.baselines}: unchanged")
    if not by_manifest:
        lines.append("qnn-ci: no numeric stage ran: no baselines written")
    return lines, ok
