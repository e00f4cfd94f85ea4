"""Wiring of the heartbeat, `system_event` cron jobs and the ops service into a daemon.

Kept out of runtime/daemon.py (which builds `BackgroundServices(BackgroundParts(...))` and
calls `cancel_interrupted`, `start`, `stop`, `state` and `fire_event`) so the daemon's boot
file stays about boot order. The services are given the parts of the daemon they use
(`BackgroundParts`), never the runtime.

On the Redis backend (several nodes): the heartbeat runs only on the node holding its notice
chat (the chat's partition lease, like all of that chat's work), from the last tick any node
recorded in Redis; `system_event` cron jobs fire only on the node holding their chat; the ops
loop runs on every node (its reading, its channel loops, its chats' runs) with the decision
dedupe on the holder of `service:ops` only (`SingleRunner`), and each notice is told
once across the nodes. Each node's watchdog watches the runs of the chats it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from soulflow.agent.consolidate import ConsolidationPolicy, Consolidator
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.usage import UsageMeter
from soulflow.backends.base import Backend, SessionStore
from soulflow.channels.health import HealthBoard
from soulflow.channels.registry import ChannelRegistry
from soulflow.config import Settings
from soulflow.contracts import Announcement, ChatRef, Provider
from soulflow.conversation.replies import BusReplies
from soulflow.conversation.runs import ActiveRuns
from soulflow.cron.jobs import Job
from soulflow.cron.service import occurrence_stamp
from soulflow.decision.service import DecisionService
from soulflow.heartbeat.service import HeartbeatService
from soulflow.heartbeat.targets import notice_target
from soulflow.heartbeat.turns import QuietTurn, QuietTurnRunner
from soulflow.ops.notices import NoticeBoard
from soulflow.ops.service import OpsPolicy, OpsProbes, OpsRuntimeService
from soulflow.ops.single import SingleRunner
from soulflow.ops.watchdog import ChannelWatch, RunWatch, WatchLog
from soulflow.providers.failover import FailoverProvider
from soulflow.providers.local_runtime import LocalModelRuntime
from soulflow.providers.registry import ProviderRegistry
from soulflow.supervisor import Supervisor

__all__ = ["BackgroundParts", "BackgroundServices"]

log = logging.getLogger(__name__)

HEARTBEAT_LOOP, OPS_LOOP = "heartbeat", "ops"


@dataclass(frozen=True, slots=True)
class BackgroundParts:
    """The parts of a daemon the heartbeat, quiet turns and ops use."""

    settings: Settings
    backend: Backend  # leases, the heartbeat's state, notice claims, which chats are held
    agent: AgentDomain  # quiet turns are agent runs; the watchdog reads its loop
    model: Provider | None  # what the agent talks to (redacting); None without a provider
    chain: Provider | None  # the failover chain under it, read for provider status
    consolidates: bool  # the chats' memory is consolidated (not with the embedded model)
    memory: MemoryStore
    decisions: DecisionService
    sessions: SessionStore
    max_context_tokens: int  # the chats' prompt budget, which quiet turns share
    redact: Callable[[str], str]
    channels: ChannelRegistry
    health: HealthBoard
    supervisor: Supervisor  # runs "heartbeat" and "ops"; read and restarted by the watchdog
    runs: ActiveRuns  # the chats' active runs: stopped by the watchdog, counted
    replies: BusReplies  # what the heartbeat, system events and notices tell a chat
    queues: Callable[[], dict[str, int]]  # work waiting in the bus and the conversation
    providers: ProviderRegistry
    local_model: LocalModelRuntime | None
    usage: UsageMeter | None = None  # the heartbeat's consolidation calls are counted too


class BackgroundServices:
    """The quiet-turn runner, the heartbeat and ops of one daemon."""

    def __init__(self, parts: BackgroundParts) -> None:
        settings = parts.settings
        setting = settings.__getitem__
        self._parts = parts
        channels = parts.channels.names()
        backend = parts.backend
        model = parts.model
        self.single = SingleRunner(backend.leases if backend.shared else None, backend.node_id,
                                   ttl_s=float(setting("REDIS_LEASE_TTL_S")))
        context = ContextBuilder(settings.workspace, parts.memory, parts.decisions,
                                 parts.sessions,
                                 history_messages=int(setting("HEARTBEAT_HISTORY_MESSAGES")),
                                 max_context_tokens=parts.max_context_tokens)
        self.consolidator: Consolidator | None = None
        threshold = int(setting("HEARTBEAT_CONSOLIDATE_AFTER"))
        if model is not None and threshold and parts.consolidates:
            keep = max(1, min(int(setting("HEARTBEAT_HISTORY_MESSAGES")), threshold - 1))
            self.consolidator = Consolidator(
                parts.sessions, parts.memory, lambda: model,
                ConsolidationPolicy(threshold_messages=threshold, keep_last=keep),
                usage=parts.usage)
        self.quiet = QuietTurnRunner(parts.agent, context, self._publish,
                                     consolidator=self.consolidator, redact=parts.redact)
        self.heartbeat = HeartbeatService(
            settings.workspace, backend.heartbeat, self.quiet,
            notice_target(setting, channels, explicit=setting("HEARTBEAT_CHAT"),
                          fallback_chat_id="heartbeat"),
            interval_s=float(setting("HEARTBEAT_INTERVAL")), offload=backend.offload)
        self.notice_chat = notice_target(setting, channels, fallback_chat_id="ops")
        policy = OpsPolicy.from_settings(setting)
        watch_log = WatchLog()
        self.ops = OpsRuntimeService(
            policy,
            OpsProbes(loops=parts.supervisor.status, queues=self._queues,
                      providers=self._providers, extra={"heartbeat": self.heartbeat.status}),
            health=parts.health,
            runs=RunWatch(lambda: parts.agent.loop, stuck_after_s=policy.run_stuck_after_s,
                          stop_chat=parts.runs.stop, abort_run=self.quiet.abort,
                          log_=watch_log, owns=backend.owns),
            channels=ChannelWatch(parts.health, parts.channels.names,
                                  stall_after_s=policy.channel_stall_after_s,
                                  restart=self._restart_channel, log_=watch_log),
            notices=NoticeBoard(self._notify, after_s=policy.notice_after_s,
                                interval_s=policy.notice_interval_s,
                                claim=backend.notice_claims, offload=backend.offload),
            watch_log=watch_log, decisions=parts.decisions, is_leader=self.single.is_leader,
            offload=backend.offload)

    # -- lifecycle (called by the runtime) -------------------------------------------------

    async def cancel_interrupted(self) -> None:
        """Before unfinished runs resume: quiet turns a stop cut off are cancelled (with shared
        run journals, those of the chats this node holds: quiet turns run on their chat's
        holder, so no other node drives them)."""
        backend = self._parts.backend
        cancelled = await self.quiet.cancel_interrupted(
            backend.owns if self.single.shared else None)
        if cancelled:
            log.info("cancelled %d heartbeat/system-event run(s) interrupted by the last stop",
                     cancelled)

    def start(self) -> None:
        """Loops `heartbeat` (in a cluster, only on the node holding its chat: `runs_heartbeat`)
        and `ops`."""
        supervisor = self._parts.supervisor
        self.single.start()
        if self.heartbeat.enabled:
            supervisor.spawn(HEARTBEAT_LOOP, self.single.gated(
                "heartbeat", self.heartbeat.run, holds=self.runs_heartbeat))
        supervisor.spawn(OPS_LOOP, self.ops.run)

    def runs_heartbeat(self) -> bool:
        """This node holds the heartbeat's chat (always, without a cluster)."""
        return self._parts.backend.owns(self.heartbeat.target.key)

    async def stop(self) -> None:
        await self._parts.supervisor.cancel([HEARTBEAT_LOOP, OPS_LOOP])
        await self.single.stop()  # after its loops stopped: hand over at once
        await self.quiet.stop()
        if self.consolidator is not None:
            await self.consolidator.stop()

    def state(self) -> dict[str, Any]:
        # live: does this node hold service:ops / the heartbeat's chat (always, on files)
        return {"ops": {**self.ops.snapshot(), "leader": self.single.is_leader()},
                "heartbeat": {**self.heartbeat.status(), "runs_here": self.runs_heartbeat()}}

    def fire_event(self, job: Job, scheduled: datetime) -> None:
        """A due `system_event` cron job: a quiet turn in the job's own session."""
        self.quiet.submit(QuietTurn(
            session_key=f"cron:{job.id}",
            target=job.chat.where(),
            text=job.text, turn_key=f"cron-{job.id}-{occurrence_stamp(scheduled)}",
            label=f"cron: {job.name}"))

    # -- probes and actions ------------------------------------------------------------------

    def _publish(self, chat: ChatRef, text: str, announces: Announcement | None) -> None:
        self._parts.replies.publish_to_chat(chat, text, announces)

    def _notify(self, text: str) -> None:
        self._publish(self.notice_chat, text, None)

    def notify_operator(self, text: str) -> None:
        """Tell the operator's notice chat (e.g. a cron or heartbeat run skipped at a model
        budget cap)."""
        self._notify(text)

    def _restart_channel(self, name: str, reason: str) -> bool:
        adapter = self._parts.channels.get(name)
        if adapter is None:
            return False
        return self._parts.supervisor.restart(f"channel:{name}", reason, cleanup=adapter.stop)

    def _queues(self) -> dict[str, int]:
        return {**self._parts.queues(), "active_runs": self._parts.runs.count()}

    def _providers(self) -> dict[str, Any]:
        parts = self._parts
        chain, providers = parts.chain, parts.providers
        rows = chain.status() if isinstance(chain, FailoverProvider) else []
        local = parts.local_model.status() if parts.local_model is not None else None
        down = [row["name"] for row in rows if row.get("down")]
        if local is not None and local.get("state") in ("failed", "unhealthy"):
            down.append(f"{providers.default_name or 'phi4_local'} (embedded model "
                        f"{local.get('state')})")
        return {"default": providers.default_name,
                "configured": providers.names(), "failover": rows, "down": down}
