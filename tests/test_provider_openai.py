"""OpenAICompatibleProvider and ProviderRegistry against the loopback fake (no real sleeps)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from soulflow.contracts import ProviderError, ProviderResult, ToolCall
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.providers.registry import ProviderRegistry
from tests.fakes.openai_api import FakeOpenAI
from tests.waiting import until

API_KEY = "sk-test-SECRET-1234567890"
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


class RecordingSleep:
    """Stands in for asyncio.sleep: records the requested delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@dataclass
class Rig:
    """A fake server plus a factory for providers pointed at it."""

    fake: FakeOpenAI
    sleep: RecordingSleep = field(default_factory=RecordingSleep)
    made: list[OpenAICompatibleProvider] = field(default_factory=list)

    def provider(self, **overrides: Any) -> OpenAICompatibleProvider:
        """Config fields, `sleep`, `random` and `transport` can be overridden; random() is
        pinned to 1.0 by default so backoff delays are predictable."""
        hooks: dict[str, Any] = {"sleep": self.sleep, "random": lambda: 1.0, "transport": None}
        hooks.update({key: overrides.pop(key) for key in list(hooks) if key in overrides})
        options = {"name": "fake", "base_url": self.fake.base_url, "model": "m1"} | overrides
        provider = OpenAICompatibleProvider(OpenAICompatibleConfig(**options), **hooks)
        self.made.append(provider)
        return provider


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async with FakeOpenAI() as fake:
        rig = Rig(fake)
        yield rig
        for provider in rig.made:
            await provider.close()


async def chat_streaming(
    provider: OpenAICompatibleProvider, **kwargs: Any
) -> tuple[ProviderResult, list[str]]:
    chunks: list[str] = []
    result = await provider.chat(MESSAGES, on_stream=chunks.append, **kwargs)
    return result, chunks


async def expect_error(call: Awaitable[Any]) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await call
    return info.value


# -- happy paths ----------------------------------------------------------------------------


async def test_plain_reply(rig: Rig) -> None:
    rig.fake.script_reply("Hello, world")
    result = await rig.provider().chat(MESSAGES)
    assert result.content == "Hello, world"
    assert result.tool_calls == []
    assert result.finish_reason == "stop"
    assert (result.provider, result.model) == ("fake", "m1")
    assert result.usage.total_tokens == result.usage.prompt_tokens + 2 > 2
    sent = rig.fake.requests[0].json
    assert sent["model"] == "m1" and sent["messages"] == MESSAGES
    assert "stream" not in sent and "tools" not in sent
    assert "authorization" not in rig.fake.requests[0].headers  # no api_key configured


async def test_streaming_collects_chunks(rig: Rig) -> None:
    rig.fake.script_reply("one two three four")
    result, chunks = await chat_streaming(rig.provider())
    assert len(chunks) == 4
    assert "".join(chunks) == result.content == "one two three four"
    assert result.finish_reason == "stop"
    assert result.usage.completion_tokens == 4
    assert rig.fake.requests[0].json["stream"] is True


async def test_streaming_accepts_async_callback(rig: Rig) -> None:
    chunks: list[str] = []

    async def on_stream(text: str) -> None:
        await asyncio.sleep(0)
        chunks.append(text)

    result = await rig.provider().chat(MESSAGES, on_stream=on_stream)
    assert "".join(chunks) == result.content == "echo: hi there"


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_call(rig: Rig, stream: bool) -> None:
    rig.fake.script_tool_call("get_weather", {"city": "Paris", "days": 3}, call_id="call_w")
    chunks: list[str] = []
    result = await rig.provider().chat(MESSAGES, TOOLS, on_stream=chunks.append if stream else None)
    assert result.tool_calls == [ToolCall("call_w", "get_weather", {"city": "Paris", "days": 3})]
    assert result.finish_reason == "tool_calls"
    assert result.content == "" and chunks == []
    assert rig.fake.requests[0].json["tools"] == TOOLS


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_call_with_invalid_json_keeps_raw_string(rig: Rig, stream: bool) -> None:
    raw = '{"city": "Paris",,}'
    rig.fake.script_tool_call("get_weather", raw, call_id="call_bad")
    result = await rig.provider().chat(MESSAGES, TOOLS, on_stream=[].append if stream else None)
    assert result.tool_calls == [ToolCall("call_bad", "get_weather", raw)]


