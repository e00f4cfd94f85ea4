"""Per-provider health and latency, measured where every model call passes.

`ProviderRegistry.chain` wraps each provider in a `MeasuredProvider`, so the failover
wrapper, the agent loop, the heartbeat and the planner all feed the same record without
knowing about it. The dashboard shows the record (last N latencies, errors by kind) and
`/metrics` exports it. An aborted call (the user's /stop) is not a provider error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soulflow import tracing
from soulflow.contracts import Provider, ProviderError, ProviderResult, StreamCallback
from soulflow.telemetry import LATENCY_BUCKETS_S, Histogram, LatencyWindow


@dataclass(slots=True)
class ProviderStats:
    """One provider's calls since the daemon started."""

    name: str
    calls: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # by ProviderError.kind
    latency: LatencyWindow = field(default_factory=LatencyWindow)
    histogram: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    last_ok_at: float | None = None
    last_error: str = ""
    last_error_at: float | None = None
    in_flight: int = 0

    def succeeded(self, seconds: float, at: float) -> None:
        self.calls += 1
        self.latency.add(seconds)
        self.histogram.observe(seconds)
        self.last_ok_at = at

    def failed(self, kind: str, error: str, seconds: float, at: float) -> None:
        self.calls += 1
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.histogram.observe(seconds)
        self.last_error, self.last_error_at = error[:300], at

    @property
    def healthy(self) -> bool:
        """Its last outcome was an answer (or it has not been asked yet)."""
        if self.last_error_at is None:
            return True
        return self.last_ok_at is not None and self.last_ok_at > self.last_error_at

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "errors": dict(self.errors),
                "error_count": sum(self.errors.values()), "healthy": self.healthy,
                "in_flight": self.in_flight, "last_ok_at": self.last_ok_at,
                "last_error": self.last_error, "last_error_at": self.last_error_at,
                "latency": self.latency.summary()}


class ProviderStatsBook:
    """The stats records of a registry's providers, by name."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._records: dict[str, ProviderStats] = {}
        self.clock = clock

    def get(self, name: str) -> ProviderStats:
        record = self._records.get(name)
        if record is None:
            record = self._records[name] = ProviderStats(name)
        return record

    def all(self) -> list[ProviderStats]:
        return list(self._records.values())


class MeasuredProvider:
    """A `Provider` that times each call and records its outcome in `stats`."""

    def __init__(self, inner: Provider, book: ProviderStatsBook) -> None:
        self.inner = inner
        self.name = inner.name
        self._book = book

    async def chat(self, messages: list[dict[str, Any]],
                   tools: list[dict[str, Any]] | None = None, *,
                   on_stream: StreamCallback | None = None,
                   abort: asyncio.Event | None = None) -> ProviderResult:
        if tracing.active():
            return await self._traced_chat(messages, tools, on_stream, abort)
        return await self._chat(messages, tools, on_stream, abort)

    async def _traced_chat(self, messages: list[dict[str, Any]],
                           tools: list[dict[str, Any]] | None, on_stream: StreamCallback | None,
                           abort: asyncio.Event | None) -> ProviderResult:
        """The call in a GenAI client span: the provider and model names, the token counts
        the provider parsed; never the prompt, the answer or an error's message."""
        model = requested_model(self.inner)
        with tracing.span(f"chat {model}" if model else "chat", {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.name,
                "gen_ai.system": self.name, "gen_ai.request.model": model},
                kind=tracing.Kind.CLIENT) as span:
            try:
                result = await self._chat(messages, tools, on_stream, abort)
            except ProviderError as exc:
                if exc.kind == "aborted":  # the user's /stop: not the model's failure
                    span.cancel()
                else:
                    span.fail(exc.kind)
                raise
            if result.model:
                span.set("gen_ai.response.model", result.model[:200])
            span.set("gen_ai.usage.input_tokens", result.usage.prompt_tokens)
            span.set("gen_ai.usage.output_tokens", result.usage.completion_tokens)
            if result.finish_reason:
                span.set("gen_ai.response.finish_reasons", [result.finish_reason[:40]])
            span.set("soulflow.tool_calls", len(result.tool_calls))
            return result

    async def _chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    on_stream: StreamCallback | None,
                    abort: asyncio.Event | None) -> ProviderResult:
        record = self._book.get(self.name)
        started = time.monotonic()
        record.in_flight += 1
        try:
            result = await self.inner.chat(messages, tools, on_stream=on_stream, abort=abort)
        except ProviderError as exc:
            if exc.kind != "aborted":
                record.failed(exc.kind, str(exc), time.monotonic() - started, self._book.clock())
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            record.failed("bad_response", f"{type(exc).__name__}: {exc}",
                          time.monotonic() - started, self._book.clock())
            raise
        finally:
            record.in_flight -= 1
        record.succeeded(time.monotonic() - started, self._book.clock())
        return result

    def __getattr__(self, name: str) -> Any:
        """Anything else (a CLI provider's settings, `status()`) is the wrapped provider's."""
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()


def requested_model(provider: Provider) -> str:
    """The model a provider asks for, as configured (an OpenAI-compatible endpoint's
    `config.model`, the embedded model's alias); "" when it has none (a CLI)."""
    config = getattr(provider, "config", None)
    model = getattr(config, "model", None) or getattr(provider, "model", None)
    return str(model)[:200] if isinstance(model, str) else ""
