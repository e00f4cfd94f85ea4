"""What a running daemon reports about itself: `/api/state`, its problems, its queue depths.

Apart from the lifecycle in `daemon.py` because it is a read-only view over every service, and
because on the redis backend much of it lives in Redis: a section that cannot be read while Redis
is away gives a default instead of failing the page, and the backend's own status says why.
Those sections are read in one call of the backend's `offload` (on Redis, its store thread), or
on the asynchronous client ahead of time (usage), so a Redis that answers slowly makes the page
slow, never the event loop, and the chats and other pages it serves.
`DaemonStatus` is given the services it reads; the runtime adds what only it knows (ready,
since when).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from soulflow import __version__
from soulflow.agent.tools import CodeSandbox
from soulflow.agent.tools.mcp_client.service import McpService
from soulflow.agent.usage import UsageMeter, usage_report
from soulflow.backends.base import Backend, SessionStore
from soulflow.bus.bus import MessageBus
from soulflow.channels.health import HealthBoard
from soulflow.channels.registry import ChannelRegistry
from soulflow.conversation.turns import Conversation
from soulflow.cron import CronService
from soulflow.events.hub import EventHub
from soulflow.ops.service import loop_and_channel_problems
from soulflow.ops.wiring import BackgroundServices
from soulflow.providers.local_runtime import LocalModelRuntime
from soulflow.providers.registry import ProviderRegistry
from soulflow.security.vault import SecretVault
from soulflow.supervisor import Supervisor
from soulflow.tasks.wiring import TaskServices

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Stored:
    """The sections of `/api/state` kept in the stores, as one offloaded call read them."""

    sessions: list[dict[str, Any]]
    cron_jobs: int | None
    unfinished_tasks: int | None
    usage_names: dict[str, str] | None


def queue_depths(bus: MessageBus, conversation: Conversation) -> dict[str, int]:
    """Work waiting in the bus and the conversation (the dashboard's and the ops reading's)."""
    stats = bus.stats  # refreshed by the "bus:stats" loop (the store may be Redis)
    return {"inbound_pending": stats.inbound_pending,
            "inbound_queued": conversation.queued,
            "active_chats": conversation.active_chats,
            "outbox_pending": stats.outbox_pending,
            "outbound_queued": bus.dispatcher.queued, "dlq": stats.dlq}


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """The services `/api/state` reads."""

    workspace: Path
    backend: Backend
    supervisor: Supervisor
    health: HealthBoard
    vault: SecretVault
    bus: MessageBus
    conversation: Conversation
    channels: ChannelRegistry
    sessions: SessionStore
    hub: EventHub
    providers: ProviderRegistry
    local_model: LocalModelRuntime | None
    cron: CronService
    tasks: TaskServices
    sandbox: CodeSandbox
    background: BackgroundServices
    mcp: McpService
    usage: UsageMeter

    def problems(self, backend: dict[str, Any] | None = None) -> list[str]:
        """What is wrong right now: Redis away, a supervised loop down, a channel failing, a
        vault key that is not the cluster's, an unreadable task store, an unusable mcp.json or
        an MCP server that is down. The daemon is `ok` only when ready with none of them (the
        ops reading in `state()["ops"]` adds providers and how long problems last).
        `backend`: its status, when the caller read it already."""
        backend = self.backend.status() if backend is None else backend
        found = loop_and_channel_problems(self.supervisor.status(), self.health)
        vault = [self.vault.key_problem] if self.vault.key_problem else []  # another key
        return [*backend_problems(backend), *found.values(), *vault, *self.mcp.problems(),
                *shared(backend, lambda: list(self.tasks.store.problems), [])]

    def queue_depths(self) -> dict[str, int]:
        return queue_depths(self.bus, self.conversation)

    async def state(self, *, ready: bool, started_at: float) -> dict[str, Any]:
        """The dashboard's view of the daemon; its only free text (recent messages) comes
        redacted from the event hub."""
        bus, conversation = self.bus, self.conversation
        backend = self.backend.status()  # once: every Redis-backed section below asks it
        stored = await self._stored(backend)
        found = self.problems(backend)
        return {
            "ok": ready and not found,
            "problems": found,
            "version": __version__,
            "pid": os.getpid(),
            "workspace": str(self.workspace),
            "uptime_s": round(time.time() - started_at, 1) if started_at else 0.0,
            "provider": self.providers.default_name,
            "local_model": (self.local_model.status() if self.local_model is not None
                            else None),
            "backend": backend,
            "queues": {**self.queue_depths(), "inbound_dlq": bus.stats.inbound_dlq},
            "counters": {
                "received": conversation.received_count,
                "answered": conversation.answered_count,
                "max_turns": conversation.max_turns_count,  # best-effort answers, apart
                "failed": conversation.failed_count,
                "sent": bus.dispatcher.sent_count,
                "dead_lettered": bus.dispatcher.dead_count,
            },
            "channels": [{"name": a.name, "send_interval_s": a.send_interval_s,
                          **self.health.get(a.name).to_dict()} for a in self.channels],
            "inbound_dlq": [e.to_dict() for e in bus.stats.recent_inbound_dlq[:10]],
            "sessions": stored.sessions,
            "recent_messages": self.hub.recent({"inbound.received", "agent.reply"}, limit=30),
            "loops": self.supervisor.status(),
            "tasks": len(asyncio.all_tasks()),  # a leak shows as growth (bench --soak)
            "cron": {"jobs": stored.cron_jobs, "fired": self.cron.fired_count},
            "task_graphs": (self.tasks.state(stored.unfinished_tasks)
                            if backend["connected"] else {}),
            "sandbox": self.sandbox.describe(),
            "mcp": self.mcp.describe(),  # mcp.json's problem, each server's state
            "disk": self.sandbox.quotas.summary(),  # the chat folders, from the usage index
            "usage": (shared(backend, lambda: usage_report(self.usage, days=1,
                                                           names=stored.usage_names), {})
                      if stored.usage_names is not None else {}),
            **shared(backend, self.background.state, {}),  # "ops", "heartbeat"
        }

    async def _stored(self, backend: dict[str, Any]) -> _Stored:
        """Read what lives in the stores without holding the event loop: one `offload` call
        whose reads touch nothing the event loop changes (sessions listed, jobs and open
        tasks counted, display names), then today's usage on the asynchronous client
        (`UsageStore.refresh`), last: the page is built right after, while it is fresh."""
        if not backend["connected"]:
            return _Stored([], None, None, None)
        stored = await self.backend.offload(self._read_stored, backend)
        try:
            await self.usage.store.refresh(self.usage.today())
        except Exception as exc:  # the usage section says nothing rather than fail the page
            log.debug("state: usage did not answer (%s: %s)", type(exc).__name__, exc)
            return replace(stored, usage_names=None)
        return stored

    def _read_stored(self, backend: dict[str, Any]) -> _Stored:
        return _Stored(
            sessions=shared(backend, lambda: [
                {"key": s.key, "size_bytes": s.size_bytes, "updated_at": s.updated_at}
                for s in self.sessions.list_sessions(limit=20)], []),
            cron_jobs=shared(backend, lambda: len(self.cron.store), None),
            unfinished_tasks=shared(backend, self.tasks.store.count_unfinished, None),
            usage_names=shared(backend, self.usage.store.names, None))


def shared(backend: dict[str, Any], read: Callable[[], T], default: T) -> T:
    """A read of what may live in Redis (sessions, cron, tasks, ...): not tried while the
    backend (its `status()`) is unreachable, and a failure gives `default`, so /api/state
    keeps answering, and says why, when Redis is lost."""
    if not backend["connected"]:
        return default
    try:
        return read()
    except Exception as exc:
        log.debug("state: a store did not answer (%s: %s)", type(exc).__name__, exc)
        return default


def backend_problems(status: dict[str, Any]) -> list[str]:
    """The backend's part of `problems()`: a store that stopped answering, by when."""
    if status.get("connected", True):
        return []
    since = status.get("since")
    when = datetime.fromtimestamp(since).strftime("%Y-%m-%d %H:%M:%S") if since else "?"
    return [f"Redis unreachable since {when}: this node takes no new work "
            f"({status.get('last_error') or 'no answer'})"]
