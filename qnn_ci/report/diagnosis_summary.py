"""The diagnosis of a failed numeric stage in the human reports: one headline for
the terminal table, and a Markdown block for the job summary (attribution, first
divergence, worst jumps, recipes best first, the YAML to paste, links to the
per-layer CSV / JSON / PNG).

Read from ``StageResult.data["diagnosis"]`` (``Diagnosis.to_dict()``, the
``qnn-ci run`` path) or, when only the JUnit-style properties travelled (the
pytest plugin's report rows), from the ``diagnosis.*`` properties.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from qnn_ci.engine.results import StageResult

SHOWN = 5


def _data(r: StageResult) -> dict[str, Any] | None:
    d = r.data.get("diagnosis")
    return d if isinstance(d, dict) else None


def headline(r: StageResult) -> str | None:
    """The one-line diagnosis of a result, if it has one."""
    text = r.data.get("diagnosis_text")
    if isinstance(text, str) and text:
        return text.splitlines()[0]
    value = r.properties.get("diagnosis.headline")
    return str(value) if value else None


def _list(v: Any) -> list[dict[str, Any]]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _one(v: Any) -> str:
    """One line whatever a name holds."""
    return " ".join(str(v).split())


def _fenced(text: str, lang: str = "") -> list[str]:
    """A fenced code block whose fence no line of ``text`` can close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return [fence + lang, text, fence]


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "-" if v is None else str(v)


def _link(path: str, root: Path | None) -> str:
    name = Path(path).name
    target = path
    if root is not None:
        try:
            target = os.path.relpath(path, root)
        except ValueError:
            target = path
        if target.startswith(".."):
            target = path
    return f"[{name}]({target.replace(' ', '%20')})"


def _recipe_lines(d: dict[str, Any]) -> list[str]:
    from qnn_ci.diagnose.model import Recipe, recipe_line

    names = {f.name for f in fields(Recipe)}
    out = []
    recipes = _list(d.get("recipes"))
    for i, raw in enumerate(recipes[:SHOWN], 1):
        try:
            line = recipe_line(Recipe(**{k: v for k, v in raw.items() if k in names}))
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
            line = str(raw.get("name", "?"))
        out.append(f"  {i}. `{_one(line)}`")
    if len(recipes) > SHOWN:
        out.append(f"  +{len(recipes) - SHOWN} more (see diagnosis.json)")
    return out


def markdown_block(r: StageResult, *, root: Path | None = None) -> list[str]:
    """The job-summary lines of ``r``'s diagnosis (empty when it has none)."""
    d = _data(r)
    props = r.properties
    if d is None and "diagnosis.attribution" not in props:
        return []
    out = [f"**Diagnosis of `{r.stage}`**", ""]
    if d is not None:
        attr, detail = d.get("attribution"), d.get("detail") or ""
        out.append(f"- **attribution**: {_one(attr)}" + (f" — {_one(detail)}" if detail else ""))
        fd = d.get("first_divergence")
        if isinstance(fd, dict):
            chan = (f", worst channel {fd.get('worst_channel')} cosine "
                    f"{_num(fd.get('worst_channel_cosine'))}"
                    if fd.get("worst_channel") is not None else "")
            out.append(f"- **first divergence**: `{_one(fd.get('tensor'))}` "
                       f"({_one(fd.get('op_type'))} `{_one(fd.get('node'))}`): "
                       f"{_one(fd.get('metric'))} {_num(fd.get('value'))} vs "
                       f"bound {_num(fd.get('bound'))}{chan}")
        jumps = _list(d.get("worst_jumps"))
        if jumps:
            out.append("- **worst jumps**: " + ", ".join(
                f"`{_one(j.get('tensor'))}` ({_one(j.get('op_type'))}) −{_num(j.get('jump'))}"
                for j in jumps[:SHOWN]))
        recipes = _recipe_lines(d)
        if recipes:
            out += ["- **recipes** (best first):", *recipes]
        best = next((x for x in _list(d.get("recipes")) if x.get("passes") is True), None)
        raw = d.get("advice")
        advice = [_one(x) for x in raw if isinstance(x, str)] if isinstance(raw, list) else []
        if best is None and advice:
            out += [f"- **no fix**: {advice[0]}", *[f"  - {x}" for x in advice[1:]]]
        if best and best.get("yaml"):
            out += ["- **fix** — paste into the export in `qnn-ci.yaml`:", "",
                    *_fenced(str(best["yaml"]).rstrip("\n"), "yaml")]
            flags = best.get("flags")
            if isinstance(flags, list) and flags:
                out.append(f"  converter flags: `{_one(' '.join(map(str, flags)))}`")
        artefacts = _dict(d.get("artefacts"))
        cost = _dict(d.get("cost"))
        if cost:
            out.append("- **cost**: " + ", ".join(f"{_one(k)} {_num(v)}"
                                                  for k, v in cost.items()))
    else:
        out.append(f"- {_one(props.get('diagnosis.headline') or props['diagnosis.attribution'])}")
        if props.get("diagnosis.worst_jumps"):
            out.append(f"- **worst jumps**: {_one(props['diagnosis.worst_jumps'])}")
        recipes = [_one(v) for k, v in sorted(props.items(), key=str)
                   if str(k).startswith("diagnosis.recipe.")]
        if recipes:
            out += ["- **recipes** (best first):",
                    *[f"  {i}. `{v}`" for i, v in enumerate(recipes, 1)]]
        if props.get("diagnosis.fix"):
            out += ["", *_fenced(str(props["diagnosis.fix"]))]
        artefacts = {str(k).removeprefix("diagnosis.artefact."): v for k, v in props.items()
                     if str(k).startswith("diagnosis.artefact.")}
    if artefacts:
        out.append("- **per-layer report**: " + " · ".join(
            _link(_one(v), root) for _, v in sorted(artefacts.items(), key=str)))
    return [*out, ""]
