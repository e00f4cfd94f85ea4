"""`soulflow chat`: the terminal side of the local channel.

With a daemon running, messages go through its HTTP API; otherwise the daemon runs inside
this process for the length of the chat. Interactive use shows a prompt; when stdin is a pipe,
every line is one message and every reply is printed, so the chat can be scripted.

A streamed reply (one message, then edits of it) prints as it grows (chat_view.py). Its
in-between records are marked `partial`; the prompt comes back (or a scripted chat goes on)
at the reply's first record that is not: its final text.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from soulflow.cli.chat_view import ChatPrinter
from soulflow.cli.client import DaemonClient, DaemonNotRunning
from soulflow.config import Settings

if TYPE_CHECKING:
    from soulflow.channels.local.adapter import LocalChannel


@dataclass(frozen=True, slots=True)
class ChatPage:
    """Entries newer than a cursor, and the cursor for the next read (`last_seq`: the last
    entry read, which a folded page may not show)."""

    entries: list[dict[str, Any]]
    last_seq: int


class ChatTransport(Protocol):
    async def submit(self, text: str) -> str: ...

    async def wait(self, after: int, timeout: float) -> ChatPage: ...

    async def last_seq(self) -> int: ...


class HttpTransport:
    def __init__(self, client: DaemonClient, chat_id: str) -> None:
        self._client = client
        self._chat_id = chat_id
        self._http = httpx.AsyncClient(base_url=client.base_url, headers=client.headers,
                                       timeout=httpx.Timeout(10.0, read=70.0))

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise DaemonNotRunning(f"lost the daemon at {self._client.base_url}: {exc}") from None
        return DaemonClient._decode(response)

    async def submit(self, text: str) -> str:
        body = await self._call("POST", "/api/chat", json={"chat_id": self._chat_id, "text": text})
        return str(body["message_id"])

    async def wait(self, after: int, timeout: float) -> ChatPage:
        body = await self._call("GET", f"/api/chat/{self._chat_id}/messages",
                                params={"after": after, "wait": min(timeout, 60.0)})
        entries = list(body["messages"])
        last = body.get("last_seq")  # a daemon from before edits: the last entry's seq
        return ChatPage(entries, int(last) if last is not None else
                        max([after, *(int(e["seq"]) for e in entries)]))

    async def last_seq(self) -> int:
        # the newest entry's seq: pages of 200 from the start would read the whole chat
        cursor = -1
        while True:
            page = await self.wait(cursor, 0.0)
            if page.last_seq <= cursor:
                return cursor
            cursor = page.last_seq

    async def close(self) -> None:
        await self._http.aclose()


class ChannelTransport:
    """Talks to a local channel in this process (its entries as written, edits included)."""

    def __init__(self, local: LocalChannel, chat_id: str) -> None:
        self._local = local
        self._chat_id = chat_id

    async def submit(self, text: str) -> str:
        return await self._local.submit(self._chat_id, text)

    async def wait(self, after: int, timeout: float) -> ChatPage:
        entries = await self._local.wait_messages(self._chat_id, after, timeout)
        return ChatPage(entries, int(entries[-1]["seq"]) if entries else after)

    async def last_seq(self) -> int:
        messages = self._local.messages(self._chat_id, -1, limit=10**9)
        return int(messages[-1]["seq"]) if messages else -1


class EmbeddedTransport(ChannelTransport):
    """Runs the daemon in this process and talks to its local channel directly."""

    def __init__(self, settings: Settings, chat_id: str) -> None:
        from soulflow.cli.wiring import create_app

        self._runtime = create_app(settings)
        super().__init__(self._runtime.local, chat_id)

    async def start(self) -> None:
        await self._runtime.start()

    async def stop(self) -> None:
        await self._runtime.stop()


async def _read_line(interactive: bool) -> str | None:
    """One line from stdin, decoded leniently: invalid UTF-8 becomes U+FFFD, never a crash."""
    loop = asyncio.get_running_loop()
    if interactive:
        sys.stdout.write("you> ")
        sys.stdout.flush()
    raw = await loop.run_in_executor(None, sys.stdin.buffer.readline)
    if not raw:
        return None
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


async def _await_reply(transport: ChatTransport, message_id: str, after: int, timeout: float,
                       printer: ChatPrinter) -> int:
    """Print assistant messages until the whole reply to `message_id` has arrived (a streamed
    one prints as it grows, until its final record); returns the new cursor."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while (remaining := deadline - loop.time()) > 0:
            page = await transport.wait(after, remaining)
            after = max(after, page.last_seq)
            whole = False
            for entry in page.entries:
                printer.show(entry)
                whole = whole or (entry.get("role") == "assistant"
                                  and entry.get("reply_to") == message_id
                                  and not entry.get("partial"))
            if whole:
                return after
        printer.end_line()
        print(f"soulflow: no reply within {timeout:g}s; it will appear in this chat when "
              "ready", file=sys.stderr)
        return after
    finally:
        printer.end_line()


async def run_chat(settings: Settings, *, chat_id: str, timeout: float) -> int:
    client = DaemonClient.locate(settings)
    async with AsyncExitStack() as stack:
        transport: ChatTransport
        if client is not None:
            http = HttpTransport(client, chat_id)
            stack.push_async_callback(http.close)  # its HTTP client
            transport = http
        else:
            from soulflow.logs import configure_logging

            # the daemon runs in this process: only its warnings, in the format --log-format
            # chose (None keeps it); straight from logs, since main.py imports this module
            configure_logging("warning", None)
            embedded = EmbeddedTransport(settings, chat_id)
            stack.push_async_callback(embedded.stop)  # the daemon it runs
            await embedded.start()
            transport = embedded
        interactive = sys.stdin.isatty()
        printer = ChatPrinter(sys.stdout, interactive=interactive)
        after = await transport.last_seq()
        while (line := await _read_line(interactive)) is not None:
            if interactive and not line.strip():
                continue
            message_id = await transport.submit(line)
            after = await _await_reply(transport, message_id, after, timeout, printer)
    return 0
