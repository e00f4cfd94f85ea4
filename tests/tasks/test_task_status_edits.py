"""A task's status message is edited in place on Slack, Telegram and Discord: the real SDKs
against the loopback fakes (chat.update, editMessageText, PATCH .../messages/ID), driven by
TaskProgress; a failing edit never reaches the task; and under each platform's edit limits
(Telegram's chat and group pacing, Slack's chat.update tier, Discord's edit bucket) the status
message still ends on the last step, with every retry_after honoured."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import Announcement, ChatRef, OutboundMessage, TaskStatusRef
from soulflow.tasks import NodeKind, NodeStatus, TaskGraph, TaskNode, TaskState
from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.progress import TaskProgress
from tests.channels.adapters import discord_adapter, slack_adapter, telegram_adapter
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.loopback_base import RecordedRequest
from tests.fakes.rate_limits import SLACK_LIMITS, Window
from tests.fakes.slack_api import APP_TOKEN, FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.running import running
from tests.waiting import until

TIMEOUT = 10.0


class Outbox:
    """Sends what TaskProgress publishes through the adapter, as the daemon's outbox does, and
    reports the status message's id back (the daemon's sent-listener)."""

    def __init__(self, adapter: ChannelAdapter) -> None:
        self.adapter = adapter
        self.progress: TaskProgress | None = None
        self.sends: list[asyncio.Task[None]] = []

    def publish(self, chat: ChatRef, text: str, announces: Announcement | None) -> None:
        self.sends.append(asyncio.create_task(self._send(chat, text, announces)))

    async def _send(self, chat: ChatRef, text: str, announces: Announcement | None) -> None:
        result = await self.adapter.send(OutboundMessage(
            provider=chat.provider, chat_id=chat.chat_id, content=text, announces=announces))
        if isinstance(announces, TaskStatusRef) and self.progress is not None:
            self.progress.status_sent(announces.task_id, result.platform_message_ids)


async def run_steps(adapter: ChannelAdapter, provider: str, chat_id: str,
                    edited: Callable[[], list[str]]) -> list[str]:
    """Three steps finish one after another; returns the status texts seen after each edit."""
    outbox = Outbox(adapter)
    progress = TaskProgress(outbox.publish, interval_s=0.05,
                            editor=lambda name: adapter if name == provider else None)
    outbox.progress = progress
    graph = TaskGraph([TaskNode(id=n, kind=NodeKind.TOOL, tool="read_file") for n in "abc"])
    task = TaskState("t-0000beef", "Three reads", graph, provider=provider, chat_id=chat_id)
    seen: list[str] = []
    for done, node in enumerate("abc", 1):
        task.nodes[node].status = NodeStatus.COMPLETED
        await progress.on_event(TaskEvent(task, "done", "", f"d-{node}", node))
        want = f"{done}/3 steps done"
        async with asyncio.timeout(TIMEOUT):
            while not any(want in text for text in edited()):
                await asyncio.sleep(0.02)
        seen.append(next(text for text in edited() if want in text))
    await progress.stop()
    await asyncio.gather(*outbox.sends)
    return seen


async def test_slack_status_message_is_updated_in_place(tmp_path: Path) -> None:
    fake = FakeSlack()
    await fake.start()
    adapter = slack_adapter(fake.base_url, tmp_path, app_token=APP_TOKEN,
                            poll_interval_s=0.02, socket_ping_interval_s=0.2,
                            default_channel=None)
    await adapter.start()
    try:
        channel = "C0GENERAL1"
        await run_steps(adapter, "slack", channel,
                        lambda: [str(m.message["text"]) for m in fake.messages])
        [status] = fake.messages  # one message, edited twice
        assert "3/3 steps done" in status.message["text"] and "edited" in status.message
    finally:
        await adapter.stop()
        await fake.stop()


async def test_telegram_status_message_is_edited_in_place(tmp_path: Path) -> None:
    fake = FakeTelegram()
    await fake.start()
    adapter = telegram_adapter(fake.url, tmp_path)
    await adapter.start()
    try:
        chat = "4242"
        fake.add_chat(4242)
        await run_steps(adapter, "telegram", chat, lambda: fake.sent_texts())
        [status] = fake.sent_messages
        assert "3/3 steps done" in status["text"] and "edit_date" in status
        # an edit that fails (the message is gone) is logged, never raised into the task
        outbox = Outbox(adapter)
        progress = TaskProgress(outbox.publish, interval_s=0.0, editor=lambda name: adapter)
        graph = TaskGraph([TaskNode(id="a", kind=NodeKind.TOOL, tool="read_file")])
        task = TaskState("t-0000dead", "Gone", graph, provider="telegram", chat_id=chat)
        progress._status[task.task_id] = "999999"  # a status message that no longer exists
        await progress.on_event(TaskEvent(task, "assign", "", "a-1", "a"))
        async with asyncio.timeout(TIMEOUT):
            while progress._flushers:
                await asyncio.sleep(0.02)
        assert len(fake.sent_messages) == 1
        await progress.stop()
    finally:
        await adapter.stop()
        await fake.stop()


async def test_discord_status_message_is_edited_in_place(tmp_path: Path) -> None:
    async with (FakeDiscord(heartbeat_interval_ms=200) as fake,
                running(discord_adapter(fake, tmp_path, ready_timeout=TIMEOUT)) as adapter):
        channel = str(fake.channel_ids["general"])
        await run_steps(adapter, "discord", channel,
                        lambda: [str(m.content) for m in fake.sent_messages]
                        + [str(e.message.get("content")) for e in fake.edits])
        assert len(fake.sent_messages) == 1 and len(fake.edits) == 2
        assert {e.message_id for e in fake.edits} == {int(fake.sent_messages[0].message["id"])}
        assert "3/3 steps done" in str(fake.edits[-1].message["content"])


# -- under the platforms' limits -----------------------------------------------------------

STEPS = 8


async def steps_under_limits(adapter: ChannelAdapter, provider: str, chat_id: str,
                             attempted: Callable[[], list[str]],
                             shown: Callable[[], list[str]]) -> None:
    """Eight steps finish one after another, each as soon as the platform has seen an attempt
    to show the one before (a post or an edit, accepted or refused): far faster than the
    platform lets a chat's message be edited. The status message must end up showing the last
    step: an edit the platform refused with a retry_after is tried again after that wait,
    unless a newer one has replaced it by then."""
    outbox = Outbox(adapter)
    progress = TaskProgress(outbox.publish, interval_s=0.0,
                            editor=lambda name: adapter if name == provider else None)
    outbox.progress = progress
    graph = TaskGraph([TaskNode(id=f"s{n}", kind=NodeKind.TOOL, tool="read_file")
                       for n in range(STEPS)])
    task = TaskState("t-0000f00d", "Eight reads", graph, provider=provider, chat_id=chat_id)
    for done in range(1, STEPS + 1):
        node = f"s{done - 1}"
        task.nodes[node].status = NodeStatus.COMPLETED
        await progress.on_event(TaskEvent(task, "done", "", f"d-{node}", node))
        want = f"{done}/{STEPS} steps done"
        await until(lambda want=want: any(want in text for text in attempted()), TIMEOUT)
    last = f"{STEPS}/{STEPS} steps done"
    await until(lambda: any(last in text for text in shown()), 3 * TIMEOUT)
    await progress.stop()
    await asyncio.gather(*outbox.sends)


def honoured(calls: list[RecordedRequest]) -> None:
    """After each refused call the next one waited at least the retry_after it was given."""
    for refused, following in zip(calls, calls[1:], strict=False):
        if refused.status == 429:
            assert refused.retry_after is not None
            assert following.time >= refused.time + refused.retry_after, calls


async def test_telegram_status_edits_in_a_group_under_its_limits(tmp_path: Path) -> None:
    """Telegram's default limits (1/s per chat, 20 a minute in a group), edits paced as
    messages of the chat: the status message still ends on the last step."""
    async with running(FakeTelegram()) as fake:
        chat = -1001234567
        fake.add_chat(chat, "supergroup", title="team")
        async with running(telegram_adapter(fake.url, tmp_path)) as adapter:
            def texts(*methods: str) -> list[str]:
                return [str(r.params.get("text")) for r in fake.requests
                        if r.method in methods]
            await steps_under_limits(adapter, "telegram", str(chat),
                                     lambda: texts("sendMessage", "editMessageText"),
                                     lambda: fake.sent_texts(chat))
        [status] = fake.sent_messages
        assert f"{STEPS}/{STEPS} steps done" in status["text"]
        assert fake.stats()["rate_limited"].get("editMessageText", 0) >= 1  # limits in play
        honoured(fake.calls("editMessageText"))


async def test_slack_status_edits_under_chat_update_tier(tmp_path: Path) -> None:
    """chat.update is Tier 3 (per workspace); here on this test's time scale, two edits in
    any second, so the eight steps run into it."""
    limits = replace(SLACK_LIMITS, per_method={**SLACK_LIMITS.per_method,
                                               "chat.update": Window(2, 1.0)})
    async with running(FakeSlack(limits=limits)) as fake:
        adapter = slack_adapter(fake.base_url, tmp_path, app_token=APP_TOKEN,
                                socket_ping_interval_s=0.2)
        async with running(adapter):
            def texts(*methods: str) -> list[str]:
                return [str(r.params.get("text")) for r in fake.requests
                        if r.method in methods]
            await steps_under_limits(adapter, "slack", "C0GENERAL1",
                                     lambda: texts("chat.postMessage", "chat.update"),
                                     lambda: fake.bot_texts("C0GENERAL1"))
        [status] = fake.messages
        assert f"{STEPS}/{STEPS} steps done" in status.message["text"]
        assert fake.stats()["rate_limited"].get("chat.update", 0) >= 1
        honoured(fake.calls("chat.update"))


async def test_discord_status_edits_wait_for_the_edit_bucket(tmp_path: Path) -> None:
    """Discord's edit bucket (here two edits a second per channel), announced in the
    X-RateLimit-* headers: discord.py waits for it rather than being refused."""
    fake = FakeDiscord(heartbeat_interval_ms=200,
                       route_limits={"send_message": (5, 5.0), "edit_message": (2, 1.0)})
    async with (fake, running(discord_adapter(fake, tmp_path, ready_timeout=TIMEOUT))
                as adapter):
        channel = str(fake.channel_ids["general"])

        def shown() -> list[str]:
            return ([str(m.content) for m in fake.sent_messages]
                    + [str(e.message.get("content")) for e in fake.edits])
        await steps_under_limits(adapter, "discord", channel, shown, shown)
        assert len(fake.sent_messages) == 1
        assert f"{STEPS}/{STEPS} steps done" in str(fake.edits[-1].message["content"])
        assert fake.stats()["rate_limited"] == {}  # paced from the headers, never refused
