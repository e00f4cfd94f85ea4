"""The local channel keeps a bounded number of transcripts loaded: idle ones are closed past
the cap and read back from their file; one a long poll waits on stays loaded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from soulflow.channels.local import adapter as local
from soulflow.channels.local.adapter import LocalChannel
from soulflow.contracts import OutboundMessage
from tests.waiting import until


def reply(chat_id: str, text: str, message_id: str | None = None) -> OutboundMessage:
    message = OutboundMessage(provider="local", chat_id=chat_id, content=text)
    if message_id is not None:
        message.message_id = message_id
    return message


async def test_idle_transcripts_are_closed_past_the_cap_and_read_back(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path)
    first = reply("chat-0", "hello 0", message_id="out-first")
    await channel.send(first)
    for i in range(1, local._OPEN_TRANSCRIPTS + 10):
        await channel.send(reply(f"chat-{i}", f"hello {i}"))
    assert len(channel._transcripts) == local._OPEN_TRANSCRIPTS
    assert "chat-0" not in channel._transcripts  # the least recently used went first

    # read back from its file: the history, the numbering and the sent ids carry on
    assert [m["content"] for m in channel.messages("chat-0")] == ["hello 0"]
    await channel.send(first)  # a retry of a reply already delivered writes nothing
    await channel.send(reply("chat-0", "again"))
    assert [(m["seq"], m["content"]) for m in channel.messages("chat-0")] == [
        (0, "hello 0"), (1, "again")]
    assert len(channel._transcripts) == local._OPEN_TRANSCRIPTS


async def test_a_transcript_a_long_poll_waits_on_stays_loaded(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path)
    await channel.send(reply("watched", "first"))
    poll = asyncio.create_task(channel.wait_messages("watched", after=0, timeout=60.0))
    await until(lambda: channel._transcripts["watched"].waiters == 1, timeout=30.0)
    for i in range(local._OPEN_TRANSCRIPTS + 10):
        await channel.send(reply(f"other-{i}", "x"))
    assert "watched" in channel._transcripts
    assert len(channel._transcripts) == local._OPEN_TRANSCRIPTS

    await channel.send(reply("watched", "second"))
    got = await asyncio.wait_for(poll, timeout=30.0)
    assert [m["content"] for m in got] == ["second"]
    assert channel._transcripts["watched"].waiters == 0
    await channel.send(reply("other-new", "x"))  # now idle: it may go like any other
    assert len(channel._transcripts) == local._OPEN_TRANSCRIPTS
