"""Where the agent's state lives: files under runtime/, or Redis (SOULFLOW_BACKEND=redis).

Sessions, agent run journals and the approval-prompt maps keep their synchronous API (they are
called deep inside the agent, many times per turn); on Redis they share one synchronous client
per daemon (`state_redis`), made here and closed by `Runtime.stop()`. The Redis stores import
only on the redis backend, so a file daemon never loads them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soulflow.agent.approvals import ApprovalMap, ApprovalMessages
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.run.store import RunJournal
from soulflow.agent.run.timing import FinishedListener, TimedThreadStore
from soulflow.backends.base import Backend, BackendKind
from soulflow.config import Settings
from soulflow.session.store import Sessions, SessionStore

if TYPE_CHECKING:
    from soulflow.backends.redis.sync_client import StateRedis

MAX_CALL_S = 2.0  # the longest one synchronous Redis call may block the event loop


def state_redis(settings: Settings) -> StateRedis | None:
    """The synchronous Redis client of this daemon's stores, or None on the file backend.

    A call that hangs on a dead Redis blocks the event loop, which must still notice in time
    that its leases lapsed (at two thirds of the TTL): a call waits at most a quarter of the
    TTL, and after a failure every call fails at once for half a TTL (the client's breaker),
    so a lost Redis blocks the loop for at most a third of the time, one call at a time."""
    if settings["SOULFLOW_BACKEND"] != "redis":
        return None
    from soulflow.backends.redis.sync_client import StateRedis, sync_client

    ttl_s = float(settings["REDIS_LEASE_TTL_S"])
    return StateRedis(sync_client(settings["REDIS_URL"], timeout_s=min(MAX_CALL_S, ttl_s / 4),
                                  cooldown_s=ttl_s / 2),
                      settings["REDIS_KEY_PREFIX"])


def session_store(settings: Settings, state: StateRedis | None, *,
                  redact: Callable[[str], str]) -> Sessions:
    """Conversation history: `runtime/sessions/<key>.jsonl`, or a list per session in Redis."""
    if state is None:
        return SessionStore(settings.runtime_dir / "sessions", fsync=settings["JOURNAL_FSYNC"],
                            redact=redact)
    from soulflow.backends.redis.sessions import RedisSessionStore

    return RedisSessionStore(state, redact=redact)


def run_journal(settings: Settings, state: StateRedis | None, backend: Backend | None, *,
                redact: Callable[[Any], Any], on_finished: FinishedListener) -> RunJournal:
    """Agent run journals: `runtime/threads/`, or Redis, where each write carries the fencing
    token of the partition lease under which this node holds the run's chat."""
    if state is None:
        return TimedThreadStore(settings.runtime_dir / "threads",
                                fsync=settings["JOURNAL_FSYNC"], redact=redact,
                                on_finished=on_finished)
    from soulflow.backends.redis.backend import RedisBackend
    from soulflow.backends.redis.runs import RedisThreadStore, no_fence, partition_fence

    fence = partition_fence(backend) if isinstance(backend, RedisBackend) else no_fence
    return RedisThreadStore(state, redact=redact, on_finished=on_finished, fence=fence)


def hold_driven_chats(backend: Backend | None, loop: AgentLoop) -> None:
    """On Redis, a partition with a run this node is driving is not given away when the nodes
    rebalance, like one with a claimed message: a run continued after a decision, or resumed,
    is never taken over mid-step by a node that just joined. It moves once the run finishes
    or waits, or when this node dies."""
    if backend is None or backend.kind is BackendKind.FILE:
        return
    from soulflow.backends.redis.backend import RedisBackend

    assert isinstance(backend, RedisBackend)
    backend.hold_chats(lambda: list(loop.driving.values()))


def approval_map(path: Path, state: StateRedis | None, name: str) -> ApprovalMap:
    """Which platform messages announced which approval: the JSON file at `path`, or the
    Redis hash `approvals:<name>` (so a reaction landing on any node finds it)."""
    if state is None:
        return ApprovalMessages(path)
    from soulflow.backends.redis.approvals import RedisApprovalMessages

    return RedisApprovalMessages(state, name)
