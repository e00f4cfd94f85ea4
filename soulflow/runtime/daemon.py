"""`Runtime`: the services of one daemon in boot order (built by `wiring`), each started with
its stop registered on one exit stack, so they stop in reverse by construction;
`create_runtime()` takes the workspace lock first.

Build: the backend (files or Redis, from SOULFLOW_BACKEND; not connected yet), which builds
every store → MessageBus → DecisionService → EventHub → providers → channels → replies → cron
→ AgentDomain → task services → Conversation (given the task services and the chat commands)
→ heartbeat and ops → dashboard (built around the runtime by soulflow.cli.wiring). Each
service is given the parts it uses, never the runtime.

Start (`_boot`): the backend first (a Redis that cannot be used stops the boot with one
sentence), the trust-zones migration of the workspace (once; `zone_migration`), the embedded
model, the outbox, unfinished inbound work (the claim loop's first round), the task engine,
the heartbeat and ops, the inputs and housekeeping loops (channel readers, each handing what it
reads to the conversation; the claim loop; the backend's own loops, such as the file
journals' syncer; cron; the heap trim), the dashboard. Stop (SIGINT/SIGTERM): the stack
unwinds, letting answers and sends in flight finish within SHUTDOWN_GRACE_S, then flushing and
closing every store. A start that fails (the dashboard's port in use) unwinds what had started.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import datetime
from functools import partial
from typing import Any, Protocol

import soulflow.runtime.wiring as wiring
from soulflow import __version__, tracing
from soulflow.agent.approvals import ApproverPolicy
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.tools import CodeSandbox
from soulflow.agent.tools.mcp_client.service import McpParts, McpService
from soulflow.agent.tools.spawn import cancel_orphaned_subruns
from soulflow.backends.wiring import BackendConfig, build_backend
from soulflow.bus.bus import MessageBus
from soulflow.bus.traffic import TrafficCounters
from soulflow.channels.health import HealthBoard
from soulflow.channels.reader import run_channel
from soulflow.config import Settings, read_env_file
from soulflow.contracts import ApprovalRef, ChatRef, OutboundMessage, SendResult
from soulflow.conversation.access import AdminPolicy
from soulflow.conversation.replies import BusReplies
from soulflow.cron import CronService, Job, PayloadKind, cron_inbound_message
from soulflow.decision.service import DecisionService
from soulflow.events.hub import EventHub
from soulflow.ops.wiring import BackgroundParts, BackgroundServices
from soulflow.providers.local_runtime import LocalModelError
from soulflow.providers.wiring import build_providers, embedded_model
from soulflow.runtime.heap_trim import LOOP_NAME as TRIM_LOOP
from soulflow.runtime.heap_trim import HeapTrimmer
from soulflow.runtime.status import DaemonStatus, queue_depths
from soulflow.runtime.tool_bridge import ToolBridge
from soulflow.runtime.zone_migration import migrate_workspace
from soulflow.scaffold import ensure_workspace
from soulflow.security.redact import Redactor, install_log_redaction
from soulflow.security.zones import zone_for
from soulflow.storage.atomic import write_json_atomic
from soulflow.storage.beneath import Beneath
from soulflow.storage.lock import WorkspaceLock
from soulflow.supervisor import LoopFactory, Supervisor
from soulflow.tasks.wiring import TaskParts, TaskServices
from soulflow.telemetry import RUN_BUCKETS_S, Histogram

log = logging.getLogger(__name__)

DAEMON_INFO_FILE = "daemon.json"
LOCAL_MODEL_LOOP = "local-model"


class Runtime:
    """Every service of one daemon, wired together; owns their lifecycle."""

    def __init__(self, settings: Settings, lock: WorkspaceLock,
                 front_end: FrontEndFactory | None = None) -> None:
        self.settings = settings
        runtime_dir = settings.runtime_dir
        # traces: the environment's OTLP exporter, made at start (soulflow/tracing), unless
        # the program embedding the runtime sets a session first (tests: in-memory spans)
        self.traces: tracing.Session | None = None
        # what started, each with its stop; the workspace lock (taken by create_runtime) is
        # released last
        self._stack = AsyncExitStack()
        self._stack.callback(lock.release)
        # one redactor for every sink: logs, sessions, journals, events, model requests; it
        # knows the environment's and .env's credentials and learns every secret a tool opens
        self.redactor = Redactor.for_settings(settings)
        self.admins = AdminPolicy.from_settings(settings)
        self.hub = EventHub(redact=self.redactor.redact_obj)
        # messages per channel (totals, per-minute chart) and run durations, for the
        # dashboard and /metrics; the bus and the conversation publish through _publish_event
        self.traffic = TrafficCounters()
        self.run_durations = Histogram(RUN_BUCKETS_S)
        # every store (journals, outbox, DLQs, sessions, runs, approvals, cron, tasks,
        # decisions, the vault's entries): files under runtime/, or Redis; connected in
        # start() (built first: a missing or malformed REDIS_URL is its sentence)
        self.backend = build_backend(
            BackendConfig.from_settings(settings), runtime_dir, redact=self.redactor.redact,
            redact_strings=self.redactor.redact_strings,
            on_run_finished=lambda status, seconds, sub: self.run_durations.observe(seconds))
        # the key where SOULFLOW_MASTER_KEY_FILE says (this node's disk, also on Redis)
        self.vault = wiring.vault(settings, self.backend)
        self.bus = MessageBus(self.backend,
                              outbound_concurrency=settings["OUTBOUND_CONCURRENCY"],
                              policy=wiring.retry_policy(settings), on_event=self._publish_event)
        self.decisions = DecisionService(self.backend.decisions)
        self.sessions = self.backend.sessions
        # global memory (memory/); a chat's is `memory.for_zone(zone)`; every read and write
        # of workspace files opens beneath the workspace without following links
        self.memory = MemoryStore(Beneath(settings.workspace))
        self.local_model = embedded_model(settings)  # None unless wanted and installed
        self.providers = build_providers(settings, self.local_model)
        # the embedded model answers: fit its small window, keep its summaries out of memory/
        tiny_model = self.local_model is not None and self.providers.default_name == "phi4_local"
        self.context = ContextBuilder(
            settings.workspace, self.memory, self.decisions, self.sessions,
            history_messages=settings["AGENT_HISTORY_MESSAGES"],
            max_context_tokens=wiring.context_budget(settings, self.local_model, tiny_model))
        self.sandbox = CodeSandbox(settings)  # exec, python_repl, /repl; probed on first use
        self.tools = wiring.tool_registry(settings, self.redactor, self.sandbox,
                                          self.context.skills)
        self.channels, self.local = wiring.channel_registry(settings, runtime_dir,
                                                            self.hub.publish, self.backend)
        self.bus.bind_senders(self.channels.get)
        self.bus.dispatcher.sent_listeners.append(self._remember_approval_message)
        self.bus.dispatcher.outcome_listeners.append(self.traffic.send_outcome)
        # each channel's health: its reader (run_channel) records reads, the dispatcher sends
        self.health = HealthBoard(redact=self.redactor.redact)
        self.bus.dispatcher.outcome_listeners.append(self.health.send_outcome)
        self.read_policy = wiring.read_policy(settings)
        # every text the daemon writes to a chat, split for its platform and stored in order:
        # the conversation's replies, and the tools', tasks', heartbeat's and notices' texts
        self.replies = BusReplies(self.channels, self.bus, self._publish_event)
        self.cron = CronService(self.backend.cron, self._fire_cron,
                                may_fire=wiring.cron_fires_here(self.backend),
                                offload=self.backend.offload)
        # the agent's loop runs its tools through the bridge, and a tool's `spawn` starts a
        # sub-run on that loop: the bridge asks for it when a tool calls (built just below)
        self.tool_bridge = ToolBridge(
            workspace=settings.workspace, vault=self.vault, channels=self.channels,
            replies=self.replies, redact=self.redactor.redact, is_admin=self.admins.is_admin,
            cron=self.cron, main_loop=lambda: parts.loop)
        # every model call's tokens and cost, per day, chat, user and source (agent/usage.py)
        self.usage = wiring.usage_meter(settings, self.backend)
        self.budgets = wiring.budgets(settings, self.usage)
        parts = wiring.agent_parts(
            settings, self.providers, redactor=self.redactor, sessions=self.sessions,
            memory=self.memory, tools=self.tools, context=self.context,
            tool_context=self.tool_bridge.context, tiny_model=tiny_model, backend=self.backend,
            usage=self.usage, caps=self.budgets)
        self.runs, self.consolidator = parts.runs, parts.consolidator
        self.model, self._chain = parts.model, parts.chain  # redacting wrapper, failover chain
        self.approvals = self.backend.approvals
        self.agent = AgentDomain(self.context, self.sessions, parts.loop, self.approvals,
                                 on_turn_finished=self._after_turn,
                                 approvers=ApproverPolicy(self.admins.is_admin),
                                 redact=self.redactor.redact)
        self.supervisor = Supervisor()
        # the operator's MCP servers (mcp.json): stdio ones in the sandbox, each a supervised
        # loop; their tools join the registry while they run (docs/mcp.md)
        self.mcp = McpService(McpParts(
            workspace=settings.workspace, runtime_dir=runtime_dir, sandbox=self.sandbox,
            vault=self.vault, tools=self.tools, supervisor=self.supervisor,
            redactor=self.redactor))
        # task graphs (docs/tasks.md): store, workflow events, engine, the task tool; built
        # before the conversation, which they answer for: task answers and reactions in
        # chats, /stop cancelling a chat's tasks, /task
        self.task_services = TaskServices(TaskParts(
            settings=settings, backend=self.backend, agent=self.agent, runs=self.runs,
            model=self.model, system_prompt=self.context.system_prompt, tools=self.tools,
            tool_context=self.tool_bridge.context, channels=self.channels,
            replies=self.replies, bus=self.bus, redactor=self.redactor, hub=self.hub,
            supervisor=self.supervisor, usage=self.usage, budgets=self.budgets))
        self.tasks, self.workflow = self.task_services.store, self.task_services.workflow
        self.task_engine = self.task_services.engine  # the dashboard's cancel goes through it
        # from a message taken in to its turn complete: built with everything that answers
        self.conversation = wiring.conversation(
            settings, self.channels, self.bus, self.agent, vault=self.vault, admins=self.admins,
            on_event=self._publish_event, tasks=self.task_services, replies=self.replies,
            redact_growing=self.redactor.redact_growing,
            commands={**wiring.chat_commands(vault=self.vault, admins=self.admins,
                                             sandbox=self.sandbox, cron=self.cron),
                      "task": self.task_services.chat.command})
        # heartbeat, system_event cron jobs, ops (watchdog, health reading, notices)
        self.background = BackgroundServices(BackgroundParts(
            settings=settings, backend=self.backend, agent=self.agent, model=self.model,
            chain=self._chain, consolidates=self.consolidator is not None, memory=self.memory,
            decisions=self.decisions, sessions=self.sessions,
            max_context_tokens=self.context.max_context_tokens, redact=self.redactor.redact,
            channels=self.channels, health=self.health, supervisor=self.supervisor,
            runs=self.conversation.runs, replies=self.replies,
            queues=partial(queue_depths, self.bus, self.conversation),
            providers=self.providers, local_model=self.local_model, usage=self.usage))
        # a cron or heartbeat run skipped at a budget cap is told to the ops notice chat
        self.budgets.notify = self.background.notify_operator
        self._status = DaemonStatus(
            workspace=settings.workspace, backend=self.backend, supervisor=self.supervisor,
            health=self.health, vault=self.vault, bus=self.bus, conversation=self.conversation,
            channels=self.channels, sessions=self.sessions, hub=self.hub,
            providers=self.providers, local_model=self.local_model, cron=self.cron,
            tasks=self.task_services, sandbox=self.sandbox, background=self.background,
            mcp=self.mcp,
            usage=self.usage)
        self.started_at = 0.0
        self._chats_moved = asyncio.Event()  # set when this node's partitions change
        self.ready = False
        # the HTTP front end (the dashboard), last: it is built around the runtime (by the
        # factory soulflow.cli.wiring passes), so the runtime never imports the layer above it;
        # started last, stopped first
        self.dashboard: FrontEnd | None = front_end(self) if front_end is not None else None

    def _publish_event(self, kind: str, data: dict[str, Any]) -> None:
        """The live-event sink of the bus and the channels: counted, then published."""
        self.traffic.observe(kind, data)
        self.hub.publish(kind, data)

    def _after_turn(self, session_key: str, chat: ChatRef) -> None:
        """After each recorded answer: fold old turns into the chat zone's memory in the
        background (chats/<zone>/memory/, never global memory/)."""
        if self.consolidator is not None:
            self.consolidator.schedule(session_key, zone_for(chat))

    async def _fire_cron(self, job: Job, scheduled: datetime) -> None:
        """A due cron job becomes an ordinary inbound message (journaled, deduplicated)."""
        if self.channels.get(job.chat.provider) is None:
            raise RuntimeError(f"channel {job.chat.provider!r} is not configured")
        if job.kind is PayloadKind.SYSTEM_EVENT:  # quiet: posts only if not HEARTBEAT_OK
            self.background.fire_event(job, scheduled)
            return
        if not await self.conversation.inject(cron_inbound_message(job, scheduled)):
            log.info("cron job %s for %s was already delivered; not sending it again", job.id,
                     scheduled.isoformat())

    def _remember_approval_message(self, message: OutboundMessage, result: SendResult) -> None:
        """Which platform message announced an approval, for reactions. A store that fails
        here (Redis away) only means a reaction to that prompt is not recognised; a text
        reply still decides it, so the sent message's bookkeeping must not fail with it."""
        approval = message.announces
        if isinstance(approval, ApprovalRef) and result.platform_message_ids:
            try:
                self.approvals.remember(message.chat_key, result.platform_message_ids,
                                        approval.run_id, approval.approval_id)
            except Exception as exc:
                log.warning("approval %s: its prompt was sent but not remembered for "
                            "reactions (%s: %s)", approval.approval_id, type(exc).__name__, exc)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start every service in boot order (`_boot`). A start that fails unwinds what had
        started, in reverse, releases the workspace lock and raises its error."""
        try:
            await self._boot(self._stack)
        except BaseException:
            try:
                await self._stack.aclose()
            except Exception:  # the start's own error is the one to report
                log.exception("stopping what had started after a failed start failed")
            raise

    async def _boot(self, stack: AsyncExitStack) -> None:
        """The boot order (ARCHITECTURE.md, "Boot order"). Each step registers its stop on
        `stack` before it starts (every stop is safe after a failed or missing start), so a
        failed start unwinds exactly what began, and shutdown is this method read from the
        bottom up."""
        settings = self.settings
        grace = float(settings["SHUTDOWN_GRACE_S"])  # for answers and sends in flight
        self.started_at = time.time()
        stack.callback(install_log_redaction(self.redactor))  # returns its uninstall
        # traces (OTEL_EXPORTER_OTLP_ENDPOINT set): first, so every task started below
        # inherits the tracer; flushed and shut down last, after every span has ended
        traces = self.traces or tracing.start(os.environ, __version__)
        _warn_of_otel_in_env_file(settings)
        tracing.use(traces.tracer if traces is not None else None)  # not an earlier runtime's
        if traces is not None:
            stack.push_async_callback(traces.stop)
            log.info("tracing to %s", tracing.endpoint_host(os.environ))
        # written last (it carries the dashboard's URL), removed once every store is closed
        stack.callback((settings.runtime_dir / DAEMON_INFO_FILE).unlink, missing_ok=True)
        stack.callback(self.sandbox.quotas.close)  # the chat folders' usage index
        # every store flushed and closed (files), or the partitions handed back (Redis)
        stack.push_async_callback(self.backend.stop)
        await self.backend.start()  # before anything reads state
        # no supervised loop outlives the stores: each service stops its own, this is a net
        stack.push_async_callback(self.supervisor.stop)
        # once per workspace, before any service: shared notes and facts out of global
        # memory, attachments into their chats' folders (soulflow/runtime/zone_migration.py)
        await asyncio.to_thread(migrate_workspace, self.memory.beneath, self.sessions)
        self.backend.on_partitions_changed(self._partitions_changed)
        await self.sandbox.ready()  # probe bwrap once, off the loop, before any tool asks
        # MCP servers come up in the background: a slow or broken one delays nothing
        stack.push_async_callback(self.mcp.stop)
        await self.mcp.start()
        if self.local_model is not None:  # first: resumed work needs the model
            stack.push_async_callback(self._stop_local_model)
            await self._start_local_model()
        stack.push_async_callback(self.providers.close)
        # the adapters stop after the bus that sends through them; each is connected by its
        # reader (run_channel, below)
        stack.push_async_callback(self._stop_channels)
        if self.agent.loop is not None:
            orphans = await cancel_orphaned_subruns(self.agent.loop, self.backend.owns)
            if orphans:
                log.info("cancelled %d sub-agent run(s) interrupted by the last stop", orphans)
        stack.push_async_callback(self.bus.stop, grace)
        await self.bus.start()  # the outbox this node must send, and the counts
        if self.consolidator is not None:
            stack.push_async_callback(self.consolidator.stop)
        stack.callback(self._channels_stopped)
        stack.push_async_callback(self.conversation.stop, grace)
        await self.conversation.resume_pending()  # the claim loop's first round
        await self.background.cancel_interrupted()  # before resume_runs answers them late
        await self.conversation.resume_runs()
        stack.push_async_callback(self.task_services.stop)  # nodes resume at the next start
        await self.task_services.start()  # after the agent: task nodes are agent runs
        stack.push_async_callback(self.background.stop)
        self.background.start()  # loops `heartbeat` and `ops`
        self._spawn_loops(stack, self._input_loops())
        if self.dashboard is not None:
            stack.push_async_callback(self.dashboard.stop)
            await self.dashboard.start()
        self._write_daemon_info()
        self.ready = True
        log.info("SoulFlow %s ready in %s (provider: %s)", __version__, settings.workspace,
                 self.providers.default_name or "none configured")

    async def stop(self) -> None:
        """Unwind what started, in reverse (`_boot` read from the bottom up); then release
        the workspace lock. Safe without a start, after a failed one, and twice."""
        self.ready = False
        try:
            await self._stack.aclose()
        finally:
            log.info("SoulFlow stopped")

    def _input_loops(self) -> dict[str, LoopFactory]:
        """The loops that take work in and keep the books, by name: one reader per channel
        (connect and read, with backoff, health and restarts), the claim loop, the takeover of
        chats moved to this node (Redis), the bus's counts, the backend's own loops (the file
        journals' syncer), cron."""
        loops: dict[str, LoopFactory] = {
            f"channel:{adapter.name}": partial(run_channel, adapter, self.conversation.ingest,
                                               self.health, self.read_policy)
            for adapter in self.channels}
        loops["inbound:claim"] = self.conversation.claim_loop
        if self.backend.shared:  # chats come to this node while it runs
            loops["agent:takeover"] = self._takeover_loop
        loops["bus:stats"] = self.bus.stats_loop
        loops.update(self.backend.loops())
        loops["cron"] = self.cron.run
        if (trimmer := HeapTrimmer.for_this_system()) is not None:  # glibc only
            loops[TRIM_LOOP] = trimmer.run  # RSS back down after a backlog drains
        return loops

    def _spawn_loops(self, stack: AsyncExitStack, loops: dict[str, LoopFactory]) -> None:
        """Run `loops` on the supervisor; on the way back they are cancelled together."""
        stack.push_async_callback(self.supervisor.cancel, list(loops))
        for name, factory in loops.items():
            self.supervisor.spawn(name, factory)

    async def _start_local_model(self) -> None:
        assert self.local_model is not None
        try:
            await self.local_model.start()
        except LocalModelError as exc:
            log.error("the embedded model did not start; retrying in the background: %s", exc)
        self.supervisor.spawn(LOCAL_MODEL_LOOP, self.local_model.run_supervisor)

    async def _stop_local_model(self) -> None:
        """Its watcher first, or it would start the model again."""
        assert self.local_model is not None
        await self.supervisor.cancel([LOCAL_MODEL_LOOP])
        await self.local_model.stop()

    def _channels_stopped(self) -> None:
        for adapter in self.channels:
            self.health.stopped(adapter.name)

    async def _stop_channels(self) -> None:
        for adapter in self.channels:
            try:
                await adapter.stop()
            except Exception:
                log.exception("channel %s did not stop cleanly", adapter.name)

    def _partitions_changed(self) -> None:
        """Chats moved to or from this node (Redis): send the replies it now holds. Their
        inbound messages come through the claim loop, which takes over a partition's
        unfinished entries when it acquires it; the runs they left running are resumed by
        the "agent:takeover" loop."""
        self.bus.dispatcher.requeue_pending()
        self._chats_moved.set()

    async def _takeover_loop(self) -> None:
        """With several daemons: when this node comes to hold chats another node held (it
        died, or let them go), resume the runs it left running there, as at boot (the
        interrupted-tool rules; each run once, never one another node still drives)."""
        while True:
            await self._chats_moved.wait()
            self._chats_moved.clear()
            try:
                resumed = await self.conversation.resume_runs()
            except Exception as exc:  # Redis lost: the next change (it is back) tries again
                log.warning("resuming the runs of chats taken over failed (%s: %s)",
                            type(exc).__name__, exc)
                continue
            if resumed:
                log.info("resumed %d run(s) left running in chats taken over", resumed)

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

    # -- state (soulflow/runtime/status.py) ---------------------------------------------

    def problems(self) -> list[str]:
        """What is wrong right now; `state()["ok"]` is true only when ready with none."""
        return self._status.problems()

    def queue_depths(self) -> dict[str, int]:
        """Work waiting in the bus and the conversation (the dashboard's and the ops
        reading's)."""
        return self._status.queue_depths()

    async def state(self) -> dict[str, Any]:
        """The dashboard's view of the daemon (`/api/state`)."""
        return await self._status.state(ready=self.ready, started_at=self.started_at)


class FrontEnd(Protocol):
    """What the runtime needs from its HTTP front end: start, stop, and where it listens (the
    daemon info file tells the CLI the URL)."""

    host: str
    bound_port: int | None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


FrontEndFactory = Callable[[Runtime], FrontEnd]
"""Builds the HTTP front end around the runtime, at the end of its construction."""


def _warn_of_otel_in_env_file(settings: Settings) -> None:
    """OpenTelemetry reads its `OTEL_*` variables from the process environment only: say
    so when `.env` holds some, instead of leaving the operator without traces, unexplained."""
    ignored = sorted(name for name in read_env_file(settings.workspace)
                     if name.startswith("OTEL_") and name not in os.environ)
    if ignored:
        log.warning("%s in .env %s not read: OpenTelemetry takes its settings from the "
                    "process environment (docs/operations.md, \"Traces\")",
                    ", ".join(ignored), "is" if len(ignored) == 1 else "are")


def create_runtime(settings: Settings, front_end: FrontEndFactory | None = None) -> Runtime:
    """Lock the workspace, make sure its default files exist, and build every service (and
    the front end, when a factory for it is given)."""
    lock = WorkspaceLock(settings.runtime_dir / "daemon.lock")
    lock.acquire()
    try:
        ensure_workspace(settings.workspace)
        return Runtime(settings, lock, front_end)
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
