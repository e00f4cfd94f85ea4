"""A streamed reply in the local channel: an edit is a transcript record naming the message it
replaces; whoever reads the transcript (the dashboard's API, the live events) sees one
message with its latest text, never an edit as a message of its own."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.channels.local import adapter as local
from soulflow.channels.local.adapter import LocalChannel
from soulflow.channels.local.edits import collapse_edits
from soulflow.contracts import OutboundMessage, ReplyOptions
from soulflow.dashboard.service import DashboardService
from soulflow.events.hub import EventHub


async def _ok_state() -> dict[str, bool]:
    return {"ok": True}


def reply(text: str, *, edit_of: str = "", message_id: str | None = None,
          chat_id: str = "c", reply_to: str | None = "in-1") -> OutboundMessage:
    message = OutboundMessage(provider="local", chat_id=chat_id, content=text, reply_to=reply_to,
                              options=ReplyOptions(edit_of=edit_of) if edit_of else ReplyOptions())
    if message_id is not None:
        message.message_id = message_id
    return message


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_an_edit_is_a_record_naming_the_message_it_replaces(tmp_path: Path) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    channel = LocalChannel(tmp_path, on_event=lambda kind, data: events.append((kind, data)))
    first = await channel.send(reply("Hel", message_id="out-1"))
    assert first.platform_message_ids == ["out-1"]
    edited = await channel.send(reply("Hello world", edit_of="out-1", message_id="out-2"))
    assert edited.platform_message_ids == ["out-1"]  # the message edited keeps its id

    record = lines(tmp_path / "c.jsonl")[-1]
    assert {k: record[k] for k in ("id", "role", "content", "edits", "reply_to")} == {
        "id": "out-2", "role": "assistant", "content": "Hello world", "edits": "out-1",
        "reply_to": "in-1"}
    assert "edits" not in lines(tmp_path / "c.jsonl")[0]
    # the live event carries the edit as an edit (the web chat patches the bubble)
    assert events[-1][0] == "local.message" and events[-1][1]["edits"] == "out-1"
    # read back, it is one message with the latest text
    assert [(m["id"], m["content"], m.get("edited")) for m in
            collapse_edits(channel.messages("c"))] == [("out-1", "Hello world", True)]


async def test_a_retried_edit_is_written_once(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path)
    await channel.send(reply("Hel", message_id="out-1"))
    edit = reply("Hello", edit_of="out-1", message_id="out-2")
    for _ in range(3):
        assert (await channel.send(edit)).platform_message_ids == ["out-1"]
    assert [r["id"] for r in lines(tmp_path / "c.jsonl")] == ["out-1", "out-2"]
    # also after the transcript was closed and read back from its file
    channel._transcripts.pop("c").file.close()
    assert (await channel.send(edit)).platform_message_ids == ["out-1"]
    assert len(lines(tmp_path / "c.jsonl")) == 2


async def test_an_edit_of_an_edit_names_the_message_itself(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path)
    await channel.send(reply("a", message_id="out-1"))
    await channel.send(reply("ab", edit_of="out-1", message_id="out-2"))
    await channel.send(reply("abc", edit_of="out-2", message_id="out-3"))
    assert lines(tmp_path / "c.jsonl")[-1]["edits"] == "out-1"
    assert [m["content"] for m in collapse_edits(channel.messages("c"))] == ["abc"]


async def test_an_edit_of_an_unknown_message_is_shown_once_as_its_own(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    channel = LocalChannel(tmp_path)
    await channel.send(reply("before", message_id="out-0"))
    with caplog.at_level(logging.WARNING, logger=local.__name__):
        for i, text in enumerate(["par", "parti", "partial, then whole"]):
            result = await channel.send(reply(text, edit_of="out-gone", message_id=f"e{i}"))
            assert result.platform_message_ids == ["out-gone"]
    assert [r["edits"] for r in lines(tmp_path / "c.jsonl")[1:]] == ["out-gone"] * 3
    assert len([r for r in caplog.records if "out-gone" in r.getMessage()]) == 1  # not per edit
    shown = collapse_edits(channel.messages("c"))
    assert [(m["id"], m["content"]) for m in shown] == [
        ("out-0", "before"), ("e0", "partial, then whole")]


async def test_an_edit_never_rewrites_what_the_user_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Whatever an edit names, a user's message keeps its words: the edit is shown apart."""
    channel = LocalChannel(tmp_path)
    await channel._append("c", {"id": "in-1", "role": "user", "content": "my words"})
    with caplog.at_level(logging.WARNING, logger=local.__name__):
        await channel.send(reply("not yours", edit_of="in-1", message_id="out-1"))
        await channel.send(reply("not yours either", edit_of="in-1", message_id="out-2"))
    assert len([r for r in caplog.records if "in-1" in r.getMessage()]) == 1
    shown = collapse_edits(channel.messages("c"))
    assert [(m["role"], m["content"]) for m in shown] == [
        ("user", "my words"), ("assistant", "not yours either")]


