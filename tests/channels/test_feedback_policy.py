"""ChannelFeedback's decisions with an injected clock: which feedback calls are made.

The adapter here is a recorder (no platform is involved: what a platform does with these calls
is covered per platform in test_*_feedback.py); the clock is a variable, so rate limits and
cool-downs are checked without waiting.
"""

from __future__ import annotations

import asyncio

from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import InboundMessage, OutboundMessage, SendError, SendResult
from soulflow.conversation.feedback import ChannelFeedback, FeedbackPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder(ChannelAdapter):
    """Records best-effort calls; `fail_with` makes the next ones raise."""

    name = "telegram"

    def __init__(self) -> None:
        self.reactions: list[tuple[str, str]] = []
        self.typing: list[tuple[str, bool]] = []
        self.fail_with: SendError | None = None
        self.gate: asyncio.Event | None = None

    async def read(self) -> list[InboundMessage]:
        return []

    async def send(self, message: OutboundMessage) -> SendResult:
        return SendResult()

    async def _maybe_fail(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        self.reactions.append((chat_id, message_id))
        await self._maybe_fail()

    async def set_typing(self, chat_id: str, on: bool) -> None:
        self.typing.append((chat_id, on))
        await self._maybe_fail()


async def settle(feedback: ChannelFeedback) -> None:
    async with asyncio.timeout(5):
        while feedback.in_flight:
            await asyncio.sleep(0)


async def test_read_acks_are_rate_limited_per_chat_and_skipped_for_a_backlog() -> None:
    clock, adapter = Clock(), Recorder()
    feedback = ChannelFeedback(FeedbackPolicy(read_ack_interval_s=5.0, read_ack_backlog=2),
                               clock=clock)
    assert feedback.acknowledge(adapter, "a", "1")
    assert not feedback.acknowledge(adapter, "a", "2")  # within 5 s
    assert feedback.acknowledge(adapter, "b", "1")  # another chat has its own budget
    clock.now += 5.0
    assert not feedback.acknowledge(adapter, "a", "3", backlog=3)  # a burst waits
    assert feedback.acknowledge(adapter, "a", "4", backlog=2)
    await settle(feedback)
    assert adapter.reactions == [("a", "1"), ("b", "1"), ("a", "4")]
    assert feedback.stats.skipped_interval == 1 and feedback.stats.skipped_backlog == 1
    await feedback.stop()


async def test_a_rate_limit_cools_down_the_chat_then_the_adapter() -> None:
    clock, adapter = Clock(), Recorder()
    feedback = ChannelFeedback(FeedbackPolicy(read_ack_interval_s=0.0), clock=clock)
    adapter.fail_with = SendError("slow down", retry_after=30.0)
    assert feedback.acknowledge(adapter, "a", "1")
    await settle(feedback)
    assert not feedback.acknowledge(adapter, "a", "2")  # chat a cools down 30 s
    assert feedback.acknowledge(adapter, "b", "1")  # b is still fine ...
    await settle(feedback)  # ... until it is rate-limited too: the bot's budget is spent
    assert not feedback.acknowledge(adapter, "c", "1")
    clock.now += 30.0
    adapter.fail_with = None
    assert feedback.acknowledge(adapter, "c", "2")
    await settle(feedback)
    assert [r[0] for r in adapter.reactions] == ["a", "b", "c"]
    assert feedback.stats.rate_limited == 2 and feedback.stats.skipped_cooldown == 2
    await feedback.stop()


async def test_calls_beyond_the_budget_are_skipped_not_queued() -> None:
    clock, adapter = Clock(), Recorder()
    adapter.gate = asyncio.Event()  # the platform hangs
    feedback = ChannelFeedback(FeedbackPolicy(read_ack_interval_s=0.0, max_in_flight=2),
                               clock=clock)
    started = [feedback.acknowledge(adapter, f"chat{i}", "1") for i in range(5)]
    assert started == [True, True, False, False, False]
    assert feedback.stats.skipped_budget == 3
    adapter.gate.set()
    await settle(feedback)
    assert feedback.acknowledge(adapter, "chat9", "1")
    await feedback.stop()


async def test_one_typing_indicator_serves_every_turn_of_a_chat() -> None:
    clock, adapter = Clock(), Recorder()
    feedback = ChannelFeedback(FeedbackPolicy(typing_refresh_s=4.0), clock=clock)
    for _ in range(20):  # 20 quick turns in a row, 0.1 s apart on the clock
        async with feedback.typing_while(adapter, "a"):
            await asyncio.sleep(0)
        clock.now += 0.1
    async with feedback.typing_while(adapter, "b"):
        pass
    clock.now += 2.0  # 4 s after the first: due again
    async with feedback.typing_while(adapter, "a"):
        pass
    await settle(feedback)
    on = [chat for chat, state in adapter.typing if state]
    assert on == ["a", "b", "a"]
    await feedback.stop()


async def test_leaving_never_waits_for_a_hung_platform_and_close_stops_everything() -> None:
    adapter = Recorder()
    adapter.gate = asyncio.Event()  # typing calls never return
    feedback = ChannelFeedback(FeedbackPolicy(call_timeout_s=600.0))
    async with asyncio.timeout(60):  # a tenth of the hung call's own timeout
        async with feedback.typing_while(adapter, "a"):
            pass
    assert feedback.in_flight >= 1
    await feedback.stop()
    assert feedback.in_flight == 0
    async with feedback.typing_while(adapter, "a"):  # closed: a no-op
        pass