# -- retries --------------------------------------------------------------------------------


async def test_retries_5xx_with_exponential_backoff(rig: Rig) -> None:
    rig.fake.fail_next(2, status=500)
    rig.fake.script_reply("finally")
    result = await rig.provider().chat(MESSAGES)
    assert result.content == "finally"
    assert rig.sleep.delays == [1.0, 2.0]
    assert len(rig.fake.requests) == 3


async def test_backoff_is_jittered_and_capped(rig: Rig) -> None:
    rig.fake.fail_next(4, status=503)
    limits = {"retry_base_delay_s": 10, "retry_max_delay_s": 25}
    await rig.provider(max_retries=4, random=lambda: 0.5, **limits).chat(MESSAGES)
    assert rig.sleep.delays == [5.0, 10.0, 12.5, 12.5]


async def test_rate_limit_honours_retry_after(rig: Rig) -> None:
    rig.fake.script_error(429, retry_after=7)
    rig.fake.script_error(429, retry_after=3600)
    result = await rig.provider().chat(MESSAGES)
    assert result.content == "echo: hi there"
    assert rig.sleep.delays == [7.0, 30.0]  # the second is capped by retry_max_delay_s


async def test_retries_exhausted_raises_server_error(rig: Rig) -> None:
    rig.fake.fail_next(10, status=502)
    error = await expect_error(rig.provider(max_retries=3).chat(MESSAGES))
    assert (error.kind, error.status, error.provider) == ("server", 502, "fake")
    assert error.retryable
    assert "502" in str(error) and "scripted error 502" in str(error)
    assert len(rig.fake.requests) == 4 and len(rig.sleep.delays) == 3


AUTH_ERRORS = [(401, "auth"), (403, "auth")]


@pytest.mark.parametrize(
    ("status", "kind"), AUTH_ERRORS + [(status, "bad_request") for status in (400, 404, 422)]
)
async def test_client_errors_are_not_retried(rig: Rig, status: int, kind: str) -> None:
    rig.fake.script_error(status)
    error = await expect_error(rig.provider().chat(MESSAGES))
    assert (error.kind, error.status) == (kind, status)
    assert len(rig.fake.requests) == 1 and rig.sleep.delays == []


@pytest.mark.parametrize("stream", [False, True])
async def test_garbage_body_is_bad_response(rig: Rig, stream: bool) -> None:
    rig.fake.script_garbage()
    provider = rig.provider()
    error = await expect_error(provider.chat(MESSAGES, on_stream=[].append if stream else None))
    assert error.kind == "bad_response"
    assert "not json" in str(error)
    assert rig.sleep.delays == []


async def test_dropped_connection_is_network_error_after_retries(rig: Rig) -> None:
    for _ in range(3):
        rig.fake.script_drop()
    error = await expect_error(rig.provider(max_retries=2).chat(MESSAGES))
    assert error.kind == "network"
    assert len(rig.fake.requests) == 3 and rig.sleep.delays == [1.0, 2.0]


async def test_dropped_connection_then_success(rig: Rig) -> None:
    rig.fake.script_drop()
    result, chunks = await chat_streaming(rig.provider())
    assert "".join(chunks) == result.content == "echo: hi there"


