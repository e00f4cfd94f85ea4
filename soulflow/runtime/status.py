"""What a running daemon reports about itself: `/api/state`, its problems, its queue depths.

Apart from the lifecycle in `daemon.py` because it is a read-only view over every service, and
because on the redis backend much of it lives in Redis: a section that cannot be read while Redis
is away gives a default instead of failing the page, and the backend's own status says why.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from soulflow import __version__
from soulflow.ops.service import loop_and_channel_problems

if TYPE_CHECKING:
    from soulflow.runtime.daemon import Runtime

log = logging.getLogger(__name__)

T = TypeVar("T")


def problems(runtime: Runtime) -> list[str]:
    """What is wrong right now: Redis away, a supervised loop down, a channel failing, a vault
    key that is not the cluster's, an unreadable task store. `state()["ok"]` is true only when
    the daemon is ready with none of them (the ops reading in `state()["ops"]` adds providers and
    how long problems last)."""
    return _problems(runtime, runtime.backend.status())


def _problems(runtime: Runtime, backend: dict[str, Any]) -> list[str]:
    """`problems()` given the backend's status, read once by the caller."""
    found = loop_and_channel_problems(runtime.supervisor.status(), runtime.health)
    vault = [runtime.vault.key_problem] if runtime.vault.key_problem else []  # another key
    return [*backend_problems(backend), *found.values(), *vault,
            *shared(backend, lambda: list(runtime.tasks.problems), [])]


def queue_depths(runtime: Runtime) -> dict[str, int]:
    """Work waiting in the bus and the conversation (the dashboard's and the ops reading's)."""
    stats = runtime.bus.stats  # refreshed by the "bus:stats" loop (the store may be Redis)
    return {"inbound_pending": stats.inbound_pending,
            "inbound_queued": runtime.conversation.queued,
            "active_chats": runtime.conversation.active_chats,
            "outbox_pending": stats.outbox_pending,
            "outbound_queued": runtime.bus.dispatcher.queued, "dlq": stats.dlq}


def state(runtime: Runtime) -> dict[str, Any]:
    """The dashboard's view of the daemon; its only free text (recent messages) comes redacted
    from the event hub."""
    bus, conversation = runtime.bus, runtime.conversation
    backend = runtime.backend.status()  # once: every Redis-backed section below asks it
    found = _problems(runtime, backend)
    return {
        "ok": runtime.ready and not found,
        "problems": found,
        "version": __version__,
        "pid": os.getpid(),
        "workspace": str(runtime.settings.workspace),
        "uptime_s": round(time.time() - runtime.started_at, 1) if runtime.started_at else 0.0,
        "provider": runtime.providers.default_name,
        "local_model": (runtime.local_model.status() if runtime.local_model is not None
                        else None),
        "backend": backend,
        "queues": {**queue_depths(runtime), "inbound_dlq": bus.stats.inbound_dlq},
        "counters": {
            "received": conversation.received_count,
            "answered": conversation.answered_count,
            "max_turns": conversation.max_turns_count,  # best-effort answers, apart
            "failed": conversation.failed_count,
            "sent": bus.dispatcher.sent_count,
            "dead_lettered": bus.dispatcher.dead_count,
        },
        "channels": [{"name": a.name, "send_interval_s": a.send_interval_s,
                      **runtime.health.get(a.name).to_dict()} for a in runtime.channels],
        "inbound_dlq": [e.to_dict() for e in bus.stats.recent_inbound_dlq[:10]],
        "sessions": shared(backend, lambda: [
            {"key": s.key, "size_bytes": s.size_bytes, "updated_at": s.updated_at}
            for s in runtime.sessions.list_sessions(limit=20)], []),
        "recent_messages": runtime.hub.recent({"inbound.received", "agent.reply"}, limit=30),
        "loops": runtime.supervisor.status(),
        "tasks": len(asyncio.all_tasks()),  # a leak shows as growth (bench --soak)
        "cron": {"jobs": shared(backend, lambda: len(runtime.cron.store), None),
                 "fired": runtime.cron.fired_count},
        "task_graphs": shared(backend, runtime.task_services.state, {}),
        "sandbox": runtime.sandbox.describe(),
        "disk": runtime.sandbox.quotas.summary(),  # the chat folders, from the usage index
        **shared(backend, runtime.background.state, {}),  # "ops", "heartbeat"
    }


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
