"""What the stages that make a context binary share (on a board, on the host, on AI
Hub): the binary's facts as properties and in words, and its content hash."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qnn_ci.engine.stage import StageContext


def info_properties(info: Any) -> dict[str, Any]:
    return {"context.soc": info.soc or "", "context.htp_arch": info.htp_arch or "",
            "context.vtcm_bytes": info.vtcm_bytes or "",
            "context.qnn_version": info.qnn_version or "",
            "context.bytes": info.size_bytes or "",
            "context.graphs": ", ".join(g.name for g in info.graphs)}


def record_binary(workdir: Path, binary: Path, info: Any, *, artefacts: dict[str, str],
                  properties: dict[str, Any], data: dict[str, Any]) -> None:
    """Add a built binary to a result's parts: its path, hash and size, and what it
    says it is (``info``, a ``ContextInfo``; None when unreadable), also kept as
    ``<workdir>/context_info.json``."""
    artefacts["binary"] = str(binary)
    data |= {"binary": str(binary), "binary_sha256": sha256_of(binary),
             "binary_bytes": binary.stat().st_size}
    if info is None:
        return
    report = workdir / "context_info.json"
    report.write_text(json.dumps(info.to_dict(), indent=2, default=str), encoding="utf-8")
    artefacts["context_info"] = str(report)
    properties |= info_properties(info)
    data["context_info"] = info.to_dict()


def describe_info(info: dict[str, Any] | None) -> str:
    if not info:
        return "its metadata could not be read"
    arch = f"v{info['htp_arch']}" if info.get("htp_arch") else "arch unknown"
    vtcm = f"{info['vtcm_bytes'] / (1 << 20):g} MiB VTCM" if info.get("vtcm_bytes") \
        else "VTCM unknown"
    size = info.get("size_bytes")
    return (f"{info.get('soc') or 'SoC unknown'}, HTP {arch}, {vtcm}"
            + (f", {size / (1 << 20):.2f} MiB" if size else ""))


def sha256_of(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def utility_stamp(ctx: StageContext) -> str | None:
    """The host SDK's qnn-context-binary-utility (path, size, mtime), or None."""
    from qnn_ci.sdk.context_info import context_utility
    from qnn_ci.sdk.locate import sdk_root_for

    tool = context_utility(sdk_root_for(ctx.export, ctx.env))
    if tool is None:
        return None
    st = tool.stat()
    return f"{tool}:{st.st_size}:{st.st_mtime_ns}"