async def test_unreachable_server_is_network_error(rig: Rig) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = rig.provider(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    error = await expect_error(provider.chat(MESSAGES))
    assert error.kind == "network" and rig.sleep.delays == [1.0]


async def test_timeout(rig: Rig) -> None:
    rig.fake.script_delay(30)
    error = await expect_error(rig.provider(timeout_s=0.1, max_retries=0).chat(MESSAGES))
    assert error.kind == "timeout"


# -- streaming edge cases (scripted transports) ---------------------------------------------


def sse_transport(lines: list[bytes], fail_after: bool) -> httpx.MockTransport:
    """A transport answering with the given SSE lines, then optionally a broken connection."""

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for line in lines:
                yield line
            if fail_after:
                raise httpx.ReadError("connection reset by peer")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    return httpx.MockTransport(handler)


def chunk(content: str) -> bytes:
    return b'data: {"choices": [{"index": 0, "delta": {"content": "%s"}}]}\n\n' % content.encode()


async def test_no_retry_after_text_was_streamed(rig: Rig) -> None:
    provider = rig.provider(transport=sse_transport([chunk("partial ")], fail_after=True))
    chunks: list[str] = []
    error = await expect_error(provider.chat(MESSAGES, on_stream=chunks.append))
    assert error.kind == "network"
    assert chunks == ["partial "] and rig.sleep.delays == []


async def test_a_rewindable_stream_is_retried_after_text_from_its_start(rig: Rig) -> None:
    """A callback with `rewind()` (the daemon's reply streams) takes the call's text again,
    so a connection lost mid-stream is retried like any other."""
    attempts = [sse_transport([chunk("partial ")], fail_after=True),
                sse_transport([chunk("whole "), chunk("answer"), b"data: [DONE]\n\n"],
                              fail_after=False)]

    async def handler(request: httpx.Request) -> httpx.Response:
        return await attempts.pop(0).handle_async_request(request)

    seen: list[str] = []

    class Stream:
        def __call__(self, text: str) -> None:
            seen.append(text)

        def rewind(self) -> None:
            seen.append("<rewind>")

    provider = rig.provider(transport=httpx.MockTransport(handler))
    result = await provider.chat(MESSAGES, on_stream=Stream())
    assert result.content == "whole answer"
    assert seen == ["partial ", "<rewind>", "whole ", "answer"]


async def test_stream_without_done_is_bad_response(rig: Rig) -> None:
    provider = rig.provider(transport=sse_transport([chunk("cut")], fail_after=False))
    error = await expect_error(provider.chat(MESSAGES, on_stream=[].append))
    assert error.kind == "bad_response" and "[DONE]" in str(error)


async def test_stream_ignores_comments_and_events(rig: Rig) -> None:
    lines = [b": keep-alive\n\n", b"event: message\n", chunk("ok"), b"data: [DONE]\n\n"]
    provider = rig.provider(transport=sse_transport(lines, fail_after=False))
    result, chunks = await chat_streaming(provider)
    assert result.content == "ok" and chunks == ["ok"]


@pytest.mark.parametrize("body", [{"id": "x"}, {"choices": []}, [1, 2], {"choices": [{}]}])
async def test_missing_choices_is_bad_response(rig: Rig, body: Any) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    error = await expect_error(rig.provider(transport=transport).chat(MESSAGES))
    assert error.kind == "bad_response"


# -- abort ----------------------------------------------------------------------------------


async def test_abort_before_request(rig: Rig) -> None:
    abort = asyncio.Event()
    abort.set()
    error = await expect_error(rig.provider().chat(MESSAGES, abort=abort))
    assert error.kind == "aborted" and rig.fake.requests == []


async def test_abort_mid_stream_hangs_up_the_call(rig: Rig) -> None:
    """The next chunk is ten minutes away: the aborted error comes back because the abort
    closed the stream, which the server sees as the client hanging up."""
    rig.fake.script_reply("first second third fourth", chunk_delay_s=600)
    abort = asyncio.Event()
    chunks: list[str] = []

    def on_stream(text: str) -> None:
        chunks.append(text)
        abort.set()

    call = rig.provider().chat(MESSAGES, on_stream=on_stream, abort=abort)
    error = await asyncio.wait_for(expect_error(call), 60)
    assert error.kind == "aborted"
    assert chunks == ["first "]
    await until(lambda: rig.fake.requests[0].hung_up, timeout=30)


async def test_abort_while_waiting_for_response(rig: Rig) -> None:
    """The answer is ten minutes away: the abort ends the call and hangs up the request."""
    rig.fake.script_delay(600)
    abort = asyncio.Event()
    call = asyncio.create_task(rig.provider().chat(MESSAGES, abort=abort))
    async with asyncio.timeout(30):
        await rig.fake.wait_for_requests(1)
    abort.set()
    async with asyncio.timeout(60):
        error = await expect_error(call)
    assert error.kind == "aborted"
    await until(lambda: rig.fake.requests[0].hung_up, timeout=30)


async def test_abort_during_backoff(rig: Rig) -> None:
    abort = asyncio.Event()

    async def sleep_until_aborted(seconds: float) -> None:
        abort.set()
        await asyncio.Event().wait()  # would block forever without the abort

    rig.fake.fail_next(1)
    provider = rig.provider(sleep=sleep_until_aborted)
    error = await expect_error(provider.chat(MESSAGES, abort=abort))
    assert error.kind == "aborted" and len(rig.fake.requests) == 1


# -- credentials and lifecycle --------------------------------------------------------------


async def test_api_key_sent_as_bearer_and_never_leaked(rig: Rig) -> None:
    provider = rig.provider(api_key=API_KEY, extra_headers={"X-Title": "soulflow"})
    rig.fake.script_error(401, body={"error": {"message": f"Incorrect API key {API_KEY}"}})
    error = await expect_error(provider.chat(MESSAGES))
    assert error.kind == "auth"
    assert API_KEY not in str(error) and API_KEY not in repr(error.args)
    headers = rig.fake.requests[0].headers
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert headers["x-title"] == "soulflow"


async def test_error_snippet_is_short(rig: Rig) -> None:
    rig.fake.script_error(400, body="x" * 5000)
    error = await expect_error(rig.provider().chat(MESSAGES))
    assert "400" in str(error) and len(str(error)) < 320


async def test_closed_provider_fails_fast(rig: Rig) -> None:
    provider = rig.provider()
    await provider.close()
    error = await expect_error(provider.chat(MESSAGES))
    assert error.kind == "not_configured"


# -- registry -------------------------------------------------------------------------------


class StubProvider:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    async def chat(self, *args: Any, **kwargs: Any) -> ProviderResult:
        return ProviderResult(content=self.name, provider=self.name)

    async def close(self) -> None:
        self.closed = True


async def test_registry_lookup_default_and_close() -> None:
    registry = ProviderRegistry()
    assert registry.default_name is None
    stubs = [StubProvider("openai"), StubProvider("local")]
    for stub in stubs:
        registry.register(stub)
    assert registry.names() == ["openai", "local"] and registry.get("local") is stubs[1]
    assert registry.default_name == "openai"
    registry.set_default("local")
    assert registry.default_name == "local" and "local" in registry and len(registry) == 2
    with pytest.raises(ValueError, match="already registered"):
        registry.register(StubProvider("local"))
    await registry.close()
    assert all(stub.closed for stub in stubs)


def test_registry_unknown_name_lists_configured() -> None:
    registry = ProviderRegistry()
    registry.register(StubProvider("openai"))
    registry.register(StubProvider("local"))
    with pytest.raises(ProviderError) as info:
        registry.get("anthropic")
    assert info.value.kind == "not_configured"
    assert "'anthropic'" in str(info.value) and "'openai', 'local'" in str(info.value)
    with pytest.raises(ProviderError):
        registry.set_default("anthropic")
    assert registry.default_name == "openai"
