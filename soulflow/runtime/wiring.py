"""Settings turned into the parts of a daemon, one function per part.

`Runtime.__init__` calls these in boot order and keeps the results; nothing here starts
anything or holds state of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from soulflow.agent.budget import Budgets
from soulflow.agent.consolidate import ConsolidationPolicy, Consolidator
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run.loop import AgentLoop, ContextFactory
from soulflow.agent.skills import SkillIndex
from soulflow.agent.tools import CodeSandbox, build_default_registry
from soulflow.agent.tools.cron_tool import CronTool
from soulflow.agent.tools.diagram_tool import DiagramRenderTool
from soulflow.agent.tools.messaging import MessageTool, RequestFileTool
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.agent.tools.skill_tool import SkillTool
from soulflow.agent.tools.spawn import SpawnTool
from soulflow.agent.usage import UsageMeter, parse_prices
from soulflow.backends.base import Backend, RunJournal, SessionStore
from soulflow.backends.leader import LeaderElection
from soulflow.bus.bus import MessageBus
from soulflow.bus.retry import RetryPolicy
from soulflow.channels.local.adapter import LocalChannel
from soulflow.channels.reader import ReadPolicy
from soulflow.channels.registry import ChannelRegistry
from soulflow.channels.wiring import build_platform_channels
from soulflow.config import ConfigError, Settings, id_list
from soulflow.contracts import EventSink, Provider
from soulflow.conversation.access import AdminPolicy, access_policy
from soulflow.conversation.capability_commands import (
    make_cron_command,
    make_repl_command,
    render_command,
)
from soulflow.conversation.chat_tasks import ChatTasks
from soulflow.conversation.commands import CommandHandler
from soulflow.conversation.feedback import FeedbackPolicy
from soulflow.conversation.replies import BusReplies
from soulflow.conversation.secret_command import make_secret_command
from soulflow.conversation.streaming import ReplyStreams, StreamSettings
from soulflow.conversation.turns import Conversation
from soulflow.cron import CronService, Job, PayloadKind
from soulflow.errors import StoreError
from soulflow.providers.local_runtime import LocalModelRuntime
from soulflow.providers.registry import ProviderRegistry
from soulflow.providers.wiring import failover_order
from soulflow.security.inbound import InboundSealer
from soulflow.security.protected import open_vault
from soulflow.security.redact import Redactor
from soulflow.security.redacting_provider import RedactingProvider
from soulflow.security.vault import SecretVault


def retry_policy(settings: Settings) -> RetryPolicy:
    base_s = settings.seconds_from_ms("OUTBOUND_RETRY_BASE_MS")
    return RetryPolicy(max_attempts=settings["OUTBOUND_MAX_ATTEMPTS"],
                       inline_retries=settings["OUTBOUND_INLINE_RETRIES"], base_delay_s=base_s,
                       max_delay_s=settings.seconds_from_ms("OUTBOUND_RETRY_MAX_MS"),
                       inline_delay_s=min(0.2, base_s))


def context_budget(settings: Settings, local_model: LocalModelRuntime | None,
                   tiny_model: bool) -> int:
    """The prompt's token budget; the embedded model's small window caps it (a quarter of the
    window is left for the answer)."""
    budget = int(settings["AGENT_MAX_CONTEXT_TOKENS"])
    if local_model is not None and tiny_model:
        window = local_model.config.n_ctx * 3 // 4
        budget = min(budget, window) if budget else window
    return budget


def tool_registry(settings: Settings, redactor: Redactor, sandbox: CodeSandbox,
                  skills: SkillIndex) -> ToolRegistry:
    tools = build_default_registry(
        redactor=redactor, sandbox=sandbox,
        allow_private_fetch=settings.flag("WEB_FETCH_ALLOW_PRIVATE"),
        allowed_hosts=frozenset(id_list(settings["WEB_FETCH_ALLOWED_HOSTS"])))
    for tool in (MessageTool(), RequestFileTool(), SpawnTool(), CronTool(),
                 DiagramRenderTool(sandbox.quotas), SkillTool(skills)):
        tools.register(tool)
    return tools


def vault(settings: Settings, backend: Backend) -> SecretVault:
    """The vault with the key from this node's disk (`SOULFLOW_MASTER_KEY_FILE`) and its sealed
    entries in the backend's store (the key never goes there). Opening it already reads the
    entries (on Redis: is this node's key the one they are sealed with?), before the backend's
    own check: a store that does not answer is the same one sentence (`BackendUnavailable`)."""
    try:
        return open_vault(settings, backend.secrets, backend.offload)
    except StoreError as exc:
        raise backend.unavailable(exc) from None


def cron_fires_here(backend: Backend) -> Callable[[Job], bool]:
    """CronService's `may_fire`: a `system_event` job runs a quiet turn on the node that fires
    it, so only the node holding its chat fires it (where all of that chat's work runs); an
    `agent_turn` job becomes an inbound message, answered by the chat's holder wherever it
    fired. Always True on the file backend (every chat is this node's)."""
    def fires_here(job: Job) -> bool:
        return job.kind is not PayloadKind.SYSTEM_EVENT or backend.owns(job.chat.key)
    return fires_here


def channel_registry(settings: Settings, runtime_dir: Path,
                     on_local_event: Callable[[str, dict[str, Any]], None],
                     backend: Backend | None = None) -> tuple[ChannelRegistry, LocalChannel]:
    """The local channel (always) and every platform whose credentials are set. On a shared
    backend (redis) each platform account is read by one node at a time: the node holding the
    lease `account:<name>`; the local channel is this node's own (its chats carry the node
    id, which pins them to the node's private partition)."""
    channels = ChannelRegistry()
    shared = backend is not None and backend.shared
    local = LocalChannel(runtime_dir / "local",
                         send_interval_s=settings.seconds_from_ms("LOCAL_SEND_INTERVAL_MS"),
                         on_event=on_local_event,
                         node_id=backend.node_id if shared and backend is not None else None)
    channels.register(local)
    for adapter in build_platform_channels(settings, runtime_dir):
        if shared:
            assert backend is not None
            adapter.share_account(LeaderElection(
                backend.leases, f"account:{adapter.name}", backend.node_id,
                ttl_s=float(settings["REDIS_LEASE_TTL_S"])), backend.cursors)
        channels.register(adapter)
    return channels, local


def read_policy(settings: Settings) -> ReadPolicy:
    """When a channel's reader gives up on its connection and starts over."""
    return ReadPolicy(stall_after_s=float(settings["CHANNEL_STALL_TIMEOUT_S"]),
                      restart_after=settings["CHANNEL_RESTART_AFTER_FAILURES"])


def chat_commands(*, vault: SecretVault, admins: AdminPolicy, sandbox: CodeSandbox,
                  cron: CronService) -> dict[str, CommandHandler]:
    """The chat commands backed by daemon services (/secret, /repl, /render, /cron)."""
    return {"secret": make_secret_command(vault, admins), "repl": make_repl_command(sandbox),
            "render": render_command, "cron": make_cron_command(cron)}


def conversation(settings: Settings, channels: ChannelRegistry, bus: MessageBus,
                 agent: AgentDomain, *, vault: SecretVault, admins: AdminPolicy,
                 on_event: EventSink, tasks: ChatTasks, replies: BusReplies,
                 commands: Mapping[str, CommandHandler],
                 redact_growing: Callable[[str], str]) -> Conversation:
    grouping = settings.flag("CHANNEL_GROUPING_ENABLED")
    # a streamed answer's edits keep the pace the outbox dispatcher keeps for the chat
    streams = ReplyStreams(StreamSettings(settings.flag("STREAM_REPLIES"),
                                          float(settings["STREAM_EDIT_INTERVAL_S"])),
                           bus.dispatcher.pacer, redact_growing)
    return Conversation(
        channels, bus, agent, access=access_policy(settings),
        workspace=settings.workspace, tasks=tasks, commands=commands,
        concurrency=settings["AGENT_CONCURRENCY"],
        grouping_window_s=(settings.seconds_from_ms("CHANNEL_GROUPING_WINDOW_MS")
                           if grouping else None),
        grouping_max=settings["CHANNEL_GROUPING_MAX"],
        max_inbound_chars=settings["MAX_INBOUND_CHARS"],
        sealer=InboundSealer(vault, admins.is_admin),
        on_event=on_event, fold_max=settings["CHANNEL_FOLD_MAX"],
        feedback=FeedbackPolicy(
            typing_refresh_s=float(settings["CHANNEL_TYPING_REFRESH_S"]),
            read_ack_interval_s=float(settings["CHANNEL_READ_ACK_INTERVAL_S"]),
            read_ack_backlog=settings["CHANNEL_READ_ACK_BACKLOG"]),
        # a claim waits for new work well under the Redis socket timeout (half a lease TTL,
        # at least 1 s), or a quiet wait would end in a timeout error instead of "nothing"
        claim_wait_s=min(1.0, float(settings["REDIS_LEASE_TTL_S"]) / 4), replies=replies,
        streams=streams)


@dataclass(slots=True)
class AgentParts:
    """The agent loop and what hangs off the model: all None without a provider."""

    loop: AgentLoop | None = None
    runs: RunJournal | None = None
    model: Provider | None = None  # the redacting wrapper around the failover chain
    chain: Provider | None = None
    consolidator: Consolidator | None = None


def usage_meter(settings: Settings, backend: Backend) -> UsageMeter:
    """The meter every model call is counted with: MODEL_PRICES, days in WORKSPACE_TIMEZONE."""
    return UsageMeter(backend.usage, parse_prices(settings["MODEL_PRICES"]),
                      ZoneInfo(settings["WORKSPACE_TIMEZONE"]))


def budgets(settings: Settings, meter: UsageMeter) -> Budgets:
    """The daily caps (BUDGET_*_DAILY_USD) over the meter's store; `notify` is set once the
    operator's notice chat exists (ops)."""
    return Budgets(meter, daily_usd=settings["BUDGET_DAILY_USD"],
                   user_daily_usd=settings["BUDGET_USER_DAILY_USD"],
                   chat_daily_usd=settings["BUDGET_CHAT_DAILY_USD"])


def agent_parts(settings: Settings, providers: ProviderRegistry, *, redactor: Redactor,
                sessions: SessionStore, memory: MemoryStore, tools: ToolRegistry,
                context: ContextBuilder, tool_context: ContextFactory, tiny_model: bool,
                backend: Backend, usage: UsageMeter | None = None,
                caps: Budgets | None = None) -> AgentParts:
    """The loop on the failover chain (PROVIDER_FALLBACKS), model calls redacted, memory
    consolidation unless the embedded model answers (its summaries stay out of memory/); its
    runs in the backend's journal, the chats it drives held by this node (a rebalance never
    takes a run over mid-step: it moves once the run finishes or waits, or this node dies)."""
    if not providers.names():
        return AgentParts()
    order = failover_order(settings) or []
    missing = [name for name in order if name not in providers.names()]
    if missing:
        raise ConfigError(f"PROVIDER_FALLBACKS names {', '.join(missing)}, which "
                          "is not configured (see docs/config.md for its settings)")
    chain = providers.chain(order or None)
    model = RedactingProvider(chain, redactor)
    consolidator = None
    threshold = int(settings["MEMORY_CONSOLIDATION_THRESHOLD"])
    if threshold and not tiny_model:
        policy = ConsolidationPolicy(threshold_messages=threshold,
                                     keep_last=int(settings["MEMORY_CONSOLIDATION_KEEP_LAST"]))
        consolidator = Consolidator(sessions, memory, lambda: model, policy, usage=usage)
    runs = backend.runs
    loop = AgentLoop(runs, lambda: model, tools, context.system_prompt, tool_context,
                     max_turns=settings["AGENT_MAX_TURNS"], usage=usage, budgets=caps)
    backend.hold_chats(lambda: list(loop.driving.values()))
    return AgentParts(loop, runs, model, chain, consolidator)
