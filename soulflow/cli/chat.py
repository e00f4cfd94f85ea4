"""`soulflow chat`: the terminal side of the local channel.

With a daemon running, messages go through its HTTP API; otherwise the daemon runs inside
this process for the length of the chat. Interactive use shows a prompt; when stdin is a pipe,
every line is one message and every reply is printed, so the chat can be scripted.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import AsyncExitStack
from typing import Any, Protocol

import httpx

from soulflow.cli.client import DaemonClient, DaemonNotRunning
from soulflow.config import Settings


class ChatTransport(Protocol):
    async def submit(self, text: str) -> str: ...

    async def wait(self, after: int, timeout: float) -> list[dict[str, Any]]: ...

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

    async def wait(self, after: int, timeout: float) -> list[dict[str, Any]]:
        body = await self._call("GET", f"/api/chat/{self._chat_id}/messages",
                                params={"after": after, "wait": min(timeout, 60.0)})
        return list(body["messages"])

    async def last_seq(self) -> int:
        body = await self._call("GET", f"/api/chat/{self._chat_id}/messages",
                                params={"after": -1})
        messages = body["messages"]
        return int(messages[-1]["seq"]) if messages else -1

    async def close(self) -> None:
        await self._http.aclose()


class EmbeddedTransport:
    """Runs the daemon in this process and talks to its local channel directly."""

    def __init__(self, settings: Settings, chat_id: str) -> None:
        from soulflow.cli.wiring import create_app

        self._runtime = create_app(settings)
        self._chat_id = chat_id

    async def start(self) -> None:
        await self._runtime.start()

    async def submit(self, text: str) -> str:
        return await self._runtime.local.submit(self._chat_id, text)

    async def wait(self, after: int, timeout: float) -> list[dict[str, Any]]:
        return await self._runtime.local.wait_messages(self._chat_id, after, timeout)

    async def last_seq(self) -> int:
        messages = self._runtime.local.messages(self._chat_id, -1, limit=10**9)
        return int(messages[-1]["seq"]) if messages else -1

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
                       interactive: bool) -> int:
    """Print assistant messages until the reply to `message_id` arrives; returns the new cursor."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (remaining := deadline - loop.time()) > 0:
        for entry in await transport.wait(after, remaining):
            after = max(after, int(entry["seq"]))
            if entry.get("role") != "assistant":
                continue
            prefix = "soulflow> " if interactive else ""
            print(f"{prefix}{entry.get('content', '')}", flush=True)
            if entry.get("reply_to") == message_id:
                return after
    print(f"soulflow: no reply within {timeout:g}s; it will appear in this chat when ready",
          file=sys.stderr)
    return after


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
        after = await transport.last_seq()
        while (line := await _read_line(interactive)) is not None:
            if interactive and not line.strip():
                continue
            message_id = await transport.submit(line)
            after = await _await_reply(transport, message_id, after, timeout, interactive)
    return 0
