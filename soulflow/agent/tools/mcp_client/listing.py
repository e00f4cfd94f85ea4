"""Each server's last tools listing, kept in ``runtime/mcp/<server>.tools.json``.

At boot the daemon registers a server's tools from it before the server is up, so a run that
resumes - or an approval given for an MCP call before the restart - finds its tool; the call
then waits for the server. The listing is replaced each time the server answers one. It is
the daemon's file, beside the server's HOME (``runtime/mcp/<server>/``), never in it: the
server can write its HOME. An unreadable or damaged file is only a missed head start.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mcp_types import Tool as RemoteTool
from pydantic import ValidationError

from soulflow.storage.atomic import read_json, write_json_atomic

log = logging.getLogger(__name__)


def save_listing(path: Path, tools: list[RemoteTool]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(path, [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                             for t in tools], indent=None, mode=0o600)


def load_listing(path: Path) -> list[RemoteTool]:
    try:
        raw = read_json(path, [])
    except OSError as exc:
        log.warning("MCP: %s cannot be read (%s)", path, exc)
        return []
    if not isinstance(raw, list):
        return []
    tools: list[RemoteTool] = []
    for item in raw:
        try:
            tools.append(RemoteTool.model_validate(item))
        except ValidationError:
            continue
    return tools
