"""create_runtime(): build the services in boot order, start them, stop them in reverse.

Boot: take the workspace lock → ensure default files → MessageBus → DecisionService →
EventHub → providers → AgentDomain → channels + ChannelManager → dashboard. Start: resume
unfinished inbound work and the outbox, channel readers, the journal syncer, the dashboard.
Stop (SIGINT/SIGTERM): the reverse, letting answers and sends in flight finish within
SHUTDOWN_GRACE_S, then flushing every journal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from soulflow import __version__
from soulflow.agent.approvals import ApprovalMessages, ApproverPolicy
from soulflow.agent.consolidate import ConsolidationPolicy, Consolidator
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.run.reducer import RunState
from soulflow.agent.run.store import ThreadStore
from soulflow.agent.run.timing import TimedThreadStore
from soulflow.agent.tools import CodeSandbox, build_default_registry
from soulflow.agent.tools.base import ToolContext, ToolError, ToolServices
from soulflow.agent.tools.cron_tool import CronTool
from soulflow.agent.tools.diagram_tool import DiagramRenderTool
from soulflow.agent.tools.messaging import UPLOAD_PROMPT, MessageTool, RequestFileTool
from soulflow.agent.tools.skill_tool import SkillTool
from soulflow.agent.tools.spawn import SpawnTool, cancel_orphaned_subruns, run_subagent
from soulflow.backends.factory import BackendConfig, refuse_unwired_backend
from soulflow.bus.bus import MessageBus
from soulflow.bus.messages import OutboundMessage, SendResult
from soulflow.bus.retry import RetryPolicy
from soulflow.bus.traffic import TrafficCounters
from soulflow.channels.access import AdminPolicy
from soulflow.channels.capability_commands import (
    make_cron_command,
    make_repl_command,
    render_command,
)
from soulflow.channels.factory import access_policy, build_platform_channels
from soulflow.channels.feedback import FeedbackPolicy
from soulflow.channels.health import LinkState
from soulflow.channels.local import LocalChannel
from soulflow.channels.manager import ChannelManager
from soulflow.channels.reader import ReadPolicy
from soulflow.channels.registry import ChannelRegistry
from soulflow.channels.secret_command import make_secret_command
from soulflow.config import ConfigError, Settings, id_list
from soulflow.contracts import ChatRef
from soulflow.cron import CronService, CronStore, Job, PayloadKind, cron_inbound_message
from soulflow.cron.admin import ToolCronHandle
from soulflow.decision.service import DecisionService
from soulflow.events.hub import EventHub
from soulflow.ops.assembly import BackgroundServices
from soulflow.providers.base import Provider
from soulflow.providers.factory import build_providers, embedded_model, failover_order
from soulflow.providers.local_runtime import LocalModelError
from soulflow.scaffold import ensure_workspace
from soulflow.security.inbound import InboundSealer
from soulflow.security.protected import open_vault
from soulflow.security.redact import Redactor, install_log_redaction
from soulflow.security.redacting_provider import RedactingProvider
from soulflow.session.store import SessionStore
from soulflow.storage.atomic import write_json_atomic
from soulflow.storage.lock import WorkspaceLock
from soulflow.supervisor import Supervisor
from soulflow.tasks.assembly import TaskServices
from soulflow.telemetry import RUN_BUCKETS_S, Histogram

log = logging.getLogger(__name__)

DAEMON_INFO_FILE = "daemon.json"


class Runtime:
    """Every service of one daemon, wired together; owns their lifecycle."""

    def __init__(self, settings: Settings, lock: WorkspaceLock) -> None:
        self.settings = settings
        self._lock = lock
        runtime_dir = settings.runtime_dir
        fsync = settings["JOURNAL_FSYNC"]
        # one redactor for every sink: logs, sessions, journals, events, model requests; it
        # knows the environment's and .env's credentials and learns every secret a tool opens
        self.redactor = Redactor.for_settings(settings)
        self._uninstall_log_redaction: Callable[[], None] = lambda: None  # set by start()
        self.admins = AdminPolicy.from_settings(settings)
        self.hub = EventHub(redact=self.redactor.redact_obj)
        # messages per channel (totals, per-minute chart) and run durations, for the
        # dashboard and /metrics; the bus and the manager publish through _publish_event
        self.traffic = TrafficCounters()
        self.run_durations = Histogram(RUN_BUCKETS_S)
        self.vault = open_vault(settings)  # the key where SOULFLOW_MASTER_KEY_FILE says
        self.bus = MessageBus(
            runtime_dir, fsync=fsync, outbound_concurrency=settings["OUTBOUND_CONCURRENCY"],
            policy=RetryPolicy(
                max_attempts=settings["OUTBOUND_MAX_ATTEMPTS"],
                inline_retries=settings["OUTBOUND_INLINE_RETRIES"],
                base_delay_s=settings.seconds_from_ms("OUTBOUND_RETRY_BASE_MS"),
                max_delay_s=settings.seconds_from_ms("OUTBOUND_RETRY_MAX_MS"),
                inline_delay_s=min(0.2, settings.seconds_from_ms("OUTBOUND_RETRY_BASE_MS"))),
            on_event=self._publish_event, redact=self.redactor.redact)
        self.decisions = DecisionService(runtime_dir / "decisions" / "index.json")
        self.sessions = SessionStore(runtime_dir / "sessions", fsync=fsync,
                                     redact=self.redactor.redact)
        self.memory = MemoryStore(settings.workspace / "memory")
        self.local_model = embedded_model(settings)  # None unless wanted and installed
        self.providers = build_providers(settings, self.local_model)
        # the embedded model answers: fit its small window, keep its summaries out of memory/
        self._tiny_model = self.local_model is not None \
            and self.providers.default_name == "phi4_local"
        max_context = settings["AGENT_MAX_CONTEXT_TOKENS"]
        if self.local_model is not None and self._tiny_model:
            window = self.local_model.config.n_ctx * 3 // 4  # a quarter left for the answer
            max_context = min(max_context, window) if max_context else window
        self.threads: ThreadStore | None = None
        self._model: Provider | None = None  # set by _build_loop: (redacting, failover chain)
        self._chain: Provider | None = None
        self.context = ContextBuilder(settings.workspace, self.memory, self.decisions,
                                      self.sessions,
                                      history_messages=settings["AGENT_HISTORY_MESSAGES"],
                                      max_context_tokens=max_context)
        self.sandbox = CodeSandbox(settings)  # exec, python_repl, /repl; probed on first use
        self.tools = build_default_registry(
            redactor=self.redactor,
            sandbox=self.sandbox,
            allow_private_fetch=settings.flag("WEB_FETCH_ALLOW_PRIVATE"),
            allowed_hosts=frozenset(id_list(settings["WEB_FETCH_ALLOWED_HOSTS"])))
        for tool in (MessageTool(), RequestFileTool(), SpawnTool(), CronTool(),
                     DiagramRenderTool(), SkillTool(self.context.skills)):
            self.tools.register(tool)
        self.approvals = ApprovalMessages(runtime_dir / "approvals" / "messages.json")
        self.consolidator: Consolidator | None = None  # set by _build_loop with a provider
        self.agent = AgentDomain(self.context, self.sessions, self._build_loop(runtime_dir),
                                 self.approvals, on_turn_finished=self._after_turn,
                                 approvers=ApproverPolicy(self.admins.is_admin),
                                 redact=self.redactor.redact)
        self.channels = ChannelRegistry()
        self.local = LocalChannel(runtime_dir / "local",
                                  send_interval_s=settings.seconds_from_ms("LOCAL_SEND_INTERVAL_MS"),
                                  on_event=self.hub.publish)
        self.channels.register(self.local)
        for adapter in build_platform_channels(settings, runtime_dir):
            self.channels.register(adapter)
        self.bus.bind_senders(self.channels.get)
        self.bus.dispatcher.sent_listeners.append(self._remember_approval_message)
        self.manager = ChannelManager(
            self.channels, self.bus, self.agent, access=access_policy(settings),
            files_dir=runtime_dir / "inbound-files",
            concurrency=settings["AGENT_CONCURRENCY"],
            grouping_window_s=(settings.seconds_from_ms("CHANNEL_GROUPING_WINDOW_MS")
                               if settings.flag("CHANNEL_GROUPING_ENABLED") else None),
            grouping_max=settings["CHANNEL_GROUPING_MAX"],
            max_inbound_chars=settings["MAX_INBOUND_CHARS"],
            sealer=InboundSealer(self.vault, self.admins.is_admin),
            on_event=self._publish_event, fold_max=settings["CHANNEL_FOLD_MAX"],
            read_policy=ReadPolicy(
                stall_after_s=float(settings["CHANNEL_STALL_TIMEOUT_S"]),
                restart_after=settings["CHANNEL_RESTART_AFTER_FAILURES"]),
            redact=self.redactor.redact,
            feedback=FeedbackPolicy(
                typing_refresh_s=float(settings["CHANNEL_TYPING_REFRESH_S"]),
                read_ack_interval_s=float(settings["CHANNEL_READ_ACK_INTERVAL_S"]),
                read_ack_backlog=settings["CHANNEL_READ_ACK_BACKLOG"]))
        self.bus.dispatcher.outcome_listeners.append(self.traffic.send_outcome)
        self.manager.commands.register("secret", make_secret_command(self.vault, self.admins))
        self.manager.commands.register("repl", make_repl_command(self.sandbox))
        self.manager.commands.register("render", render_command)
        self.cron = CronService(CronStore(runtime_dir / "cron" / "cron-store.json"),
                                self._fire_cron)
        self.manager.commands.register("cron", make_cron_command(self.cron))
        # task graphs (docs/tasks.md): store, workflow events, engine, /task, the task tool,
        # task answers and reactions in chats, /stop cancelling a chat's tasks
        self.task_services = TaskServices(self)
        self.tasks, self.workflow = self.task_services.store, self.task_services.workflow
        self.task_engine = self.task_services.engine  # the dashboard's cancel goes through it
        self.supervisor = Supervisor()
        # heartbeat, system_event cron jobs, ops (watchdog, health reading, notices)
        self.background = BackgroundServices(self, model=self._model, chain=self._chain)
        # the HTTP front end (the dashboard) is built around the runtime by soulflow.app, so
        # the runtime never imports the layer above it; started last, stopped first
        self.dashboard: FrontEnd | None = None
        self.started_at = 0.0
        self.ready = False

    def _build_loop(self, runtime_dir: Path) -> AgentLoop | None:
        """The agent loop, or None when no provider is configured (the chat says how)."""
        if not self.providers.names():
            return None
        order = failover_order(self.settings) or []
        missing = [name for name in order if name not in self.providers.names()]
        if missing:
            raise ConfigError(f"PROVIDER_FALLBACKS names {', '.join(missing)}, which "
                              "is not configured (see docs/config.md for its settings)")
        self._chain = self.providers.chain(order or None)
        chain = self._model = RedactingProvider(self._chain, self.redactor)
        threshold = int(self.settings["MEMORY_CONSOLIDATION_THRESHOLD"])
        if threshold and not self._tiny_model:
            self.consolidator = Consolidator(
                self.sessions, self.memory, lambda: chain,
                ConsolidationPolicy(threshold_messages=threshold,
                                    keep_last=int(self.settings["MEMORY_CONSOLIDATION_KEEP_LAST"])))
        self.threads = TimedThreadStore(
            runtime_dir / "threads", fsync=self.settings["JOURNAL_FSYNC"],
            redact=self.redactor.redact_strings,
            on_finished=lambda status, seconds, sub: self.run_durations.observe(seconds))
        return AgentLoop(self.threads, lambda: chain, self.tools, self.context.system_prompt,
                         self._tool_context, max_turns=self.settings["AGENT_MAX_TURNS"])

    def _publish_event(self, kind: str, data: dict[str, Any]) -> None:
        """The live-event sink of the bus and the channels: counted, then published."""
        self.traffic.observe(kind, data)
        self.hub.publish(kind, data)

    def _after_turn(self, session_key: str) -> None:
        """After each recorded answer: fold old turns into memory/ in the background."""
        if self.consolidator is not None:
            self.consolidator.schedule(session_key)

    def _tool_context(self, state: RunState, approved: bool) -> ToolContext:
        chat = state.chat
        ref = ChatRef(chat.provider, chat.chat_id, chat.thread_id, chat.sender_id)
        services = ToolServices(
            send_message=self._send_from_tool,
            request_file=partial(self._request_file_from_tool, chat),
            # a sub-run gets no spawn service: sub-agents cannot start sub-agents
            spawn=None if state.parent_run else partial(self._spawn_from_tool, chat,
                                                        state.run_id),
            schedule=partial(self._cron_from_tool, chat))
        return ToolContext(workspace=self.settings.workspace, chat=ref, approved=approved,
                           vault=self.vault, services=services)

    async def _send_from_tool(self, message: OutboundMessage) -> None:
        if self.channels.get(message.provider) is None:
            raise ToolError(f"there is no {message.provider!r} channel in this daemon "
                            f"(configured: {', '.join(self.channels.names())})")
        chat = ChatRef(message.provider, message.chat_id, message.thread_id)
        self.manager.publish_to_chat(chat, self.redactor.redact(message.content),
                                     message.metadata,
                                     reply_to=message.reply_to)  # split per platform limits

    async def _request_file_from_tool(self, chat: ChatRef, description: str) -> None:
        """Fallback path of request_file (used only if the loop does not intercept it)."""
        self.bus.publish_outbound(OutboundMessage(
            provider=chat.provider, chat_id=chat.chat_id, thread_id=chat.thread_id,
            content=f"{description}\n\n{UPLOAD_PROMPT}"))

    async def _spawn_from_tool(self, chat: ChatRef, parent_run: str, task: str,
                               max_turns: int) -> str:
        if self.agent.loop is None:  # tools only run inside a loop; kept for type safety
            raise ToolError("no model provider is configured")
        return await run_subagent(self.agent.loop, parent_chat=chat, task=task,
                                  max_turns=max_turns, parent_run=parent_run)

    async def _cron_from_tool(self, chat: ChatRef) -> ToolCronHandle:
        """The scheduler for one run: another chat may be named only if an admin asked."""
        admin = self.admins.is_admin(chat.provider, chat.requester_id)
        return ToolCronHandle(self.cron, admin, self.channels.names())

    def _fire_cron(self, job: Job, scheduled: datetime) -> None:
        """A due cron job becomes an ordinary inbound message (journaled, deduplicated)."""
        if self.channels.get(job.chat.provider) is None:
            raise RuntimeError(f"channel {job.chat.provider!r} is not configured")
        if job.kind is PayloadKind.SYSTEM_EVENT:  # quiet: posts only if not HEARTBEAT_OK
            self.background.fire_event(job, scheduled)
            return
        if not self.manager.inject(cron_inbound_message(job, scheduled)):
            log.info("cron job %s for %s was already delivered; not sending it again", job.id,
                     scheduled.isoformat())

    def _remember_approval_message(self, message: OutboundMessage, result: SendResult) -> None:
        approval_id = message.metadata.get("approval_id")
        if approval_id and result.platform_message_ids:
            self.approvals.remember(message.chat_key, result.platform_message_ids,
                                    str(message.metadata.get("run_id")), str(approval_id))

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.started_at = time.time()
        self._uninstall_log_redaction = install_log_redaction(self.redactor)
        await refuse_unwired_backend(BackendConfig.from_settings(self.settings))
        await self.sandbox.ready()  # probe bwrap once, off the loop, before any tool asks
        if self.local_model is not None:  # first: resumed work needs the model
            try:
                await self.local_model.start()
            except LocalModelError as exc:
                log.error("the embedded model did not start; retrying in the background: %s",
                          exc)
            self.supervisor.spawn("local-model", self.local_model.run_supervisor)
        if self.agent.loop is not None:
            orphans = cancel_orphaned_subruns(self.agent.loop)
            if orphans:
                log.info("cancelled %d sub-agent run(s) interrupted by the last stop", orphans)
        self.manager.resume_pending()
        self.background.cancel_interrupted()  # before resume_runs would answer them late
        self.manager.resume_runs()
        await self.task_services.start()  # after the agent: task nodes are agent runs
        self.bus.start()
        for adapter in self.channels:
            self.supervisor.spawn(f"channel:{adapter.name}",
                                  lambda a=adapter: self.manager.channel_loop(a))
        self.supervisor.spawn("journals:sync", self._sync_loop)
        self.supervisor.spawn("cron", self.cron.run)
        self.background.start(self.supervisor)  # loops `heartbeat` and `ops`
        if self.dashboard is not None:
            await self.dashboard.start()
        self._write_daemon_info()
        self.ready = True
        log.info("SoulFlow %s ready in %s (provider: %s)", __version__, self.settings.workspace,
                 self.providers.default_name or "none configured")

    async def stop(self) -> None:
        self.ready = False
        grace = float(self.settings["SHUTDOWN_GRACE_S"])
        if self.dashboard is not None:
            await self.dashboard.stop()
        await self.supervisor.stop()
        await self.background.close()
        await self.task_services.stop()  # before the agent; nodes resume at the next start
        await self.manager.stop(grace)
        if self.consolidator is not None:
            await self.consolidator.stop()
        await self.bus.stop(grace)
        for adapter in self.channels:
            try:
                await adapter.stop()
            except Exception:
                log.exception("channel %s did not stop cleanly", adapter.name)
        await self.providers.aclose()
        await self.task_services.close()
        if self.local_model is not None:
            await self.local_model.stop()
        self._compact()
        self._sync_all()
        self.bus.close()
        self.sessions.close()
        if self.threads is not None:
            self.threads.close()
        (self.settings.runtime_dir / DAEMON_INFO_FILE).unlink(missing_ok=True)
        self._lock.release()
        self._uninstall_log_redaction()
        log.info("SoulFlow stopped")

    def _sync_all(self) -> None:
        """fsync every journal."""
        self.bus.sync()
        self.sessions.sync()
        if self.threads is not None:
            self.threads.sync()

    def _compact(self) -> None:
        """Rewrite journals that have grown (in the loop: they share in-memory state)."""
        self.bus.compact_if_needed()
        if self.threads is not None and self.threads.needs_compaction:
            self.threads.compact()

    async def _sync_loop(self) -> None:
        """fsync in a worker thread so the disk never stalls the event loop."""
        interval = self.settings.seconds_from_ms("JOURNAL_FSYNC_INTERVAL_MS")
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(self._sync_all)
            self._compact()

    def _write_daemon_info(self) -> None:
        info: dict[str, Any] = {"pid": os.getpid(), "version": __version__,
                                "started_at": self.started_at}
        if self.dashboard is not None:
            host = self.dashboard.host
            info["url"] = f"http://{'[' + host + ']' if ':' in host else host}:" \
                          f"{self.dashboard.bound_port}"
        write_json_atomic(self.settings.runtime_dir / DAEMON_INFO_FILE, info)

    async def run_until_signal(self) -> None:
        """Start, wait for SIGINT/SIGTERM, stop."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            await stop.wait()
            log.info("shutting down")
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await self.stop()

    # -- state ---------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """What is wrong right now: a supervised loop down, a channel failing, an unreadable
        task store. `state()["ok"]` is true only when the daemon is ready with none of them
        (the ops reading in `state()["ops"]` adds providers and how long problems last)."""
        found = [f"background loop {loop['name']} is down ({loop['last_error']})"
                 for loop in self.supervisor.status()
                 if not loop["running"] and loop["last_error"]]
        found += [f"channel {record.name} is failing: {record.last_error or 'no detail'}"
                  for record in self.manager.health if record.state is LinkState.FAILING]
        return found + list(self.tasks.problems)

    def state(self) -> dict[str, Any]:
        """The dashboard's view of the daemon; its only free text (recent messages) comes
        redacted from the event hub."""
        bus = self.bus
        problems = self.problems()
        return {
            "ok": self.ready and not problems,
            "problems": problems,
            "version": __version__,
            "pid": os.getpid(),
            "workspace": str(self.settings.workspace),
            "uptime_s": round(time.time() - self.started_at, 1) if self.started_at else 0.0,
            "provider": self.providers.default_name,
            "local_model": self.local_model.status() if self.local_model is not None else None,
            "queues": {
                "inbound_pending": bus.inbound.pending_count,
                "inbound_queued": self.manager.queued,
                "active_chats": self.manager.active_chats,
                "outbox_pending": len(bus.outbox),
                "outbound_queued": bus.dispatcher.queued,
                "dlq": len(bus.dlq),
                "inbound_dlq": len(bus.inbound_dlq),
            },
            "counters": {
                "received": self.manager.received_count,
                "answered": self.manager.answered_count,
                "max_turns": self.manager.max_turns_count,  # best-effort answers, apart
                "failed": self.manager.failed_count,
                "sent": bus.dispatcher.sent_count,
                "dead_lettered": bus.dispatcher.dead_count,
            },
            "channels": [{"name": a.name, "send_interval_s": a.send_interval_s,
                          **self.manager.health.get(a.name).to_dict()} for a in self.channels],
            "inbound_dlq": [e.to_dict() for e in bus.inbound_dlq.recent(10)],
            "sessions": [{"key": s.key, "size_bytes": s.size_bytes, "updated_at": s.updated_at}
                         for s in self.sessions.list_sessions()[:20]],
            "recent_messages": self.hub.recent({"inbound.received", "agent.reply"}, limit=30),
            "loops": self.supervisor.status(),
            "tasks": len(asyncio.all_tasks()),  # a leak shows as growth (bench --soak)
            "cron": {"jobs": len(self.cron.store), "fired": self.cron.fired_count},
            "task_graphs": self.task_services.state(),
            "sandbox": self.sandbox.status().as_dict(),
            **self.background.state(),  # "ops", "heartbeat"
        }


class FrontEnd(Protocol):
    """What the runtime needs from its HTTP front end: start, stop, and where it listens (the
    daemon info file tells the CLI the URL)."""

    host: str
    bound_port: int | None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def create_runtime(settings: Settings) -> Runtime:
    """Lock the workspace, make sure its default files exist, and build every service."""
    lock = WorkspaceLock(settings.runtime_dir / "daemon.lock")
    lock.acquire()
    try:
        ensure_workspace(settings.workspace)
        return Runtime(settings, lock)
    except BaseException:
        lock.release()
        raise


def read_daemon_info(settings: Settings) -> dict[str, Any] | None:
    """The running daemon's pid and URL, if one holds this workspace."""
    if not WorkspaceLock(settings.runtime_dir / "daemon.lock").is_locked_by_other():
        return None
    try:
        return json.loads((settings.runtime_dir / DAEMON_INFO_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