async def test_a_target_older_than_the_recent_entries_is_found_in_the_file_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    channel = LocalChannel(tmp_path)
    await channel.send(reply("start", message_id="out-old"))
    for i in range(local._RECENT + 5):
        await channel._append("c", {"id": f"in-{i}", "role": "user", "content": str(i)})
    transcript = channel._transcripts["c"]
    reads = 0
    real = type(transcript.file).iter_records

    def counting(self: Any) -> Any:
        nonlocal reads
        reads += 1
        return real(self)

    monkeypatch.setattr(type(transcript.file), "iter_records", counting)
    for i in range(5):
        await channel.send(reply("start" + "!" * (i + 1), edit_of="out-old", message_id=f"e{i}"))
    assert reads == 1
    assert {r["edits"] for r in lines(tmp_path / "c.jsonl")[-5:]} == {"out-old"}


def test_a_page_collapses_edits_and_keeps_edits_of_messages_before_it() -> None:
    records = [
        {"seq": 0, "id": "in-1", "role": "user", "content": "q"},
        {"seq": 1, "id": "out-1", "role": "assistant", "content": "H"},
        {"seq": 2, "id": "in-2", "role": "user", "content": "q2"},
        {"seq": 3, "id": "out-2", "role": "assistant", "content": "He", "edits": "out-1"},
        {"seq": 4, "id": "out-3", "role": "assistant", "content": "Hello", "edits": "out-1"},
    ]
    assert [(m["seq"], m["content"]) for m in collapse_edits(records)] == [
        (0, "q"), (1, "Hello"), (2, "q2")]
    assert records[1]["content"] == "H"  # the input (the channel's cache) is not changed
    # a later page holding only edits keeps them as edits: the client patches the message
    assert collapse_edits(records[3:]) == [{**records[3], "content": "Hello", "edited": True}]


async def test_two_thousand_edits_read_as_one_message(tmp_path: Path) -> None:
    """A long stream: read whole or page by page, it adds up to the one final message."""
    channel = LocalChannel(tmp_path)
    await channel.send(reply("0", message_id="out-1"))
    text = "0"
    for i in range(1, 2000):
        text += f" {i}"
        await channel.send(reply(text, edit_of="out-1", message_id=f"e{i}"))
    assert [m["content"] for m in collapse_edits(channel.messages("c", limit=10**9))] == [text]
    # a client paging 200 at a time (cursor: the page's last record) patches as it goes
    shown: dict[str, str] = {}
    after = -1
    while raw := channel.messages("c", after):
        for m in collapse_edits(raw):
            shown[m.get("edits") or m["id"]] = m["content"]
        after = raw[-1]["seq"]
    assert shown == {"out-1": text}


async def test_the_chat_api_shows_a_streamed_reply_once(tmp_path: Path) -> None:
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    channel = LocalChannel(tmp_path / "runtime" / "local")
    service = DashboardService(host="127.0.0.1", port=0, token="", hub=EventHub(),
                               state=_ok_state, local=channel, bus=bus,
                               ready=lambda: True)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.bound_port}",
                                     timeout=10) as http:
            await channel.send(reply("Hel", message_id="out-1", chat_id="dashboard"))
            await channel.send(reply("Hello", edit_of="out-1", message_id="out-2",
                                     chat_id="dashboard"))
            body = (await http.get("/api/chat/dashboard/messages?after=-1")).json()
            assert [(m["id"], m["content"]) for m in body["messages"]] == [("out-1", "Hello")]
            assert body["last_seq"] == 1
            # a long poll from that cursor wakes for the next edit and hands it over as one
            poll = asyncio.create_task(
                http.get("/api/chat/dashboard/messages?after=1&wait=30"))
            await asyncio.sleep(0)
            await channel.send(reply("Hello world", edit_of="out-1", message_id="out-3",
                                     chat_id="dashboard"))
            later = (await poll).json()
            assert [(m["content"], m["edits"]) for m in later["messages"]] == [
                ("Hello world", "out-1")]
            assert later["last_seq"] == 2
            empty = (await http.get("/api/chat/dashboard/messages?after=2")).json()
            assert empty["messages"] == [] and empty["last_seq"] == 2
    finally:
        await service.stop()
        await bus.stop(1)
        await bus.backend.stop()
