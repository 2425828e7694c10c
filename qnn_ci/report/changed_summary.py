"""The job summary's first section on a changed-only run (``--changed-since``):
which exports were selected and why, which were not run."""

from __future__ import annotations

from typing import Any


def changed_heading(opened: list[Any]) -> str:
    """The job summary's first section on a changed-only run: what was selected and
    why, what was not."""
    sels = [o for o in opened if o.selection is not None]
    if not sels:
        return ""
    out = ["## changed exports", ""]
    for o in sels:
        sel = o.selection
        out.append(f"Since `{sel.ref}` (`{sel.commit[:12]}`): {len(o.selected)} selected, "
                   f"{len(o.deselected)} not run.")
        out.append("")
        out += [f"- **{name}**: {'; '.join(why)}" for name, why in sel.selected.items()
                if name in o.selected]
        if o.deselected:
            out.append("")
            out.append("<details><summary>not run (unchanged)</summary>")
            out.append("")
            out += [f"- {name}: {why}" for name, why in o.deselected.items()]
            out.append("")
            out.append("</details>")
        out.append("")
    return "\n".join(out) + "\n"
