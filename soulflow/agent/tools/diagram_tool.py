"""The ``diagram_render`` tool: Mermaid source to ASCII art (for the chat) and an SVG file.

Rendering runs in a short-lived Node.js process (`soulflow.agent.diagram.render`), with its
own timeout and memory cap. The SVG is saved in the run's own chat folder, as
``chats/<zone>/diagrams/<sha12>.svg`` - what one chat draws is that chat's, like its other
files, and ``runtime/`` is the daemon's - named by a hash of the source: rendering the same
diagram again rewrites the same file with the same bytes, which is what makes the tool
idempotent (safe to re-run after a crash) and keeps repeated renders from filling the disk.
The file is written through `Beneath`, so a link planted at ``diagrams`` is refused, never
followed.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import PurePosixPath
from typing import Any

from soulflow.agent.diagram.render import DiagramError, render_mermaid
from soulflow.agent.tools.base import Params, Tool, ToolContext, ToolError
from soulflow.agent.tools.workspace import beneath_for, own_zone
from soulflow.security.quota import QuotaExceeded, ZoneQuotas
from soulflow.security.zones import ChatZone
from soulflow.storage.beneath import Beneath

__all__ = ["DIAGRAM_DIR", "DiagramRenderTool"]

DIAGRAM_DIR = "diagrams"
"""Where in the run's chat folder (``chats/<zone>/``) the SVGs are saved."""
RENDER_TIMEOUT_S = 20.0
_FORMATS = {"svg": ("svg",), "ascii": ("ascii",), "both": ("svg", "ascii")}


def diagram_name(source: str) -> str:
    """The file name of a source's SVG: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12] + ".svg"


class DiagramRenderTool(Tool):
    name = "diagram_render"
    description = (
        "Render a Mermaid diagram (flowchart, sequence, state, class or ER diagram). "
        "Returns ASCII art you can show in the chat inside a code block, and saves an SVG "
        f"in this chat's folder, under chats/<this chat>/{DIAGRAM_DIR}/ (its path is in the "
        "result). format: svg, ascii or both (default both)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "source": {"type": "string", "minLength": 1,
                       "description": "Mermaid source, e.g. 'graph TD\\n  A --> B'."},
            "format": {"type": "string", "enum": list(_FORMATS), "default": "both"},
        },
        "required": ["source"],
        "additionalProperties": False,
    }
    idempotent = True
    timeout_s = RENDER_TIMEOUT_S + 10  # the renderer's own timeout fires first, with a reason

    def __init__(self, quotas: ZoneQuotas | None = None) -> None:
        self.quotas = quotas

    async def run(self, params: Params, ctx: ToolContext) -> str:
        source = params["source"]
        formats = _FORMATS[params.get("format", "both")]
        try:
            result = await render_mermaid(source, formats=formats, timeout_s=RENDER_TIMEOUT_S)
        except DiagramError as exc:
            raise ToolError(str(exc)) from None
        parts: list[str] = []
        if result.ascii is not None:
            parts.append(f"```\n{result.ascii.rstrip()}\n```")
        if result.svg is not None:
            rel = own_zone(ctx).rel / DIAGRAM_DIR / diagram_name(source)
            data = result.svg.encode("utf-8")
            try:
                await asyncio.to_thread(self._save, beneath_for(ctx), own_zone(ctx), rel, data)
            except QuotaExceeded as exc:
                raise ToolError(f"the diagram rendered but its SVG was not saved: {exc}") \
                    from None
            except OSError as exc:
                raise ToolError(f"the diagram rendered but its SVG could not be saved: "
                                f"{exc.strerror or exc}") from None
            parts.append(f"SVG saved at {rel.as_posix()} ({len(data)} bytes)")
        return "\n\n".join(parts)

    def _save(self, beneath: Beneath, zone: ChatZone, rel: PurePosixPath, data: bytes) -> None:
        """Write the SVG into the chat's folder, within its disk quota (an SVG already there
        under its content's name is the same file: nothing is added)."""
        if self.quotas is not None and not beneath.is_file(rel):
            new_dirs = 0 if beneath.is_dir(rel.parent) else 1
            self.quotas.check_write(beneath.root, zone, len(data), 1 + new_dirs)
        beneath.write_atomic(rel, data)
