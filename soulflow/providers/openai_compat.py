"""A provider for any server speaking the OpenAI `POST /chat/completions` dialect.

Most model servers (OpenAI, OpenRouter, vLLM, llama.cpp, Ollama, ...) accept this shape, so one
careful client covers them all: failures become `ProviderError`s with a normalised kind, transient
ones are retried with jittered backoff (never after text reached the user), and an abort stops
the HTTP request at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import random as _random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport

from soulflow.contracts import (
    ProviderError,
    ProviderResult,
    StreamCallback,
    can_rewind,
    rewind,
)
from soulflow.providers.base import race_abort, refuse_unstartable_turn
from soulflow.providers.openai_parse import (
    ParseError,
    StreamAccumulator,
    loads_json,
    parse_completion,
    parse_retry_after,
    snippet,
)

SleepFn = Callable[[float], Awaitable[None]]
RandomFn = Callable[[], float]


@dataclass(slots=True)
class OpenAICompatibleConfig:
    """Where and how to reach one OpenAI-compatible endpoint.

    `max_retries` counts retries, so a request is attempted at most `max_retries + 1` times.
    `stream_usage` asks for token usage in streamed replies (`stream_options.include_usage`);
    turn it off for servers that reject that field.
    """

    name: str
    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 3
    retry_base_delay_s: float = 1.0
    retry_max_delay_s: float = 30.0
    extra_headers: dict[str, str] = field(default_factory=dict)
    stream_usage: bool = True


@dataclass(slots=True)
class _CallState:
    """Shared by the attempts of one call; once text was `streamed`, a retry would repeat it."""

    streamed: bool = False
    retry_after: float | None = None


class OpenAICompatibleProvider:
    """`Provider` implementation for OpenAI-compatible chat completion endpoints."""

    def __init__(
        self,
        config: OpenAICompatibleConfig,
        *,
        sleep: SleepFn = asyncio.sleep,
        random: RandomFn = _random.random,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self._sleep = sleep
        self._random = random
        # Parsed once: httpx re-parses a str URL on every request (a measurable cost per chat).
        self._url = httpx.URL(config.base_url.rstrip("/") + "/chat/completions")
        # Messages name the host only: URLs can carry credentials in userinfo or the query.
        self._host = self._url.netloc.decode("ascii", "replace")
        self._closed = False
        headers = dict(config.extra_headers)
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        # aiohttp's connection pool under httpx's API: ~5x the request rate of httpx's own
        # pool at 64 concurrent chats (bench/pipeline.py), same exceptions and streaming.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s),
            headers=headers,
            transport=transport or AiohttpTransport(trust_env=False),
        )

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   *, on_stream: StreamCallback | None = None,
                   abort: asyncio.Event | None = None) -> ProviderResult:
        """Run one chat turn; raises ProviderError on any failure, including abort."""
        refuse_unstartable_turn(self._closed, abort, self._error)
        payload: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if tools:
            payload["tools"] = tools
        if on_stream is not None:
            payload["stream"] = True
            if self.config.stream_usage:
                payload["stream_options"] = {"include_usage": True}
        work = self._with_retries(payload, on_stream)
        return await (work if abort is None else race_abort(work, abort, lambda: self._error(
            "aborted", "the request was aborted while in flight")))

    async def close(self) -> None:
        """Close the HTTP client and its pooled connections; later calls fail fast."""
        self._closed = True
        await self._client.aclose()

    async def _with_retries(
        self, payload: dict[str, Any], on_stream: StreamCallback | None
    ) -> ProviderResult:
        state, retry = _CallState(), 0
        while True:
            try:
                if on_stream is None:
                    return await self._post_json(payload, state)
                return await self._post_stream(payload, on_stream, state)
            except ProviderError as exc:
                if not exc.retryable or retry >= self.config.max_retries or (
                        state.streamed and not can_rewind(on_stream)):
                    raise
                if state.streamed:  # the stream shows the retried call from its start
                    rewind(on_stream)
                    state.streamed = False
                await self._sleep(self._backoff_delay(retry, state.retry_after))
                state.retry_after, retry = None, retry + 1

    def _backoff_delay(self, retry: int, retry_after: float | None) -> float:
        """Full-jitter exponential backoff, unless the server said how long to wait."""
        cap = self.config.retry_max_delay_s
        if retry_after is not None:
            return min(retry_after, cap)
        return self._random() * min(cap, self.config.retry_base_delay_s * (2**retry))

    async def _post_json(self, payload: dict[str, Any], state: _CallState) -> ProviderResult:
        with self._normalised_errors():
            response = await self._client.post(self._url, content=_encode(payload),
                                               headers=_JSON_HEADERS)
            self._check_status(response, response.text, state)
            return self._finish(parse_completion(loads_json(response.text)))

    async def _post_stream(
        self, payload: dict[str, Any], on_stream: StreamCallback, state: _CallState
    ) -> ProviderResult:
        """Consume an SSE reply, forwarding text deltas as they arrive."""
        with self._normalised_errors():
            async with self._client.stream("POST", self._url, content=_encode(payload),
                                           headers=_JSON_HEADERS) as response:
                body = await response.aread() if response.status_code >= 300 else b""
                self._check_status(response, body.decode("utf-8", "replace"), state)
                acc = StreamAccumulator()
                async for line in response.aiter_lines():
                    text = acc.feed(line)
                    if text:
                        state.streamed = True
                        await _emit(on_stream, text)
                    if acc.done:
                        break
                return self._finish(acc.result())

    @contextlib.contextmanager
    def _normalised_errors(self) -> Iterator[None]:
        """Map transport failures and parse errors inside the block to ProviderErrors."""
        try:
            yield
        except ParseError as exc:
            raise self._error(exc.kind, exc.args[0]) from None
        except httpx.TimeoutException as exc:
            if not _is_real_timeout(exc):
                raise self._error("network", f"connection to {self._host} failed: "
                                  f"{type(exc.__cause__).__name__}: {snippet(str(exc))}") from None
            message = f"no answer within {self.config.timeout_s:g}s ({type(exc).__name__})"
            raise self._error("timeout", message) from None
        except httpx.TransportError as exc:
            message = (
                f"connection to {self._host} failed: {type(exc).__name__}: {snippet(str(exc))}"
            )
            raise self._error("network", message) from None

    def _check_status(self, response: httpx.Response, body: str, state: _CallState) -> None:
        """Raise the normalised error for a non-2xx response, noting any Retry-After."""
        status = response.status_code
        if 200 <= status < 300:
            return
        state.retry_after = parse_retry_after(response.headers.get("retry-after"))
        message = f"HTTP {status} from {self._host}: {snippet(body) or '(empty body)'}"
        raise self._error(_status_kind(status), message, status=status)

    def _finish(self, result: ProviderResult) -> ProviderResult:
        result.provider = self.name
        result.model = result.model or self.config.model
        return result

    def _error(self, kind: str, message: str, *, status: int | None = None) -> ProviderError:
        """Build a ProviderError, scrubbing the API key in case a server or library echoed it."""
        key = self.config.api_key
        if key:
            message = message.replace(key, "***")
        return ProviderError(kind, message, provider=self.name, status=status)


_STATUS_KINDS = {401: "auth", 403: "auth", 408: "timeout", 429: "rate_limited"}


def _status_kind(status: int) -> str:
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    return "server" if status >= 500 else "bad_request" if status >= 400 else "bad_response"


async def _emit(on_stream: StreamCallback, text: str) -> None:
    """Call a stream callback that may be sync or async."""
    result = on_stream(text)
    if inspect.isawaitable(result):
        await result


def _is_real_timeout(exc: httpx.TimeoutException) -> bool:
    """httpx-aiohttp labels every aiohttp connection error a ConnectTimeout; tell them apart."""
    cause = exc.__cause__
    if cause is None:
        return True
    return isinstance(cause, TimeoutError) or "Timeout" in type(cause).__name__


_JSON_HEADERS = {"Content-Type": "application/json"}


def _encode(payload: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON, encoded here once rather than by httpx's `json=` path."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
