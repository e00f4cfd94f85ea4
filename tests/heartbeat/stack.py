"""A real agent stack for heartbeat tests: sessions, memory, context, the event-thread loop and
an OpenAI-compatible provider pointed at the loopback fake model. What the runner posts is
collected in `Stack.posted` (the chat side; the channel pipeline is tested elsewhere)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soulflow.agent.consolidate import ConsolidationPolicy, Consolidator
from soulflow.agent.context import ContextBuilder
from soulflow.agent.domain import AgentDomain
from soulflow.agent.memory import MemoryStore
from soulflow.agent.run.loop import AgentLoop
from soulflow.agent.tools.base import ChatRef, ToolContext
from soulflow.agent.tools.registry import ToolRegistry
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.contracts import Announcement
from soulflow.decision.service import DecisionService
from soulflow.heartbeat.turns import QuietTurnRunner
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.storage.beneath import Beneath


@dataclass
class Stack:
    workspace: Path
    sessions: FileSessionStore
    memory: MemoryStore
    agent: AgentDomain
    runner: QuietTurnRunner
    consolidator: Consolidator | None
    provider: OpenAICompatibleProvider
    posted: list[tuple[ChatRef, str, Announcement | None]] = field(default_factory=list)

    async def close(self) -> None:
        if self.consolidator is not None:
            await self.consolidator.stop()
        await self.runner.stop()
        await self.provider.close()
        self.sessions.close()
        if self.agent.loop is not None:
            self.agent.loop.store.close()


def build_stack(workspace: Path, base_url: str, *, history: int = 6,
                consolidate_after: int = 0, tools: ToolRegistry | None = None) -> Stack:
    workspace.mkdir(parents=True, exist_ok=True)
    runtime = workspace / "runtime"
    sessions = FileSessionStore(runtime / "sessions")
    memory = MemoryStore(Beneath(workspace))
    decisions = DecisionService(FileDecisionStore(runtime / "decisions" / "index.json"))
    provider = OpenAICompatibleProvider(OpenAICompatibleConfig(
        name="phi4_local", base_url=base_url, model="fake-model", max_retries=0))
    registry = tools or ToolRegistry()

    def tool_context(state: Any, approved: bool) -> ToolContext:
        chat = state.chat
        return ToolContext(workspace, ChatRef(chat.provider, chat.chat_id),
                           approved=approved)

    context = ContextBuilder(workspace, memory, decisions, sessions, history_messages=20)
    # the daemon's prompt: global context plus the run's chat zone (the heartbeat's own)
    loop = AgentLoop(FileRunJournal(runtime / "threads"), lambda: provider, registry,
                     context.system_prompt, tool_context)
    agent = AgentDomain(context, sessions, loop)
    consolidator = None
    if consolidate_after:
        consolidator = Consolidator(sessions, memory, lambda: provider, ConsolidationPolicy(
            threshold_messages=consolidate_after, keep_last=history))
    quiet_context = ContextBuilder(workspace, memory, decisions, sessions,
                                   history_messages=history)
    posted: list[tuple[ChatRef, str, Announcement | None]] = []
    runner = QuietTurnRunner(agent, quiet_context,
                             lambda chat, text, about: posted.append((chat, text, about)),
                             consolidator=consolidator)
    return Stack(workspace, sessions, memory, agent, runner, consolidator, provider, posted)
