"""What the MCP service says of its servers, without the MCP SDK: the daemon imports these
when it starts (for `/api/state` and `soulflow status`) whether or not `mcp.json` names any
server; the SDK (and what it pulls in) is imported only when one is started."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

PROBE_INTERVAL_S = 30.0  # an HTTP endpoint that stops answering is noticed by a probe
HOMES_DIR = "mcp"  # runtime/mcp/<server>/: a stdio server's HOME, and its last listing


class ServerStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"  # failed; the next attempt is scheduled
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds before the next attempt: ``initial`` doubling to ``maximum``; back to
    ``initial`` once a connection has stayed up ``stable_after`` seconds."""

    initial: float = 1.0
    maximum: float = 300.0
    stable_after: float = 60.0


DEFAULT_BACKOFF = Backoff()
