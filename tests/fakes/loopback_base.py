"""Shared plumbing for the loopback fake API servers (Telegram, Slack).

Each fake is an aiohttp application bound to a loopback port. This module holds what
both need: start/stop, a request log, one-shot fault/delay schedules and an
event-driven ``wait_for`` so tests wait on conditions instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from aiohttp import web

T = TypeVar("T")

#: Large enough for realistic document/photo uploads (aiohttp's default is 1 MiB).
MAX_BODY_BYTES = 64 * 1024 * 1024


def encode_json(body: Any) -> bytes:
    """A JSON response body. Text holding U+DC80..U+DCFF (Python's surrogateescape for the
    bytes 0x80..0xFF) goes on the wire as those raw, invalid UTF-8 bytes: how a test sends a
    non-UTF-8 body (`text="caf\\udce9"`). Anything else is ordinary escaped JSON (a lone
    "\\ud800" included, which is valid JSON)."""
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return json.dumps(body).encode("ascii")


class ServedInBlock:
    """``async with fake:`` for a fake with async ``start()`` and ``stop()``: started for the
    block, stopped after it even when the block raises."""

    async def __aenter__(self) -> Self:
        await self.start()  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()  # type: ignore[attr-defined]


@dataclass
class RecordedRequest:
    """One API call as the fake received it.

    ``time`` is ``time.monotonic()`` so tests can assert on spacing between calls
    (e.g. that a client honoured ``retry_after``); ``status`` is the HTTP status answered
    (None until then) and ``retry_after`` the wait a 429 asked for. ``client_port`` tells
    an adapter's clients apart (replies and best-effort feedback have pools of their own).
    """

    method: str
    params: dict[str, Any]
    time: float
    http_method: str = "POST"
    status: int | None = None
    retry_after: float | None = None
    client_port: int | None = None  # the caller's TCP port: which connection (client) it used


def client_port(request: web.BaseRequest) -> int | None:
    """The TCP port the request came from (its connection), when the transport knows it."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return peer[1] if isinstance(peer, tuple) and len(peer) >= 2 else None


class Scheduled(Generic[T]):
    """Per-method FIFO of one-shot behaviours, each used for ``count`` calls.

    Used for ``fail_next`` / ``delay_next``: a test schedules a behaviour and the next
    matching API call(s) consume it, which keeps fault injection deterministic.
    """

    def __init__(self) -> None:
        self._items: dict[str, list[list[Any]]] = {}

    def add(self, method: str, item: T, count: int = 1) -> None:
        if count < 1:
            raise ValueError("count must be >= 1")
        self._items.setdefault(method, []).append([item, count])

    def take(self, method: str) -> T | None:
        queue = self._items.get(method)
        if not queue:
            return None
        entry = queue[0]
        entry[1] -= 1
        if entry[1] <= 0:
            queue.pop(0)
        return entry[0]

    def clear(self) -> None:
        self._items.clear()


class FakeServerBase:
    """Lifecycle, request log and condition waiting shared by the fakes.

    Subclasses implement ``_build_app`` and may override ``_before_stop`` to release
    long-lived handlers (long polls, websockets) so shutdown is immediate.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.host = ""
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()
        self._delays: Scheduled[float] = Scheduled()

    # -- lifecycle -----------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://host:port`` of the running server (no trailing slash)."""
        if not self.port:
            raise RuntimeError("fake server is not started")
        return f"http://{self.host}:{self.port}"

    def _build_app(self) -> web.Application:
        raise NotImplementedError

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Bind and serve; ``port=0`` picks a free port. Returns :attr:`url`."""
        runner = web.AppRunner(
            self._build_app(), handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        self._runner = runner
        self.host, self.port = host, runner.addresses[0][1]
        return self.url

    async def stop(self) -> None:
        """Release pending handlers, then close the listener and all connections."""
        if self._runner is None:
            return
        await self._before_stop()
        await self._runner.cleanup()
        self._runner = None

    async def _before_stop(self) -> None:
        """Hook: wake long-lived handlers so ``cleanup`` does not wait for them."""

    # -- observation -----------------------------------------------------------------
    def _notify(self) -> None:
        """Wake every ``wait_for`` (and internal waiter) to re-check its condition."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_changed(self, timeout: float) -> None:
        """Sleep until the next state change or ``timeout`` seconds, whichever is first."""
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` is true; re-checked on every state change.

        Raises ``TimeoutError`` so a broken expectation fails fast with a clear error
        instead of a hanging test.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout}s")
            await self._wait_changed(remaining)

    def _record(self, method: str, params: dict[str, Any], http_method: str) -> RecordedRequest:
        entry = RecordedRequest(method, params, time.monotonic(), http_method)
        self.requests.append(entry)
        self._notify()
        return entry

    def calls(self, method: str) -> list[RecordedRequest]:
        """Recorded requests for one API method (exact method name)."""
        return [r for r in self.requests if r.method == method]

    # -- fault injection ---------------------------------------------------------------
    def delay_next(self, method: str, seconds: float, count: int = 1) -> None:
        """Hold the next ``count`` calls of ``method`` for ``seconds`` before answering."""
        self._delays.add(method, seconds, count)

    async def _apply_delay(self, method: str) -> None:
        seconds = self._delays.take(method)
        if seconds:
            await asyncio.sleep(seconds)
