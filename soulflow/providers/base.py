"""The provider contract: one chat turn against a model, with streaming and abort.

Errors are raised, never returned as message content, so callers can tell a model's answer
from a failure and decide what the user sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

StreamCallback = Callable[[str], Awaitable[None] | None]


@dataclass(slots=True)
class ToolCall:
    """A tool call requested by the model (`arguments` already parsed from JSON when possible)."""

    id: str
    name: str
    arguments: dict[str, Any] | str


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass(slots=True)
class ProviderResult:
    """A model turn: text content and/or tool calls."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    provider: str = ""
    model: str = ""


class ProviderError(Exception):
    """A provider failed. `kind` is a short normalised category shown to users and in logs.

    kinds: `not_configured`, `auth`, `rate_limited`, `server`, `timeout`, `network`,
    `bad_response`, `aborted`, `bad_request`.
    """

    def __init__(self, kind: str, message: str, *, provider: str = "", status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.provider = provider
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.kind in {"rate_limited", "server", "timeout", "network"}

    def __str__(self) -> str:
        prefix = f"{self.provider}: " if self.provider else ""
        return f"{prefix}{self.kind}: {self.args[0]}"


class Provider(Protocol):
    """What the agent needs from a model backend."""

    name: str

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_stream: StreamCallback | None = None,
        abort: asyncio.Event | None = None,
    ) -> ProviderResult: ...

    async def aclose(self) -> None: ...
