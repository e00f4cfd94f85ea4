"""Wiring of the heartbeat, `system_event` cron jobs and the ops service into a Runtime.

Kept out of runtime/daemon.py (which only calls `build`, `cancel_interrupted`, `start`, `close`,
`state` and `fire_event`) so the daemon's boot file stays about boot order.

On the Redis backend (several nodes): the heartbeat runs only on the node holding its notice
chat (the chat's partition lease, like all of that chat's work), from the last tick any node
recorded in Redis; `system_event` cron jobs fire only on the node holding their chat; the ops
loop runs on every node (its reading, its channel loops, its chats' runs) with the decision
dedupe on the holder of `service:ops` only (`SingleRunner`), and each notice is told
once across the nodes. Each node's watchdog watches the runs of the chats it holds.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from soulflow.agent.consolidate import ConsolidationPolicy, Consolidator
from soulflow.agent.context import ContextBuilder
from soulflow.contracts import Announcement, ChatRef
from soulflow.cron.jobs import Job
from soulflow.cron.service import occurrence_stamp
from soulflow.heartbeat.service import HeartbeatService
from soulflow.heartbeat.targets import notice_target
from soulflow.heartbeat.turns import QuietTurn, QuietTurnRunner
from soulflow.ops.notices import NoticeBoard
from soulflow.ops.service import OpsPolicy, OpsProbes, OpsRuntimeService
from soulflow.ops.single import SingleRunner
from soulflow.ops.watchdog import ChannelWatch, RunWatch, WatchLog
from soulflow.providers.base import Provider
from soulflow.providers.failover import FailoverProvider
from soulflow.supervisor import Supervisor

if TYPE_CHECKING:
    from soulflow.runtime import Runtime

__all__ = ["BackgroundServices"]

log = logging.getLogger(__name__)


class BackgroundServices:
    """The quiet-turn runner, the heartbeat and ops of one Runtime."""

    def __init__(self, runtime: Runtime, *, model: Provider | None,
                 chain: Provider | None) -> None:
        """`model`: what the agent talks to (redacting); `chain`: the failover chain under it,
        read for provider status. Both None without a configured provider."""
        settings = runtime.settings
        setting = settings.__getitem__
        self._runtime = runtime
        self._provider = chain
        channels = runtime.channels.names()
        backend = runtime.backend
        self.single = SingleRunner(backend.leases if backend.shared else None, backend.node_id,
                                   ttl_s=float(setting("REDIS_LEASE_TTL_S")))
        context = ContextBuilder(settings.workspace, runtime.memory, runtime.decisions,
                                 runtime.sessions,
                                 history_messages=int(setting("HEARTBEAT_HISTORY_MESSAGES")),
                                 max_context_tokens=runtime.context.max_context_tokens)
        self.consolidator: Consolidator | None = None
        threshold = int(setting("HEARTBEAT_CONSOLIDATE_AFTER"))
        if model is not None and threshold and runtime.consolidator is not None:
            keep = max(1, min(int(setting("HEARTBEAT_HISTORY_MESSAGES")), threshold - 1))
            self.consolidator = Consolidator(
                runtime.sessions, runtime.memory, lambda: model,
                ConsolidationPolicy(threshold_messages=threshold, keep_last=keep))
        self.quiet = QuietTurnRunner(runtime.agent, context, self._publish,
                                     consolidator=self.consolidator,
                                     redact=runtime.redactor.redact)
        self.heartbeat = HeartbeatService(
            settings.workspace, backend.heartbeat, self.quiet,
            notice_target(setting, channels, explicit=setting("HEARTBEAT_CHAT"),
                          fallback_chat_id="heartbeat"),
            interval_s=float(setting("HEARTBEAT_INTERVAL")))
        self.notice_chat = notice_target(setting, channels, fallback_chat_id="ops")
        policy = OpsPolicy.from_settings(setting)
        watch_log = WatchLog()
        self.ops = OpsRuntimeService(
            policy,
            OpsProbes(loops=runtime.supervisor.status, queues=self._queues,
                      providers=self._providers, extra={"heartbeat": self.heartbeat.status}),
            health=runtime.health,
            runs=RunWatch(lambda: runtime.agent.loop, stuck_after_s=policy.run_stuck_after_s,
                          stop_chat=runtime.conversation.runs.stop, abort_run=self.quiet.abort,
                          log_=watch_log, owns=backend.owns),
            channels=ChannelWatch(runtime.health, runtime.channels.names,
                                  stall_after_s=policy.channel_stall_after_s,
                                  restart=self._restart_channel, log_=watch_log),
            notices=NoticeBoard(self._notify, after_s=policy.notice_after_s,
                                interval_s=policy.notice_interval_s,
                                claim=backend.notice_claims),
            watch_log=watch_log, decisions=runtime.decisions, is_leader=self.single.is_leader)

    # -- lifecycle (called by Runtime) -----------------------------------------------------

    def cancel_interrupted(self) -> None:
        """Before unfinished runs resume: quiet turns a stop cut off are cancelled (with shared
        run journals, those of the chats this node holds: quiet turns run on their chat's
        holder, so no other node drives them)."""
        backend = self._runtime.backend
        cancelled = self.quiet.cancel_interrupted(backend.owns if self.single.shared else None)
        if cancelled:
            log.info("cancelled %d heartbeat/system-event run(s) interrupted by the last stop",
                     cancelled)

    def start(self, supervisor: Supervisor) -> None:
        """Loops `heartbeat` (in a cluster, only on the node holding its chat: `runs_heartbeat`)
        and `ops`."""
        self.single.start()
        if self.heartbeat.enabled:
            supervisor.spawn("heartbeat", self.single.gated("heartbeat", self.heartbeat.run,
                                                            holds=self.runs_heartbeat))
        supervisor.spawn("ops", self.ops.run)

    def runs_heartbeat(self) -> bool:
        """This node holds the heartbeat's chat (always, without a cluster)."""
        return self._runtime.backend.owns(self.heartbeat.target.key)

    async def close(self) -> None:
        await self.single.stop()  # after the Supervisor stopped the loops: hand over at once
        await self.quiet.close()
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
        self._runtime.conversation.publish_to_chat(chat, text, announces)

    def _notify(self, text: str) -> None:
        self._publish(self.notice_chat, text, None)

    def _restart_channel(self, name: str, reason: str) -> bool:
        adapter = self._runtime.channels.get(name)
        if adapter is None:
            return False
        return self._runtime.supervisor.restart(f"channel:{name}", reason,
                                                cleanup=adapter.stop)

    def _queues(self) -> dict[str, int]:
        runtime = self._runtime
        return {**runtime.queue_depths(), "active_runs": runtime.conversation.runs.count()}

    def _providers(self) -> dict[str, Any]:
        runtime = self._runtime
        rows = self._provider.status() if isinstance(self._provider, FailoverProvider) else []
        local = runtime.local_model.status() if runtime.local_model is not None else None
        down = [row["name"] for row in rows if row.get("down")]
        if local is not None and local.get("state") in ("failed", "unhealthy"):
            down.append(f"{runtime.providers.default_name or 'phi4_local'} (embedded model "
                        f"{local.get('state')})")
        return {"default": runtime.providers.default_name,
                "configured": runtime.providers.names(), "failover": rows, "down": down}
