"""Failover across providers: when one is down, the next one answers.

A provider that fails in a way the next one would not (overloaded, unreachable, not logged in)
is marked down for a cooldown, so later turns do not wait on it again. Failures the next provider
would repeat (a bad request) or that the user caused (an abort) are raised at once, and so is any
failure after text already reached the user: a second answer would be spliced onto the first.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from soulflow.contracts import (
    Provider,
    ProviderError,
    ProviderResult,
    StreamCallback,
    can_rewind,
    rewind,
)
from soulflow.logs import log_context

log = logging.getLogger(__name__)

# Retryable kinds mean "down for now"; not_configured/auth mean "cannot work until fixed".
FAILOVER_KINDS = frozenset({"rate_limited", "server", "timeout", "network", "not_configured",
                            "auth"})


@dataclass(slots=True)
class _Health:
    down_until: float | None = None
    last_error: str | None = None

    def is_down(self, now: float) -> bool:
        return self.down_until is not None and self.down_until > now


class _StreamWatch:
    """Wraps an on_stream callback to note whether any text reached the user."""

    def __init__(self, on_stream: StreamCallback) -> None:
        self._on_stream = on_stream
        self.streamed = False
        if can_rewind(on_stream):  # so is this one: a provider's own retry may rewind it
            self.rewind = self._rewind

    async def __call__(self, text: str) -> None:
        if text:
            self.streamed = True
        result = self._on_stream(text)
        if inspect.isawaitable(result):
            await result

    def _rewind(self) -> None:
        rewind(self._on_stream)
        self.streamed = False


class FailoverProvider:
    """`Provider` trying `providers` in order, skipping those that recently failed."""

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        owns_providers: bool = False,
    ) -> None:
        """`owns_providers`: close them in `close` (off when a registry owns and closes them)."""
        if not providers:
            raise ValueError("FailoverProvider needs at least one provider")
        self.providers = list(providers)
        self.name = f"failover({','.join(p.name for p in self.providers)})"
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._owns = owns_providers
        self._health = [_Health() for _ in self.providers]

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                   *, on_stream: StreamCallback | None = None,
                   abort: asyncio.Event | None = None) -> ProviderResult:
        """Ask each available provider in turn; raises the last error when none answers."""
        last_error: ProviderError | None = None
        for index in self._candidates():
            provider = self.providers[index]
            watch = _StreamWatch(on_stream) if on_stream is not None else None
            try:
                with log_context(provider=provider.name):
                    result = await provider.chat(messages, tools, on_stream=watch, abort=abort)
            except ProviderError as exc:
                if exc.kind not in FAILOVER_KINDS:
                    raise
                self._mark_down(index, exc)
                if watch is not None and watch.streamed:
                    if not can_rewind(watch):
                        raise  # text reached the user: another provider would repeat it
                    rewind(watch)  # the next provider's text replaces it
                last_error = exc
                continue
            self._health[index].down_until = None
            result.provider = result.provider or provider.name
            return result
        assert last_error is not None  # there is always at least one candidate
        raise last_error

    def status(self) -> list[dict[str, Any]]:
        """Per provider, in order: `name`, `down` (now), `down_until` (a clock reading, None when
        up), `retry_in_s` and `last_error` (kept after recovery, for the dashboard)."""
        now = self._clock()
        rows = []
        for provider, health in zip(self.providers, self._health, strict=True):
            until = health.down_until if health.is_down(now) else None
            rows.append({
                "name": provider.name,
                "down": until is not None,
                "down_until": until,
                "retry_in_s": 0.0 if until is None else round(until - now, 3),
                "last_error": health.last_error,
            })
        return rows

    async def close(self) -> None:
        """Close the wrapped providers only when this owns them (see __init__)."""
        if not self._owns:
            return
        for provider in self.providers:
            try:
                await provider.close()
            except Exception:
                log.warning("closing provider %r failed", provider.name, exc_info=True)

    def _candidates(self) -> list[int]:
        """Providers not cooling down, in order; all of them when every one is down, since a
        possibly-recovered provider beats a certain failure."""
        now = self._clock()
        up = [i for i, health in enumerate(self._health) if not health.is_down(now)]
        return up or list(range(len(self.providers)))

    def _mark_down(self, index: int, exc: ProviderError) -> None:
        health = self._health[index]
        health.down_until = self._clock() + self.cooldown_s
        health.last_error = str(exc)
        log.warning("provider %r is down for %gs: %s", self.providers[index].name,
                    self.cooldown_s, exc)
