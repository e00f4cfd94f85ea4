"""FailoverProvider (with real HTTP providers against FakeOpenAI, and scripted stubs) and
ProviderRegistry.chain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from soulflow.contracts import ProviderError, ProviderResult, StreamCallback
from soulflow.providers.failover import FailoverProvider
from soulflow.providers.openai_compat import OpenAICompatibleConfig, OpenAICompatibleProvider
from soulflow.providers.registry import ProviderRegistry
from soulflow.providers.stats import MeasuredProvider
from tests.fakes.openai_api import FakeOpenAI

MESSAGES = [{"role": "user", "content": "hi there"}]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Stub:
    """A provider answering from a script: each entry is reply text or a ProviderError.
    `stream` chunks are sent to on_stream before the entry takes effect."""

    name: str
    script: list[str | ProviderError] = field(default_factory=list)
    stream: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   *, on_stream: StreamCallback | None = None,
                   abort: asyncio.Event | None = None) -> ProviderResult:
        self.calls.append({"messages": messages, "tools": tools, "abort": abort})
        for chunk in self.stream:
            if on_stream is not None:
                await on_stream(chunk)  # type: ignore[misc]  # always the async wrapper here
        outcome = self.script.pop(0) if self.script else f"{self.name} says hi"
        if isinstance(outcome, ProviderError):
            raise outcome
        return ProviderResult(content=outcome, provider=self.name)

    async def close(self) -> None:
        self.closed = True


def down(kind: str = "server", name: str = "") -> ProviderError:
    return ProviderError(kind, f"scripted {kind}", provider=name)


async def expect_error(provider: FailoverProvider, **kwargs: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await provider.chat(MESSAGES, **kwargs)
    return info.value


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


def http_provider(fake: FakeOpenAI, name: str) -> OpenAICompatibleProvider:
    config = OpenAICompatibleConfig(name=name, base_url=fake.base_url, model="m",
                                    max_retries=0)
    return OpenAICompatibleProvider(config)


# -- failing over ---------------------------------------------------------------------------


async def test_http_500_fails_over_to_the_next_provider(fake: FakeOpenAI) -> None:
    fake.script_error(500)  # the first request fails; the next one gets the default echo
    primary, backup = http_provider(fake, "primary"), http_provider(fake, "backup")
    clock = Clock()
    chain = FailoverProvider([primary, backup], cooldown_s=30, clock=clock)
    try:
        result = await chain.chat(MESSAGES)
    finally:
        await primary.close()
        await backup.close()
    assert (result.content, result.provider) == ("echo: hi there", "backup")
    assert len(fake.requests) == 2
    first, second = chain.status()
    assert first["name"] == "primary" and first["down"] and first["down_until"] == 1030.0
    assert "server" in first["last_error"] and "HTTP 500" in first["last_error"]
    assert second == {"name": "backup", "down": False, "down_until": None, "retry_in_s": 0.0,
                      "last_error": None}


@pytest.mark.parametrize(
    "kind", ["rate_limited", "server", "timeout", "network", "not_configured", "auth"]
)
async def test_down_or_misconfigured_provider_fails_over(kind: str) -> None:
    a, b = Stub("a", [down(kind)]), Stub("b")
    result = await FailoverProvider([a, b]).chat(MESSAGES)
    assert (result.content, result.provider) == ("b says hi", "b")


@pytest.mark.parametrize("kind", ["bad_request", "aborted", "bad_response"])
async def test_errors_the_next_provider_would_repeat_are_raised_at_once(kind: str) -> None:
    a, b = Stub("a", [down(kind)]), Stub("b")
    chain = FailoverProvider([a, b])
    assert (await expect_error(chain)).kind == kind
    assert b.calls == []
    assert chain.status()[0]["down"] is False  # not the provider's fault


async def test_arguments_pass_through_unchanged() -> None:
    a, b = Stub("a", [down()]), Stub("b")
    tools = [{"type": "function", "function": {"name": "t"}}]
    abort = asyncio.Event()
    await FailoverProvider([a, b]).chat(MESSAGES, tools, abort=abort)
    for stub in (a, b):
        assert stub.calls == [{"messages": MESSAGES, "tools": tools, "abort": abort}]


# -- cooldown -------------------------------------------------------------------------------


async def test_down_provider_is_skipped_until_its_cooldown_passes() -> None:
    clock = Clock()
    a, b = Stub("a", [down()]), Stub("b")
    chain = FailoverProvider([a, b], cooldown_s=30, clock=clock)
    assert (await chain.chat(MESSAGES)).provider == "b"
    clock.now += 29.5
    assert (await chain.chat(MESSAGES)).provider == "b"
    assert len(a.calls) == 1  # skipped while cooling down
    assert chain.status()[0]["retry_in_s"] == 0.5
    clock.now += 0.5
    assert (await chain.chat(MESSAGES)).provider == "a"
    assert chain.status()[0]["down"] is False
    assert chain.status()[0]["last_error"] == "server: scripted server"  # kept for display


async def test_all_down_tries_every_provider_anyway() -> None:
    clock = Clock()
    a, b = Stub("a", [down(), down(), "a is back"]), Stub("b", [down("timeout"), down("auth")])
    chain = FailoverProvider([a, b], clock=clock)
    assert (await expect_error(chain)).kind == "timeout"  # the last provider's error
    assert all(row["down"] for row in chain.status())
    error = await expect_error(chain)  # both down: both tried again, in order
    assert (error.kind, len(a.calls), len(b.calls)) == ("auth", 2, 2)
    result = await chain.chat(MESSAGES)
    assert (result.content, len(b.calls)) == ("a is back", 2)


async def test_skipped_providers_are_not_a_last_resort_while_others_are_up() -> None:
    clock = Clock()
    a, b = Stub("a", [down()]), Stub("b", ["ok", down()])
    chain = FailoverProvider([a, b], clock=clock)
    await chain.chat(MESSAGES)
    clock.now += 1
    assert (await expect_error(chain)).kind == "server"  # b failed; a still cooling down
    assert len(a.calls) == 1


# -- streaming ------------------------------------------------------------------------------


async def test_no_failover_after_text_was_streamed() -> None:
    a, b = Stub("a", [down()], stream=["partial "]), Stub("b")
    chunks: list[str] = []
    chain = FailoverProvider([a, b])
    assert (await expect_error(chain, on_stream=chunks.append)).kind == "server"
    assert chunks == ["partial "] and b.calls == []
    assert chain.status()[0]["down"] is True


class Rewindable:
    """A stream that can take a call's text again (as the daemon's reply streams can)."""

    def __init__(self) -> None:
        self.text = ""
        self.rewinds = 0

    def __call__(self, text: str) -> None:
        self.text += text

    def rewind(self) -> None:
        self.text, self.rewinds = "", self.rewinds + 1


async def test_a_rewindable_stream_fails_over_after_text_and_shows_the_next_answer() -> None:
    a, b = Stub("a", [down()], stream=["partial "]), Stub("b", stream=["whole ", "answer"])
    stream = Rewindable()
    result = await FailoverProvider([a, b]).chat(MESSAGES, on_stream=stream)
    assert result.provider == "b"
    assert (stream.text, stream.rewinds) == ("whole answer", 1)


async def test_failover_before_any_text_streams_from_the_next_provider() -> None:
    a, b = Stub("a", [down()], stream=[""]), Stub("b", stream=["hel", "lo"])
    chunks: list[str] = []

    async def on_stream(text: str) -> None:
        chunks.append(text)

    result = await FailoverProvider([a, b]).chat(MESSAGES, on_stream=on_stream)
    assert result.provider == "b"
    assert chunks == ["", "hel", "lo"]  # an empty chunk is not text the user saw


async def test_streaming_http_provider_through_failover(fake: FakeOpenAI) -> None:
    fake.script_error(503)
    fake.script_reply("streamed reply here")
    primary, backup = http_provider(fake, "primary"), http_provider(fake, "backup")
    chunks: list[str] = []
    try:
        result = await FailoverProvider([primary, backup]).chat(MESSAGES, on_stream=chunks.append)
    finally:
        await primary.close()
        await backup.close()
    assert result.provider == "backup"
    assert "".join(chunks) == result.content == "streamed reply here"


# -- naming, closing, registry --------------------------------------------------------------


async def test_name_and_ownership() -> None:
    a, b = Stub("a"), Stub("b")
    chain = FailoverProvider([a, b])
    assert chain.name == "failover(a,b)"
    await chain.close()
    assert not a.closed  # the registry owns them
    await FailoverProvider([a, b], owns_providers=True).close()
    assert a.closed and b.closed
    with pytest.raises(ValueError):
        FailoverProvider([])


def registry_of(*names: str, default: str | None = None) -> ProviderRegistry:
    registry = ProviderRegistry()
    for name in names:
        registry.register(Stub(name))
    if default:
        registry.set_default(default)
    return registry


def test_chain_of_one_is_the_provider_itself_measured() -> None:
    registry = registry_of("only")
    chain = registry.chain()
    assert isinstance(chain, MeasuredProvider) and chain.inner is registry.get("only")


def test_chain_starts_with_the_default() -> None:
    registry = registry_of("a", "b", "c", default="b")
    chain = registry.chain()
    assert isinstance(chain, FailoverProvider)
    assert chain.name == "failover(b,a,c)"
    assert [p.inner for p in chain.providers] == [registry.get(n) for n in ("b", "a", "c")]
    assert registry.chain(["c"]).name == "failover(b,c)"
    assert registry.chain(["c", "b", "a"]).name == "failover(b,c,a)"
    assert registry.chain([]).inner is registry.get("b")


def test_chain_errors() -> None:
    with pytest.raises(ProviderError) as info:
        registry_of().chain()
    assert info.value.kind == "not_configured"
    with pytest.raises(ProviderError) as info:
        registry_of("a", "b").chain(["nope"])
    assert info.value.kind == "not_configured" and "'nope'" in str(info.value)
