"""A task's status message is edited in place on Slack, Telegram and Discord: the real SDKs
against the loopback fakes (chat.update, editMessageText, PATCH .../messages/ID), driven by
TaskProgress; a failing edit never reaches the task."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.bus.messages import OutboundMessage
from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import ChatRef
from soulflow.tasks import NodeKind, NodeStatus, TaskGraph, TaskNode, TaskState
from soulflow.tasks.contracts import TaskEvent
from soulflow.tasks.progress import STATUS_KEY, TaskProgress
from tests.channels.adapters import discord_adapter, slack_adapter, telegram_adapter
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.slack_api import APP_TOKEN, FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.running import running

TIMEOUT = 10.0


class Outbox:
    """Sends what TaskProgress publishes through the adapter, as the daemon's outbox does, and
    reports the status message's id back (the daemon's sent-listener)."""

    def __init__(self, adapter: ChannelAdapter) -> None:
        self.adapter = adapter
        self.progress: TaskProgress | None = None
        self.sends: list[asyncio.Task[None]] = []

    def publish(self, chat: ChatRef, text: str, metadata: dict[str, Any]) -> None:
        self.sends.append(asyncio.create_task(self._send(chat, text, metadata)))

    async def _send(self, chat: ChatRef, text: str, metadata: dict[str, Any]) -> None:
        result = await self.adapter.send(OutboundMessage(
            provider=chat.provider, chat_id=chat.chat_id, content=text,
            metadata=metadata))
        if metadata.get(STATUS_KEY) and self.progress is not None:
            self.progress.status_sent(metadata[STATUS_KEY], result.platform_message_ids)


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
    await progress.close()
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
        await progress.close()
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
