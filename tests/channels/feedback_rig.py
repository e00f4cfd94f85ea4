"""A Conversation around one real platform adapter, with an instant model.

For the feedback tests: messages go from the platform fake through the real SDK and the real
inbound pipeline (journal, per-chat executor, agent loop) and replies back through the real
outbound dispatcher, so the typing calls and read-acks the fake counts are the ones a burst
really produces. Only the model is local: it answers at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soulflow.agent.tools.base import ChatRef
from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.registry import ChannelRegistry
from soulflow.contracts import ProviderResult
from soulflow.conversation.access import AccessPolicy
from soulflow.conversation.feedback import FeedbackPolicy
from soulflow.conversation.turns import Conversation
from tests.agent.domain_rig import agent_domain


class InstantModel:
    """Answers every turn at once, so a burst is limited only by SoulFlow itself."""

    name = "instant"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, *,
                   on_stream: Any = None, abort: asyncio.Event | None = None) -> ProviderResult:
        return ProviderResult(content="ok")

    async def close(self) -> None:
        return None


@dataclass
class Rig:
    conversation: Conversation
    bus: MessageBus

    def answered(self) -> int:
        return self.conversation.answered_count


@contextlib.asynccontextmanager
async def manager_rig(tmp_path: Path, adapter: ChannelAdapter, *, fold_max: int = 1,
                      feedback: FeedbackPolicy | None = None) -> AsyncIterator[Rig]:
    """The adapter must be started; its messages are read and ingested until the block ends."""
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    registry = ChannelRegistry()
    registry.register(adapter)
    bus.bind_senders(registry.get)
    agent = agent_domain(tmp_path, InstantModel(), ChatRef(adapter.name, "c"))
    conversation = Conversation(registry, bus, agent,
                             access=AccessPolicy.from_lists({adapter.name: ["*"]}),
                             workspace=tmp_path, fold_max=fold_max,
                             feedback=feedback)
    await bus.start()

    async def pump() -> None:
        while True:
            batch = await adapter.read()
            if batch:
                await conversation.ingest(adapter, batch)

    reader = asyncio.create_task(pump(), name=f"test-reader:{adapter.name}")
    claiming = asyncio.create_task(conversation.claim_loop(), name="inbound:claim")
    try:
        yield Rig(conversation, bus)
    finally:
        for task in (reader, claiming):
            task.cancel()
        await asyncio.gather(reader, claiming, return_exceptions=True)
        await conversation.stop(2.0)
        await bus.stop(2.0)
        await bus.backend.stop()


async def answer_through_cooldown(tmp_path: Path, adapter: ChannelAdapter,
                                  policy: FeedbackPolicy, *, say: Callable[[str], None],
                                  replies: Callable[[], int], refused: int) -> Rig:
    """The 429 scenario of every platform: the first message is answered while `refused`
    feedback calls (the test failed them with a 60 s retry_after) are refused; five more
    messages, sent inside the cool-down, are all answered well within the 60 s."""
    async with manager_rig(tmp_path, adapter, feedback=policy) as rig:
        say("first")
        await until(lambda: replies() >= 1)
        await until(lambda: rig.conversation.feedback.stats.rate_limited >= refused)
        for i in range(5):
            say(f"more {i}")
        await until(lambda: replies() >= 6, timeout=10.0)
    return rig


async def until(predicate: Any, timeout: float = 20.0) -> None:
    """Wait for a condition of the rig (replies counted by the conversation) with a deadline."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
