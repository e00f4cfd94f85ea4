"""discord.py reads gateway frames and REST bodies leniently: bytes that are not UTF-8 become
U+FFFD instead of raising.

discord.py decodes strictly. One message holding a byte that is not UTF-8 made the gateway
connection fail (and the client reconnect) and the REST catch-up of that channel fail, so
the message was neither answered nor recorded. Decoding with `errors="replace"` lets it in;
the manager's edge normalisation then treats it like any other text (python-telegram-bot and
the Slack adapter do the same). Both hooks are module globals of discord.py, so they are
installed while an adapter runs and removed with its API URL redirection (the adapter's
`_redirect` / `_restore_urls`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord.http
import discord.utils

JsonOrText = Callable[[aiohttp.ClientResponse], Awaitable[Any]]


def install() -> Callable[[], None] | None:
    """Install both hooks; returns the function that removes them (None when they were
    installed already, by another adapter: that one removes them)."""
    original_context: Any = discord.utils._ActiveDecompressionContext
    if getattr(original_context, "soulflow_lenient", False):
        return None
    original_json_or_text: JsonOrText = discord.http.json_or_text

    class LenientDecompression:
        """The library's decompressor; a frame that is not UTF-8 is decoded with U+FFFD."""

        COMPRESSION_TYPE: str = original_context.COMPRESSION_TYPE
        soulflow_lenient = True

        def __init__(self) -> None:
            self._inner = original_context()

        def decompress(self, data: bytes, /) -> str | None:
            try:
                result: str | None = self._inner.decompress(data)
            except UnicodeDecodeError as exc:  # `object` is the whole decompressed frame
                return bytes(exc.object).decode("utf-8", "replace")
            return result

    async def lenient_json_or_text(response: aiohttp.ClientResponse) -> Any:
        try:
            return await original_json_or_text(response)
        except UnicodeDecodeError:
            text = (await response.read()).decode("utf-8", "replace")
            if response.headers.get("content-type") == "application/json":
                return discord.utils._from_json(text)
            return text

    def uninstall() -> None:
        discord.utils._ActiveDecompressionContext = original_context  # type: ignore[misc]
        discord.http.json_or_text = original_json_or_text

    discord.utils._ActiveDecompressionContext = LenientDecompression  # type: ignore[misc]
    discord.http.json_or_text = lenient_json_or_text
    return uninstall
