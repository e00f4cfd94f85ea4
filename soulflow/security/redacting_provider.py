"""The last net before a model: every request's messages go through the daemon's redactor.

Sealing keeps chat input clean and tool output is masked where secrets were opened, but a
credential can still reach a conversation by other roads (a tool printing a `.env` token it
found in some file, a provider error echoed back, an old session written before a detector
existed). A model is a third party: this wrapper redacts every string of every message before
the wrapped provider sees it, so the request body on the wire never holds a known credential.

It wraps any `soulflow.providers.base.Provider` (duck-typed here: security does not import
providers) and forwards every other attribute unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from soulflow.security.redact import Redactor


class RedactingProvider:
    """A provider whose ``chat`` sees ``messages`` with known credentials redacted."""

    def __init__(self, inner: Any, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    @property
    def name(self) -> str:
        return str(self._inner.name)

    @property
    def inner(self) -> Any:
        """The wrapped provider (tests and status pages look through the wrapper)."""
        return self._inner

    async def chat(self, messages: list[dict[str, Any]],
                   tools: list[dict[str, Any]] | None = None, *, on_stream: Any = None,
                   abort: asyncio.Event | None = None) -> Any:
        clean = self._redactor.redact_strings(messages)
        return await self._inner.chat(clean, tools, on_stream=on_stream, abort=abort)

    async def close(self) -> None:
        await self._inner.close()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)
