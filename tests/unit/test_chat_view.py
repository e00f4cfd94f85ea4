"""`soulflow chat` printing a streamed reply: the text appears as it grows, once; a changed
text is printed whole, marked as a correction; ordinary replies print as they always did."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from soulflow.backends.file.backend import FileBackend
from soulflow.bus.bus import MessageBus
from soulflow.channels.local.adapter import LocalChannel
from soulflow.cli.chat import ChannelTransport, HttpTransport, _await_reply
from soulflow.cli.chat_view import ChatPrinter
from soulflow.cli.client import DaemonClient
from soulflow.contracts import OutboundMessage, ReplyOptions
from soulflow.dashboard.service import DashboardService
from soulflow.events.hub import EventHub
from tests.waiting import until


async def _ok_state() -> dict[str, bool]:
    return {"ok": True}


def entry(content: str, id: str, edits: str | None = None,
          role: str = "assistant") -> dict[str, Any]:
    record: dict[str, Any] = {"id": id, "role": role, "content": content}
    if edits is not None:
        record["edits"] = edits
    return record


def printed(entries: list[dict[str, Any]], *, interactive: bool = False) -> str:
    out = io.StringIO()
    printer = ChatPrinter(out, interactive=interactive)
    for e in entries:
        printer.show(e)
    printer.end_line()
    return out.getvalue()


def test_ordinary_replies_print_as_before() -> None:
    entries = [entry("hi", "in-1", role="user"), entry("echo: hi", "out-1"),
               entry("second\nline", "out-2")]
    assert printed(entries) == "echo: hi\nsecond\nline\n"
    assert printed(entries, interactive=True) == "soulflow> echo: hi\nsoulflow> second\nline\n"


def test_a_growing_reply_prints_only_what_is_new() -> None:
    out = io.StringIO()
    printer = ChatPrinter(out, interactive=True)
    printer.show(entry("Hel", "out-1"))
    assert out.getvalue() == "soulflow> Hel"
    printer.show(entry("Hello", "e1", edits="out-1"))
    printer.show(entry("Hello", "e2", edits="out-1"))  # unchanged: nothing
    printer.show(entry("Hello, world", "e3", edits="out-1"))
    assert out.getvalue() == "soulflow> Hello, world"
    printer.end_line()
    # the stream went on after its line was ended: the rest on a line of its own
    printer.show(entry("Hello, world. More.", "e4", edits="out-1"))
    printer.end_line()
    assert out.getvalue() == "soulflow> Hello, world\nsoulflow> …. More.\n"


def test_an_edit_that_changes_the_text_prints_it_whole_as_a_correction() -> None:
    entries = [entry("The answer is 41", "out-1"), entry("The answer is 42.", "e1", "out-1"),
               entry("The answer is 42. Sure.", "e2", "out-1")]
    assert printed(entries, interactive=True) == (
        "soulflow> The answer is 41\nsoulflow (corrected)> The answer is 42. Sure.\n")
    assert printed(entries) == "The answer is 41\n(corrected) The answer is 42. Sure.\n"


def test_an_edit_of_something_not_shown_prints_as_a_message() -> None:
    # its start was before this terminal joined, or it names what the user said
    entries = [entry("my words", "in-1", role="user"), entry("part", "e1", "out-old"),
               entry("partial", "e2", "out-old"), entry("not yours", "e3", "in-1")]
    assert printed(entries) == "partial\nnot yours\n"


def reply(text: str, *, edit_of: str = "", message_id: str, reply_to: str,
          partial: bool = False) -> OutboundMessage:
    message = OutboundMessage(provider="local", chat_id="t", content=text, reply_to=reply_to,
                              options=ReplyOptions(edit_of=edit_of, partial=partial))
    message.message_id = message_id
    return message


async def test_the_terminal_follows_a_stream_until_its_final_record(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path)
    out = io.StringIO()
    printer = ChatPrinter(out, interactive=False)
    pieces = ["Once", "Once upon", "Once upon a time", "Once upon a time, the end."]

    async def stream() -> None:
        await channel.send(reply(pieces[0], message_id="out-1", reply_to="in-1",
                                 partial=True))
        for i, text in enumerate(pieces[1:], start=1):
            await until(lambda i=i: out.getvalue() == pieces[i - 1], timeout=30.0)
            await channel.send(reply(text, edit_of="out-1", message_id=f"e{i}",
                                     reply_to="in-1", partial=i < len(pieces) - 1))

    streamer = asyncio.create_task(stream())
    after = await _await_reply(ChannelTransport(channel, "t"), "in-1", -1, 60.0, printer)
    await streamer
    assert out.getvalue() == "Once upon a time, the end.\n"  # grew in place, printed once
    assert after == 3


async def test_without_streaming_the_reply_ends_the_wait(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path)
    out = io.StringIO()
    await channel.send(reply("whole", message_id="out-1", reply_to="in-1"))
    after = await _await_reply(ChannelTransport(channel, "t"), "in-1", -1, 60.0,
                               ChatPrinter(out, interactive=False))
    assert (out.getvalue(), after) == ("whole\n", 0)


async def test_over_http_the_terminal_starts_at_the_newest_entry_and_prints_folded_pages(
        tmp_path: Path) -> None:
    """Through the dashboard's API (folded pages, `last_seq`), as `soulflow chat` with a
    daemon running: a long chat is not printed again, and a stream shows its final text."""
    bus = MessageBus(FileBackend(tmp_path / "runtime", node_id="test"))
    channel = LocalChannel(tmp_path / "runtime" / "local")
    service = DashboardService(host="127.0.0.1", port=0, token="t0k", hub=EventHub(),
                               state=_ok_state, local=channel, bus=bus,
                               ready=lambda: True)
    await service.start()
    transport = HttpTransport(DaemonClient(f"http://127.0.0.1:{service.bound_port}", "t0k"),
                              "t")
    try:
        for i in range(450):
            await channel.send(reply(f"old {i}", message_id=f"old-{i}", reply_to="in-0"))
        assert await transport.last_seq() == 449
        await channel.send(reply("Hel", message_id="out-1", reply_to="in-1"))
        await channel.send(reply("Hello", edit_of="out-1", message_id="e1", reply_to="in-1"))
        out = io.StringIO()
        after = await _await_reply(transport, "in-1", 449, 60.0,
                                   ChatPrinter(out, interactive=True))
        assert (out.getvalue(), after) == ("soulflow> Hello\n", 451)
    finally:
        await transport.close()
        await service.stop()
        await bus.stop(1)
        await bus.backend.stop()
